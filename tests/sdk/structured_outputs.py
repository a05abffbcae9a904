"""Structured outputs through the official `openai` SDK, as its users call them.

Run by crates/server/tests/openai_sdk.rs against a real `rillm serve` on loopback:
    python3 tests/sdk/structured_outputs.py http://127.0.0.1:PORT
Exits non-zero with the reason on the first failure.
"""

import json
import sys
from typing import Annotated, List, Literal

import openai
from pydantic import BaseModel, Field


class City(BaseModel):
    name: str = Field(max_length=40)
    country: str = Field(max_length=40)
    population_millions: float = Field(ge=0, le=50)
    # Every string is bounded, so a sampled answer ends well inside max_tokens.
    landmarks: List[Annotated[str, Field(max_length=40)]] = Field(min_length=1, max_length=3)
    climate: Literal["temperate", "tropical", "arid", "continental", "polar"]


def main(base: str) -> None:
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id

    # chat.completions.parse() with a pydantic model: the SDK sends a strict json_schema
    # and parses the answer into the model.
    for temperature in (0.0, 1.0):
        completion = client.chat.completions.parse(
            model=model,
            messages=[{"role": "user", "content": "Describe Paris as JSON."}],
            response_format=City,
            temperature=temperature,
            max_tokens=300,
            seed=3,
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", (temperature, choice)
        city = choice.message.parsed
        assert isinstance(city, City), (temperature, choice.message)
        print(f"parse() at temperature {temperature}: {city.model_dump_json()}")

    # A streamed json_schema: the deltas reassemble into JSON valid for the schema.
    schema = City.model_json_schema()
    schema["additionalProperties"] = False
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Describe Tokyo as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}},
        max_tokens=300,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert finish == "stop", (finish, text)
    City.model_validate_json(text)
    assert usage is not None and usage.completion_tokens > 0, usage
    print(f"streamed json_schema: {text}")

    # json_object through the same SDK call users make.
    completion = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Give a JSON object with a greeting."}],
        response_format={"type": "json_object"},
        max_tokens=200,
        temperature=0,
    )
    choice = completion.choices[0]
    if choice.finish_reason == "stop":
        assert isinstance(json.loads(choice.message.content), dict), choice.message.content
    print(f"json_object: {choice.message.content!r} ({choice.finish_reason})")

    # What rillm cannot honour is a 400 the SDK raises, naming the field.
    try:
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": True}}},
        )
        raise AssertionError("an unsupported schema keyword was accepted")
    except openai.BadRequestError as error:
        body = error.body if isinstance(error.body, dict) else {}
        param = body.get("param") or (body.get("error") or {}).get("param")
        assert param == "response_format.json_schema.schema", error.body
        assert "uniqueItems" in str(error.body), error.body
        print(f"400 as expected: {error.body}")


if __name__ == "__main__":
    main(sys.argv[1])
    print("structured outputs: all SDK checks passed")
