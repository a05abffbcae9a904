"""Tools and a typed answer in one request, as the clients send them: the OpenAI Agents SDK's
`Agent(tools=[...], output_type=Model)` on the Chat Completions and the Responses model, the
openai SDK's `chat.completions.parse(response_format=Model, tools=[...])` whole and streamed,
`tool_choice: "none"` beside a schema, and calls under `required` to tools whose parameters
do not say `additionalProperties` (no undeclared keys, no repeated call).

Run by crates/server/tests/openai_sdk.rs against a real `rillm serve` on loopback:
    python3 tests/sdk/typed_agents.py http://127.0.0.1:PORT
"""

import asyncio
import json
import sys

import openai
import pydantic

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
# `parse()` takes strict tools only (OpenAI's strict mode wants `additionalProperties: false`).
STRICT_WEATHER = {"type": "function", "function": {**WEATHER["function"], "strict": True,
    "parameters": {**WEATHER["function"]["parameters"], "additionalProperties": False}}}


class WeatherReport(pydantic.BaseModel):
    # Bounded strings: a 135M model may otherwise run one string to `max_tokens`.
    city: str = pydantic.Field(max_length=40)
    temperature_c: int
    summary: str = pydantic.Field(max_length=80)


async def agents_sdk(base: str, model: str, responses: bool, temperature: float) -> None:
    """A typed agent with a function tool runs to completion: the tool is called, and the
    final output is a `WeatherReport`. At temperature 1 the first turn must call
    (`tool_choice="required"`; the SDK resets it to auto once the tool ran, its guard
    against loops), else the model may answer from nothing; one call a turn, and a seed, so
    the run is the same each time on one machine (unseeded, this 135M model completed 93 of
    96 such runs: the rest called on with made-up cities, or ran one string to `max_tokens`)."""
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner,
                        function_tool, set_tracing_disabled)

    set_tracing_disabled(True)
    called = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        called.append(city)
        return f"Sunny, 21 degrees Celsius in {city}."

    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    kind = OpenAIResponsesModel if responses else OpenAIChatCompletionsModel
    sampled = temperature > 0
    settings = ModelSettings(temperature=temperature, max_tokens=200, tool_choice="required" if sampled else None,
                             parallel_tool_calls=False if sampled else None,
                             extra_body={"seed": 5} if sampled else None)
    agent = Agent(name="weather", instructions="You report the weather. Use the get_weather tool.",
                  tools=[get_weather], output_type=WeatherReport,
                  model=kind(model=model, openai_client=client), model_settings=settings)
    try:
        result = await Runner.run(agent, "What's the weather in Paris?")
    finally:
        await client.close()
    assert called, "the tool was never called"
    assert isinstance(result.final_output, WeatherReport), result.final_output
    print(f"agent ({'responses' if responses else 'chat'}, temperature {temperature}):", called, "->",
          result.final_output)


def parse_with_tools(client: openai.OpenAI, model: str) -> None:
    """`parse()` with a pydantic model and tools under `auto`: either calls or the parsed
    model, never prose; the streamed form reassembles to the same kind of reply."""
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    # Seeded: unseeded at temperature 1, a sampled answer now and then ran its `summary` to
    # `max_tokens` (a CI-style failure at random, not a wrong shape).
    for temperature in (0, 1):
        completion = client.chat.completions.parse(model=model, messages=messages, tools=[STRICT_WEATHER],
                                                   response_format=WeatherReport, temperature=temperature,
                                                   seed=7, max_tokens=200)
        message = completion.choices[0].message
        assert message.tool_calls or isinstance(message.parsed, WeatherReport), message
        for call in message.tool_calls or []:
            assert json.loads(call.function.arguments).keys() == {"city"}, call
        print("parse:", temperature, [c.function.arguments for c in message.tool_calls or []] or message.parsed)

    # After the call's result: the typed answer.
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    answered = messages + [{"role": "assistant", "content": None, "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 degrees Celsius."}]
    completion = client.chat.completions.parse(model=model, messages=answered, tools=[STRICT_WEATHER],
                                               response_format=WeatherReport, temperature=0, max_tokens=200)
    assert isinstance(completion.choices[0].message.parsed, WeatherReport), completion.choices[0].message
    print("parse after the result:", completion.choices[0].message.parsed)

    with client.chat.completions.stream(model=model, messages=answered, tools=[STRICT_WEATHER],
                                        response_format=WeatherReport, temperature=0, max_tokens=200) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert isinstance(message.parsed, WeatherReport) and not message.tool_calls, message
    assert "<tool_call>" not in (message.content or ""), message.content


def none_with_a_schema(client: openai.OpenAI, model: str) -> None:
    """`tool_choice: "none"` beside a schema: the schema shapes the reply (it was dropped
    before)."""
    completion = client.chat.completions.parse(model=model, messages=[{"role": "user", "content": "What's the weather in Paris?"}],
                                               tools=[STRICT_WEATHER], tool_choice="none", response_format=WeatherReport,
                                               temperature=0, max_tokens=200)
    message = completion.choices[0].message
    assert isinstance(message.parsed, WeatherReport) and not message.tool_calls, message
    print("none + schema:", message.parsed)


def required_calls_are_declared_and_not_repeated(client: openai.OpenAI, model: str) -> None:
    """Under `required`, with parameters that do not say `additionalProperties`: only the
    declared keys, and no call made twice in one reply."""
    tools = [WEATHER, {"type": "function", "function": {"name": "add", "description": "Add two integers.",
             "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                            "required": ["a", "b"]}}}]
    declared = {t["function"]["name"]: set(t["function"]["parameters"]["properties"]) for t in tools}
    for temperature in (0, 1):
        for ask in ("What's the weather in Paris and in Oslo?", "Add 17 and 25.", "Weather in Rome?"):
            completion = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": ask}], tools=tools, tool_choice="required",
                temperature=temperature, seed=7, max_tokens=200)
            calls = completion.choices[0].message.tool_calls or []
            assert calls or completion.choices[0].finish_reason == "length", completion
            seen = set()
            for call in calls:
                arguments = json.loads(call.function.arguments)
                assert set(arguments) <= declared[call.function.name], (call.function.name, arguments)
                key = (call.function.name, json.dumps(arguments, sort_keys=True))
                assert key not in seen, f"{key} repeated in {calls}"
                seen.add(key)
            print("required:", temperature, ask, [(c.function.name, c.function.arguments) for c in calls])


def main(base: str) -> None:
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    none_with_a_schema(client, model)
    parse_with_tools(client, model)
    required_calls_are_declared_and_not_repeated(client, model)
    async def agents() -> None:
        for responses in (False, True):
            for temperature in (0, 1):
                await agents_sdk(base, model, responses, temperature)

    asyncio.run(agents())


if __name__ == "__main__":
    main(sys.argv[1])
    print("typed agents: all SDK checks passed")
