"""The Responses API (`/v1/responses`) through the official `openai` SDK and the OpenAI Agents
SDK's default model (`OpenAIResponsesModel`).

Run by crates/server/tests/openai_sdk.rs against a real `rillm serve` on loopback:
    python3 tests/sdk/responses.py http://127.0.0.1:PORT
"""

import asyncio
import json
import sys

import openai
import pydantic

from tools import WEATHER as CHAT_WEATHER

# The chat tests' weather function, in the Responses API's flat form.
WEATHER = {"type": "function", **CHAT_WEATHER["function"]}


# Largest gap, in nats, between two tokens that a different batch shape may swap (as
# NEAR_TIE_NATS in crates/engine/tests/common/mod.rs): rows computed in another shape (prefix
# reuse, verified drafts, whose lengths follow what speculation learned from earlier
# requests) round by up to a few hundredths.
NEAR_TIE_NATS = 0.1


def gap(entry, chosen: str, instead: str):
    """How much more likely `chosen` was than `instead` at this token, where both are listed."""
    tops = {t.token: t.logprob for t in entry.top_logprobs or []}
    return tops[chosen] - tops[instead] if chosen in tops and instead in tops else None


def same_or_parted_at_a_tie(a: list, b: list) -> bool:
    """The near-tie rule: two greedy outputs of one request (their tokens' logprob entries)
    are the same tokens, or part only where the two tokens chosen were within NEAR_TIE_NATS
    in either computation (nothing after is compared). True where they are the same."""
    for at, (x, y) in enumerate(zip(a, b)):
        if x.token != y.token:
            margins = [gap(x, x.token, y.token), gap(y, y.token, x.token)]
            assert any(m is not None and m < NEAR_TIE_NATS for m in margins), (at, x, y, margins)
            print(f"parted at token {at} at a near-tie (margins {margins})")
            return False
    assert len(a) == len(b), ([e.token for e in a], [e.token for e in b])
    return True


def text_and_stream(client: openai.OpenAI, model: str) -> None:
    """A whole and a streamed response to the same greedy request say the same thing (or
    part only at a near-tie); the stream's events come in OpenAI's order, numbered from 0."""
    ask = dict(model=model, input="Name three colours.", instructions="Answer briefly.", temperature=0,
               max_output_tokens=150, include=["message.output_text.logprobs"], top_logprobs=5)
    # The first request computes the prompt cold; the two compared after it both reuse it.
    client.responses.create(**ask)
    whole = client.responses.create(**ask)
    assert whole.status in ("completed", "incomplete"), whole.status
    assert whole.output_text.strip(), whole
    usage = whole.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0, usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens, usage
    assert whole.instructions == "Answer briefly." and whole.max_output_tokens == 150, whole

    with client.responses.stream(**ask) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds
    assert kinds[-1] == "response.completed", kinds
    assert [e.sequence_number for e in events] == list(range(len(events))), "numbered in order from 0"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = [e.text for e in events if e.type == "response.output_text.done"]
    assert deltas == done[0] == final.output_text, (deltas, done, final.output_text)
    streamed = [entry for e in events if e.type == "response.output_text.delta" for entry in e.logprobs or []]
    if same_or_parted_at_a_tie(whole.output[0].content[0].logprobs, streamed):
        assert final.output_text == whole.output_text, (final.output_text, whole.output_text)
        assert final.usage.output_tokens == whole.usage.output_tokens, (final.usage, whole.usage)
    print("text:", repr(whole.output_text[:60]), kinds.count("response.output_text.delta"), "deltas")

    cut = client.responses.create(model=model, input="Write a long story about a ship.", max_output_tokens=5)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens", cut
    assert cut.usage.output_tokens == 5, cut.usage


class City(pydantic.BaseModel):
    name: str
    country: str


def structured(client: openai.OpenAI, model: str) -> None:
    """`responses.parse()` with a pydantic model: `text.format` json_schema is honoured."""
    parsed = client.responses.parse(model=model, input="Describe Paris as JSON.", text_format=City,
                                    temperature=0, max_output_tokens=100)
    assert parsed.status == "completed", parsed
    assert isinstance(parsed.output_parsed, City) and parsed.output_parsed.name, parsed.output_parsed
    print("parse:", parsed.output_parsed)


def tools(client: openai.OpenAI, model: str) -> None:
    """Function calls as output items, streamed argument by argument, then answered with
    function_call_output items in the next request."""
    ask = dict(model=model, input="What's the weather in Paris, in celsius?", tools=[WEATHER],
               tool_choice="required", parallel_tool_calls=False, temperature=0)
    whole = client.responses.create(**ask)
    calls = [o for o in whole.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather", whole.output
    arguments = json.loads(calls[0].arguments)
    assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("celsius", "fahrenheit"), arguments

    events = list(client.responses.create(**ask, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    final = events[-1].response
    assert len(done) == 1 and deltas == done[0].arguments == final.output[0].arguments, (deltas, done, final)
    assert final.output[0].call_id == next(e.item.call_id for e in events if e.type == "response.output_item.added")

    call = calls[0]
    answered = client.responses.create(
        model=model,
        input=[
            {"role": "user", "content": "What's the weather in Paris, in celsius?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "21 degrees and sunny"},
        ],
        tools=[WEATHER],
        tool_choice="none",
        temperature=0,
        max_output_tokens=60,
    )
    assert answered.output and all(o.type == "message" for o in answered.output), answered.output
    print("tools:", call.arguments, "->", repr(answered.output_text[:60]))


def conversation_state(client: openai.OpenAI, model: str) -> None:
    """OpenAI's conversation state: a turn goes on from `previous_response_id`, a call made
    in the kept response is answered by its call_id alone, and kept responses are retrieved
    and deleted."""
    first = client.responses.create(model=model, input="What's the weather in Paris, in celsius?", tools=[WEATHER],
                                    tool_choice="required", parallel_tool_calls=False, temperature=0)
    call = next(o for o in first.output if o.type == "function_call")
    answered = client.responses.create(
        model=model, previous_response_id=first.id, tools=[WEATHER], tool_choice="none", temperature=0,
        max_output_tokens=40, input=[{"type": "function_call_output", "call_id": call.call_id, "output": "21 C, sunny"}],
    )
    assert answered.previous_response_id == first.id and answered.output_text, answered
    assert answered.usage.input_tokens_details.cached_tokens > 0, answered.usage
    try:  # Alone, the same input answers no call.
        client.responses.create(model=model, input=[{"type": "function_call_output", "call_id": call.call_id,
                                                     "output": "21 C, sunny"}])
        raise AssertionError("a call's output without its call was accepted")
    except openai.BadRequestError as error:
        assert error.body["param"] == "input[0].call_id", error.body
    assert client.responses.retrieve(first.id).output[0].call_id == call.call_id
    client.responses.delete(first.id)
    try:
        client.responses.retrieve(first.id)
        raise AssertionError("a deleted response was retrieved")
    except openai.NotFoundError:
        pass
    print("conversation:", call.arguments, "->", repr(answered.output_text[:50]))


def background(client: openai.OpenAI, model: str) -> None:
    """OpenAI's background mode as its docs poll it: created in progress, retrieved until it
    ends; a long one cancelled is kept as cancelled."""
    import time

    started = client.responses.create(model=model, input="Name three colours.", background=True, temperature=0,
                                      max_output_tokens=30)
    assert started.background and started.status in ("queued", "in_progress"), started
    deadline = time.monotonic() + 60
    response = started
    while response.status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, response
        time.sleep(0.1)
        response = client.responses.retrieve(started.id)
    assert response.status in ("completed", "incomplete") and response.output_text.strip(), response

    long = client.responses.create(model=model, input="Write a long story.", background=True, max_output_tokens=900,
                                   extra_body={"ignore_eos": True})
    cancelled = client.responses.cancel(long.id)
    assert cancelled.id == long.id and cancelled.status == "cancelled", cancelled
    assert client.responses.retrieve(long.id).status == "cancelled"
    print("background:", repr(response.output_text[:40]), "; cancelled:", cancelled.status)


def logprobs(client: openai.OpenAI, model: str) -> None:
    """`include` with `top_logprobs`: an entry per token, its alternatives, spelling the text."""
    r = client.responses.create(model=model, input="Say hello.", include=["message.output_text.logprobs"],
                                top_logprobs=2, temperature=0, max_output_tokens=8)
    part = r.output[0].content[0]
    assert part.logprobs and all(len(l.top_logprobs) == 2 for l in part.logprobs), part
    assert "".join(l.token for l in part.logprobs) == part.text, part
    assert all(l.logprob <= 0 for l in part.logprobs), part


def refusals(client: openai.OpenAI, model: str) -> None:
    for kwargs, param in [
        (dict(previous_response_id="resp_unknown"), "previous_response_id"),
        (dict(tools=[{"type": "web_search"}]), "tools[0].type"),
        (dict(text={"format": {"type": "json_schema", "name": "x"}}), "text.format.schema"),
    ]:
        try:
            client.responses.create(model=model, input="Hi", **kwargs)
            raise AssertionError(f"{param} was accepted")
        except openai.BadRequestError as error:
            assert error.body["param"] == param, error.body


async def agent_run(base: str, model: str) -> None:
    """An Agents SDK agent on its default model (the Responses API) with a function tool
    runs to completion, whole and streamed, and the tool runs."""
    from agents import Agent, ModelSettings, Runner, function_tool, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)
    set_default_openai_client(openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120))
    called = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        called.append(city)
        return f"It is 21 degrees and sunny in {city}."

    agent = Agent(
        name="weather",
        instructions="Answer questions about the weather with the get_weather tool.",
        tools=[get_weather],
        model=model,
        model_settings=ModelSettings(tool_choice="required", parallel_tool_calls=False, temperature=0, max_tokens=100),
        tool_use_behavior="stop_on_first_tool",
    )
    result = await Runner.run(agent, "What's the weather in Paris?", max_turns=3)
    assert len(called) == 1 and called[0], called
    assert "21 degrees" in str(result.final_output), result.final_output

    streamed = Runner.run_streamed(agent, "What's the weather in Rome?", max_turns=3)
    kinds = [event.data.type async for event in streamed.stream_events() if event.type == "raw_response_event"]
    assert "response.completed" in kinds and "response.function_call_arguments.delta" in kinds, kinds
    assert len(called) == 2 and "21 degrees" in str(streamed.final_output), (called, streamed.final_output)

    # The server keeps the conversation: the turn after the call sends only the call's output
    # (with `previous_response_id`), which the server answers only if it kept the call.
    chained = agent.clone(tool_use_behavior="run_llm_again")
    result = await Runner.run(chained, "What's the weather in Oslo?", max_turns=4, auto_previous_response_id=True)
    assert called[2:] == ["Oslo"] and len(result.raw_responses) >= 2, (called, result.raw_responses)
    print("agent, chained:", called[2:], "->", repr(str(result.final_output)[:60]))
    print("agent:", called, "->", result.final_output)


def main(base: str) -> None:
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    text_and_stream(client, model)
    structured(client, model)
    tools(client, model)
    conversation_state(client, model)
    background(client, model)
    logprobs(client, model)
    refusals(client, model)
    asyncio.run(agent_run(base, model))


if __name__ == "__main__":
    main(sys.argv[1])
    print("responses: all SDK checks passed")
