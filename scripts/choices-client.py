#!/usr/bin/env python3
"""The client of scripts/compare-choices.sh (standard library only): `n` choices against
separate requests, and prompt scoring against plain prefill, on one server at a time.

    choices-client.py prompts OUT.jsonl --url URL --tokens 300 --count 8
    choices-client.py n4 PROMPTS --url URL --mode n|separate [--trials 5]
    choices-client.py score PROMPTS --url URL --mode echo|plain [--concurrency 8]

Every request gets a prompt no other request had, so no prefix cache helps any of them.
Prints one JSON line of figures.
"""

import argparse
import json
import random
import statistics
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

WORDS = (
    "river stone garden lantern window quiet market bridge morning winter copper forest harbor "
    "paper candle mountain valley silver thunder meadow orchard castle violin shadow ember "
    "compass ribbon feather anchor saddle velvet marble pepper falcon glacier tunnel bakery"
).split()


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.load(response)


def make_prompts(args) -> None:
    """Prompts of about `--tokens` tokens each (counted by rillm's /tokenize), all distinct."""
    base = args.url.split("/v1/")[0]
    rng = random.Random(7)
    with open(args.out, "w") as out:
        for i in range(args.count):
            words = [f"Note {i}:"]
            while True:
                words.extend(rng.choice(WORDS) for _ in range(16))
                text = " ".join(words)
                count = post(base + "/tokenize", {"prompt": text})["count"]
                if count >= args.tokens:
                    break
            out.write(json.dumps({"prompt": text, "tokens": count}) + "\n")


def load(path: str) -> list:
    with open(path) as f:
        return [json.loads(line)["prompt"] for line in f if line.strip()]


def n4(args) -> dict:
    """Time until four 64-token answers to one prompt are all done: one request with n=4,
    or four concurrent requests; a fresh prompt per trial."""
    prompts = load(args.prompts)
    body = {"max_tokens": 64, "temperature": 1.0, "ignore_eos": True}
    times, completion = [], []
    with ThreadPoolExecutor(4) as pool:
        for trial in range(args.trials):
            prompt = prompts[trial]
            start = time.perf_counter()
            if args.mode == "n":
                answers = [post(args.url, {**body, "prompt": prompt, "n": 4, "seed": trial})]
            else:
                answers = list(
                    pool.map(lambda k: post(args.url, {**body, "prompt": prompt, "seed": 4 * trial + k}), range(4))
                )
            times.append(time.perf_counter() - start)
            choices = [c for a in answers for c in a["choices"]]
            assert len(choices) == 4, answers
            completion.append(sum(a["usage"]["completion_tokens"] for a in answers))
    return {"mode": args.mode, "trials": args.trials, "median_s": statistics.median(times), "times_s": times,
            "completion_tokens": completion}


def score(args) -> dict:
    """Prompt tokens per second over every prompt, `--concurrency` at a time: scored with
    echo (nothing generated), or plainly prefilled (one token generated)."""
    prompts = load(args.prompts)
    if args.mode == "echo":
        body = {"max_tokens": 0, "echo": True, "logprobs": 1}
    else:
        body = {"max_tokens": 1}

    def one(prompt: str) -> int:
        answer = post(args.url, {**body, "prompt": prompt, "temperature": 0})
        if args.mode == "echo":
            scored = answer["choices"][0]["logprobs"]["token_logprobs"]
            assert len(scored) == answer["usage"]["prompt_tokens"], answer["usage"]
        return answer["usage"]["prompt_tokens"]

    start = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:
        tokens = sum(pool.map(one, prompts))
    wall = time.perf_counter() - start
    return {"mode": args.mode, "requests": len(prompts), "prompt_tokens": tokens, "wall_s": wall,
            "prompt_tokens_per_s": tokens / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["prompts", "n4", "score"])
    parser.add_argument("prompts", help="prompts file (written by `prompts`)")
    parser.add_argument("--url", required=True, help="the server's /v1/completions")
    parser.add_argument("--mode", default="n")
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    if args.what == "prompts":
        args.out = args.prompts
        make_prompts(args)
        return
    result = n4(args) if args.what == "n4" else score(args)
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
