#!/usr/bin/env python3
"""Sampled tool replies against a running server: N streamed chat requests with three tools,
temperature 1, a few at a time, each read to its end. Prints how each ended (finish
reasons, error events), how many calls it made, and the server's constrained-decoding
counters before and after. Measures what issue 54 asks: no reply under `tool_choice: auto`
(or tools with an answer format) ends in a constraint error.

    scripts/sampled-tool-replies.py http://127.0.0.1:8767 1000 [--format] [--concurrency 8]

--format adds a `response_format` json_schema beside the tools (calls or a typed answer).
Standard library only.
"""

import argparse
import collections
import concurrent.futures
import json
import time
import urllib.request

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "minLength": 1},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "search_flights", "description": "Find flights",
        "parameters": {"type": "object", "properties": {
            "from": {"type": "string"}, "to": {"type": "string"},
            "passengers": {"type": "array", "items": {"type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
                "required": ["name"]}, "minItems": 1, "maxItems": 3}},
            "required": ["from", "to", "passengers"]}}},
]

ANSWER = {"type": "json_schema", "json_schema": {"name": "weather", "schema": {
    "type": "object", "properties": {"city": {"type": "string"}, "summary": {"type": "string"}},
    "required": ["city", "summary"]}}}


def metrics(base: str) -> dict:
    with urllib.request.urlopen(base + "/metrics", timeout=30) as response:
        text = response.read().decode()
    wanted = ("rillm_structured_failures_total", "rillm_structured_resamples_total")
    out = collections.Counter()
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in wanted:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out


def one(base: str, with_format: bool, max_tokens: int) -> tuple:
    body = {"messages": [{"role": "user", "content": "What's the weather in Paris?"}], "tools": TOOLS,
            "tool_choice": "auto", "temperature": 1.0, "max_tokens": max_tokens, "stream": True}
    if with_format:
        body["response_format"] = ANSWER
    request = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    finish, errors, calls = None, 0, 0
    with urllib.request.urlopen(request, timeout=300) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                errors += 1
                continue
            for choice in chunk.get("choices", []):
                calls += sum(1 for c in (choice["delta"].get("tool_calls") or []) if c.get("id"))
                finish = choice.get("finish_reason") or finish
    return finish, errors, calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("requests", type=int)
    parser.add_argument("--format", action="store_true")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=300)
    args = parser.parse_args()
    before = metrics(args.base)
    started = time.time()
    finishes, errors, calls = collections.Counter(), 0, 0
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        for finish, error_events, made in pool.map(lambda _: one(args.base, args.format, args.max_tokens),
                                                   range(args.requests)):
            finishes[finish] += 1
            errors += error_events
            calls += made
    after = metrics(args.base)
    delta = {k: after[k] - before[k] for k in after}
    print(json.dumps({"requests": args.requests, "format": args.format, "finish_reasons": finishes,
                      "error_events": errors, "calls": calls, "seconds": round(time.time() - started, 1),
                      "server": delta}, indent=1))


if __name__ == "__main__":
    main()
