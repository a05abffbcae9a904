"""A reasoning model's thought through the official `openai` SDK: the extra fields it reads
(`reasoning_content`, `reasoning`), `reasoning_effort`, a per-request budget, usage's
`reasoning_tokens`, and the Responses API's reasoning item and events.

Run by crates/server/tests/openai_sdk.rs against `rillm serve` on loopback with QwQ-32B's
chat template (its generation prompt opens `<think>`, so SmolLM2's whole reply is a thought
until the server's budget closes it) and `--reasoning-budgets low=6`:
    python3 tests/sdk/reasoning.py http://127.0.0.1:PORT
"""

import sys

import openai

STORY = [{"role": "user", "content": "Write a short story about a cat."}]


def extra(obj, name):
    """A field the SDK's types do not declare, as clients read it."""
    return getattr(obj, name, None) or (obj.model_extra or {}).get(name)


def check_chat(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(
        model=MODEL, messages=STORY, max_tokens=60, temperature=0, extra_body={"max_reasoning_tokens": 12}
    )
    message = whole.choices[0].message
    thought = extra(message, "reasoning_content")
    assert thought and extra(message, "reasoning") == thought, message
    assert message.content and "<think>" not in message.content and "</think>" not in thought, message
    details = whole.usage.completion_tokens_details
    assert details is not None and 12 <= details.reasoning_tokens < whole.usage.completion_tokens, whole.usage

    thought_parts, answer_parts = [], []
    stream = client.chat.completions.create(
        model=MODEL, messages=STORY, max_tokens=60, temperature=0, stream=True,
        extra_body={"max_reasoning_tokens": 12},
    )
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        piece = extra(delta, "reasoning_content")
        if piece:
            assert not answer_parts, "the thought streams before the answer"
            thought_parts.append(piece)
        if delta.content:
            answer_parts.append(delta.content)
    assert "".join(thought_parts) == thought and "".join(answer_parts) == message.content

    off = client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=30, temperature=0, reasoning_effort="none")
    assert extra(off.choices[0].message, "reasoning_content") is None, off.choices[0].message
    assert off.choices[0].message.content, off
    assert off.usage.completion_tokens_details.reasoning_tokens == 0

    low = client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=40, temperature=0, reasoning_effort="low")
    assert 6 <= low.usage.completion_tokens_details.reasoning_tokens <= 12, low.usage

    try:
        client.chat.completions.create(model=MODEL, messages=STORY, reasoning_effort="extreme")
        raise AssertionError("an unknown effort was accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "reasoning_effort", e.body
    print(f"chat: thought {len(thought)} chars, {details.reasoning_tokens} tokens; answer {len(message.content)} chars")


def check_responses(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=MODEL, input="Write a short story about a cat.", max_output_tokens=40, temperature=0,
        reasoning={"effort": "low"},
    )
    item = response.output[0]
    assert item.type == "reasoning" and item.content and item.content[0].text, response.output
    assert response.output_text, response
    assert response.usage.output_tokens_details.reasoning_tokens >= 6, response.usage
    kinds, deltas = [], []
    with client.responses.stream(
        model=MODEL, input="Write a short story about a cat.", max_output_tokens=40, temperature=0,
        reasoning={"effort": "low"},
    ) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.reasoning_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert kinds.index("response.reasoning_text.delta") < kinds.index("response.output_text.delta"), kinds
    assert "".join(deltas) == item.content[0].text
    assert final.output[0].type == "reasoning"
    # The turn sent back as input, reasoning item included, as clients that keep the
    # conversation themselves do.
    again = client.responses.create(
        model=MODEL, input=[{"role": "user", "content": "Hi"}, *[o.model_dump() for o in response.output],
                          {"role": "user", "content": "Again."}],
        max_output_tokens=4, reasoning={"effort": "none"},
    )
    assert again.status in ("completed", "incomplete"), again
    print(f"responses: reasoning item of {len(item.content[0].text)} chars, then the message")


MODEL = ""


def main() -> None:
    global MODEL
    client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
    MODEL = client.models.list().data[0].id
    check_chat(client)
    check_responses(client)
    print("reasoning: ok")


if __name__ == "__main__":
    main()
