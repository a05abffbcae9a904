"""Log-probabilities, prompt scoring and `n` through the official `openai` SDK, parsed into
its own types.

Run by crates/server/tests/openai_sdk.rs against a real `rillm serve` on loopback:
    python3 tests/sdk/logprobs.py http://127.0.0.1:PORT
"""

import json
import math
import sys
import urllib.request

import openai


def main(base: str) -> None:
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": "Name a fruit."}]

    completion = client.chat.completions.create(
        model=model, messages=messages, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3
    )
    content = completion.choices[0].logprobs.content
    assert content, completion
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3, entry
        assert entry.top_logprobs[0].token == entry.token, entry  # greedy: the most likely
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token, entry
    assert "".join(e.token for e in content) == completion.choices[0].message.content
    print("chat:", [(e.token, round(e.logprob, 3)) for e in content])

    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=8, temperature=0, logprobs=True, top_logprobs=1, stream=True
    )
    streamed = []
    for chunk in stream:
        for choice in chunk.choices:
            if choice.logprobs and choice.logprobs.content:
                streamed.extend(choice.logprobs.content)
    assert [e.token for e in streamed] == [e.token for e in content], (streamed, content)
    assert all(math.isclose(a.logprob, b.logprob, abs_tol=0.05) for a, b in zip(streamed, content))
    print("streamed chat: same tokens and logprobs")

    legacy = client.completions.create(model=model, prompt="One, two, three,", max_tokens=4, temperature=0, logprobs=2)
    lp = legacy.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) > 0, lp
    assert "".join(lp.tokens) == legacy.choices[0].text
    print("completions:", list(zip(lp.tokens, lp.token_logprobs)))

    # vLLM's return_tokens_as_token_ids: the same tokens, named by id (which detokenize to
    # the reply), the same values.
    by_id = client.chat.completions.create(
        model=model, messages=messages, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3,
        extra_body={"return_tokens_as_token_ids": True},
    )
    named = by_id.choices[0].logprobs.content
    assert all(e.token.startswith("token_id:") for e in named), named
    ids = [int(e.token.removeprefix("token_id:")) for e in named]
    request = urllib.request.Request(
        base + "/detokenize", data=json.dumps({"tokens": ids}).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.load(response)["prompt"] == completion.choices[0].message.content
    assert all(math.isclose(a.logprob, b.logprob, abs_tol=0.05) for a, b in zip(named, content))
    print("token ids:", ids)

    # Prompt scoring, as evaluation harnesses ask for it: echo, logprobs, nothing generated.
    scored = client.completions.create(model=model, prompt="One, two, three,", max_tokens=0, echo=True, logprobs=1)
    lp = scored.choices[0].logprobs
    assert scored.choices[0].text == "One, two, three,", scored
    assert lp.token_logprobs[0] is None and all(v <= 0 for v in lp.token_logprobs[1:]), lp
    assert scored.usage.completion_tokens == 0 and scored.usage.prompt_tokens == len(lp.tokens), scored.usage
    # The legacy answer above continued the same prompt greedily: its first token's logprob
    # is what scoring prompt + that token gives at that position.
    continued = client.completions.create(
        model=model, prompt="One, two, three," + legacy.choices[0].text, max_tokens=0, echo=True, logprobs=0
    )
    at = len(lp.tokens)
    assert continued.choices[0].logprobs.tokens[at] == legacy.choices[0].logprobs.tokens[0]
    assert math.isclose(
        continued.choices[0].logprobs.token_logprobs[at], legacy.choices[0].logprobs.token_logprobs[0], abs_tol=0.05
    )
    print("echo:", list(zip(lp.tokens, lp.token_logprobs)))

    # n choices, whole and streamed.
    many = client.chat.completions.create(model=model, messages=messages, max_tokens=8, n=3, seed=5, temperature=1)
    assert [c.index for c in many.choices] == [0, 1, 2], many
    assert all(c.finish_reason in ("stop", "length") for c in many.choices)
    print("n=3:", [c.message.content for c in many.choices])
    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=8, n=3, stream=True, stream_options={"include_usage": True}
    )
    texts, ended, usage = ["", "", ""], set(), None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                ended.add(choice.index)
    assert ended == {0, 1, 2} and usage and usage.completion_tokens >= 3, (ended, usage)
    print("streamed n=3:", texts)

    try:
        client.chat.completions.create(model=model, messages=messages, logprobs=True, top_logprobs=21)
        raise AssertionError("top_logprobs 21 was accepted")
    except openai.BadRequestError as error:
        assert "top_logprobs" in str(error.body), error.body


if __name__ == "__main__":
    main(sys.argv[1])
    print("logprobs: all SDK checks passed")
