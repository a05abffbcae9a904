"""Tool calling through the official `openai` SDK and the OpenAI Agents SDK (`openai-agents`).

Run by crates/server/tests/openai_sdk.rs against a real `rillm serve` on loopback:
    python3 tests/sdk/tools.py http://127.0.0.1:PORT
"""

import asyncio
import json
import sys

import openai

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
TOOLS = [WEATHER, ADD]


def check(call) -> dict:
    """A call names an offered function and its arguments fit that function's schema."""
    assert call.type == "function" and call.id.startswith("call_"), call
    arguments = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("celsius", "fahrenheit"), arguments
        assert isinstance(arguments["city"], str), arguments
    else:
        assert call.function.name == "add", call
        assert isinstance(arguments["a"], int) and isinstance(arguments["b"], int), arguments
    return arguments


def loop(client, model) -> None:
    """A full tool round: call, result, answer."""
    messages = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
    first = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=200
    )
    choice = first.choices[0]
    assert choice.finish_reason in ("tool_calls", "length") and choice.message.tool_calls, first
    calls = choice.message.tool_calls
    for call in calls:
        check(call)
    messages.append(choice.message.model_dump(exclude_none=True))
    for call in calls:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21, "sky": "sunny"}'})
    answer = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=40
    )
    text = answer.choices[0].message.content
    assert text and "<tool_call>" not in text and not answer.choices[0].message.tool_calls, answer
    print("loop:", [c.function.name for c in calls], "->", repr(text))


def streamed(client, model, tool_choice, ask, parallel=None) -> list:
    """Reassembles streamed calls from `delta.tool_calls`."""
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": ask}],
        tools=TOOLS,
        tool_choice=tool_choice,
        temperature=0,
        max_tokens=200,
        stream=True,
        **extra,
    )
    calls, content, finish = {}, "", None
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                if delta.id:
                    calls[delta.index] = {"id": delta.id, "name": delta.function.name, "arguments": ""}
                calls[delta.index]["arguments"] += delta.function.arguments or ""
            finish = choice.finish_reason or finish
    assert "<tool_call>" not in content and "</tool_call>" not in content, content
    for call in calls.values():
        check(
            openai.types.chat.ChatCompletionMessageToolCall(
                id=call["id"], type="function", function={"name": call["name"], "arguments": call["arguments"]}
            )
        )
    assert finish in (("tool_calls", "length") if calls else ("stop", "length")), (finish, calls)
    return list(calls.values())


async def agent_run(base: str, model: str) -> None:
    """An Agents SDK agent with a function tool runs to completion, and the tool runs."""
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    called = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        called.append(city)
        return f"It is 21 degrees and sunny in {city}."

    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    agent = Agent(
        name="weather",
        instructions="Answer questions about the weather with the get_weather tool.",
        tools=[get_weather],
        model=OpenAIChatCompletionsModel(model=model, openai_client=client),
        model_settings=ModelSettings(tool_choice="required", parallel_tool_calls=False, temperature=0, max_tokens=100),
        tool_use_behavior="stop_on_first_tool",
    )
    result = await Runner.run(agent, "What's the weather in Paris?", max_turns=3)
    assert len(called) == 1 and called[0], called
    assert "21 degrees" in str(result.final_output), result.final_output
    print("agent:", called, "->", result.final_output)


def main(base: str) -> None:
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    loop(client, model)

    calls = streamed(client, model, "required", "Add 2 and 40.")
    assert calls, "required: at least one call"
    named = streamed(client, model, {"type": "function", "function": {"name": "add"}}, "What is 2 plus 40?")
    assert named and all(c["name"] == "add" for c in named), named
    single = streamed(client, model, "required", "Weather in Paris and in Rome?", parallel=False)
    assert len(single) == 1, single
    auto = streamed(client, model, "auto", "What's the weather in Oslo?")
    print("streamed: required", [c["name"] for c in calls], "named", len(named), "auto", [c["name"] for c in auto])

    try:
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
        raise AssertionError("an unknown function in tool_choice was accepted")
    except openai.BadRequestError as error:
        assert error.body["param"] == "tool_choice", error.body

    asyncio.run(agent_run(base, model))


if __name__ == "__main__":
    main(sys.argv[1])
    print("tools: all SDK checks passed")
