"""Logit bias, presence/frequency/repetition penalties, min-p and vLLM's stop and length
controls through the official `openai` SDK: its own parameters (`logit_bias`,
`presence_penalty`, `frequency_penalty`) and vLLM's in `extra_body` (`repetition_penalty`,
`min_p`, `min_tokens`, `include_stop_str_in_output`, `truncate_prompt_tokens`), each
changing the output.

Run by crates/server/tests/openai_sdk.rs against a real `rillm serve` on loopback:
    python3 tests/sdk/sampling.py http://127.0.0.1:PORT
"""

import collections
import json
import sys
import urllib.request

import openai


def token_id(base: str, text: str) -> int:
    request = urllib.request.Request(
        base + "/tokenize",
        data=json.dumps({"prompt": text, "add_special_tokens": False}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        tokens = json.load(response)["tokens"]
    assert len(tokens) == 1, tokens
    return tokens[0]


def main(base: str) -> None:
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": "Name a fruit."}]

    def chat(**kwargs):
        reply = client.chat.completions.create(
            model=model, messages=messages, max_tokens=6, temperature=0, logprobs=True, **kwargs
        )
        return [entry.token for entry in reply.choices[0].logprobs.content]

    # +100 makes a token the only greedy pick; -100 bans the one greedy decoding chose.
    banana = token_id(base, " banana")
    forced = chat(logit_bias={str(banana): 100})
    assert forced == [" banana"] * 6, forced
    plain = chat()
    banned = chat(logit_bias={str(token_id(base, plain[0])): -100})
    assert banned[0] != plain[0], (plain, banned)
    print("logit_bias:", plain, "->", banned)

    def animals(**kwargs):
        reply = client.completions.create(
            model=model,
            prompt="List of animals: cat, dog, cat, dog, cat, dog,",
            max_tokens=40,
            temperature=0,
            logprobs=0,
            **kwargs,
        )
        return reply.choices[0].logprobs.tokens

    def most_repeats(tokens):
        return max(collections.Counter(tokens).values())

    loop = animals()
    frequency = animals(frequency_penalty=2.0)
    presence = animals(presence_penalty=2.0)
    assert most_repeats(frequency) < most_repeats(loop), (loop, frequency)
    assert presence != loop, presence
    repetition = animals(extra_body={"repetition_penalty": 1.8})
    assert repetition != loop, repetition
    print("most repeats: plain", most_repeats(loop), "frequency_penalty 2:", most_repeats(frequency))

    # min_p 1 leaves only the most likely token, whatever the temperature.
    hot = dict(temperature=1.5, seed=5, max_tokens=24)
    story = lambda **kw: client.completions.create(model=model, prompt="Once upon a time", **kw).choices[0].text
    greedy = story(temperature=0, max_tokens=24)
    assert story(**hot, extra_body={"min_p": 1.0}) == greedy
    assert story(**hot) != greedy

    # vLLM's min_tokens (AIPerf's `--extra-inputs min_tokens:N` for fixed output lengths).
    short = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hi."}], temperature=0, max_tokens=200
    )
    assert short.choices[0].finish_reason == "stop", short
    natural = short.usage.completion_tokens
    longer = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say hi."}],
        max_tokens=natural + 40,
        temperature=0,
        extra_body={"min_tokens": natural + 20},
    )
    assert longer.usage.completion_tokens >= natural + 20, (natural, longer.usage)
    print("min_tokens:", natural, "->", longer.usage.completion_tokens)

    # vLLM's include_stop_str_in_output and truncate_prompt_tokens.
    plain_story = story(temperature=0, max_tokens=24)
    stop = plain_story.split()[2]
    kept = story(temperature=0, max_tokens=24, stop=[stop], extra_body={"include_stop_str_in_output": True})
    assert kept == plain_story[: plain_story.index(stop) + len(stop)], (kept, plain_story)
    cut = client.completions.create(
        model=model, prompt="One two three four five six seven", max_tokens=2, extra_body={"truncate_prompt_tokens": 3}
    )
    assert cut.usage.prompt_tokens == 3, cut.usage

    try:
        client.chat.completions.create(model=model, messages=messages, presence_penalty=3)
        raise AssertionError("presence_penalty 3 was accepted")
    except openai.BadRequestError as error:
        assert error.body["param"] == "presence_penalty", error.body
    print("sampling: all checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
