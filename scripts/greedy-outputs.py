#!/usr/bin/env python3
"""Greedy outputs of a fixed set of requests, one at a time, from a fresh `rillm serve`: to
check that a change which should not change behaviour (a refactor) changes no token.

    scripts/greedy-outputs.py [RILLM_BIN] > outputs.jsonl
    scripts/greedy-outputs.py --compare BEFORE_BIN AFTER_BIN    # exits 1 if any differ

Plain prompts, structured outputs (the bench's shipped schemas), tool calls (required,
named, auto) and speculative decoding (prompts that repeat themselves, so prompt lookup
drafts): each request is sent alone, after the previous one ended, to a server started for
this run with `--fixed-step-prices`, so no step's make-up depends on timing (batch
composition changes logits a little, and this model has near-ties of 0.02 nats; with measured
prices, draft lengths and widened prefills follow the machine's timing, and two runs of one
build differ on a few of these requests). Every request goes to /generate, whose events
carry token ids: one JSON line per request with its name, token ids, text and finish reason.
Standard library only.
"""

import json
import pathlib
import subprocess
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
PORT = 18799
# Code to copy, written out here so the prompt stays the same however the repo's files move.
CODE = """/// How many passes over the weights a batch takes: llama.cpp cuts it into ubatches of at
/// most `ubatch_rows` rows, each sequence's rows kept together where they fit.
pub fn passes(rows_per_sequence: &[usize], ubatch_rows: usize) -> usize {
    let mut passes = 0;
    let mut filled = ubatch_rows;
    for &rows in rows_per_sequence.iter().filter(|&&rows| rows > 0) {
        if filled + rows > ubatch_rows {
            passes += 1;
            filled = 0;
        }
        filled += rows.min(ubatch_rows);
    }
    passes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pass_holds_what_fits() {
        assert_eq!(passes(&[1, 1, 1, 1], 512), 1);
        assert_eq!(passes(&[300, 300], 512), 2);
        assert_eq!(passes(&[], 512), 0);
    }
}
"""


def generate(body: dict) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{PORT}/generate", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    text, ids, done = "", [], {}
    with urllib.request.urlopen(request, timeout=300) as response:
        event = None
        for raw in response:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if event == "done":
                    done = data
                elif event is None or event == "message":
                    text += data["text"]
                    ids += data["token_ids"]
            elif not line:
                event = None
    return {"text": text, "token_ids": ids, "finish_reason": done.get("finish_reason"),
            "tool_calls": done.get("tool_calls")}


def requests() -> list:
    plain = ["The capital of France is", "def fibonacci(n):", "Water is made of hydrogen and",
             "A short story about a lighthouse keeper:", "List three uses of a cache:"]
    out = [(f"plain-{i}", {"prompt": p, "max_tokens": 64}) for i, p in enumerate(plain)]
    chats = ["Describe a robot.", "Tell me about Paris.", "Summarise what a compiler does."]
    out += [(f"chat-{i}", {"messages": [{"role": "user", "content": c}], "max_tokens": 80}) for i, c in enumerate(chats)]
    schemas = sorted((ROOT / "crates/bench/schemas").glob("*.json"))[:6]
    for path in schemas:
        schema = json.loads(path.read_text())
        out.append((f"schema-{path.stem}", {"messages": [{"role": "user", "content": schema.get("description", path.stem)
                                                           + " Reply with a JSON object only."}],
                                            "json_schema": schema, "max_tokens": 120}))
    tools = json.loads((ROOT / "crates/bench/tools/tools.json").read_text())[:6]
    asks = ["What's the weather in Lisbon?", "What is 1234 multiplied by 56?", "Find flights from Oslo to Rome."]
    for choice in ("required", "auto"):
        for i, ask in enumerate(asks):
            out.append((f"tools-{choice}-{i}", {"messages": [{"role": "user", "content": ask}], "tools": tools,
                                                "tool_choice": choice, "max_tokens": 100}))
    out.append(("tools-named", {"messages": [{"role": "user", "content": asks[0]}], "tools": tools,
                                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                                "max_tokens": 100}))
    repeating = ["1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,",
                 "Repeat exactly: the quick brown fox jumps over the lazy dog. " * 3,
                 CODE + "\n// The same code again:\n"]
    out += [(f"speculative-{i}", {"prompt": p, "max_tokens": 120}) for i, p in enumerate(repeating)]
    return out


def outputs(binary: str) -> list:
    """Every request's greedy output from a fresh server of `binary`, in order."""
    # Fixed step prices: what a step holds (drafts, forced tokens, prompt chunks) then
    # depends on the requests alone, not on how long this machine's steps took.
    server = subprocess.Popen([binary, "serve", "--port", str(PORT), "--max-running", "4", "--ctx-size", "4096",
                               "--fixed-step-prices"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}/ready", timeout=1)
                break
            except Exception:
                time.sleep(0.2)
        results = []
        for name, body in requests():
            body["temperature"] = 0
            results.append({"name": name, **generate(body)})
        return results
    finally:
        server.terminate()
        server.wait()


def compare(before: list, after: list) -> int:
    """Prints each request whose tokens, text or calls differ; returns how many did. A
    finish reason is compared apart: where the server ends a choice at a repeated call, the
    engine may sample its end of sequence first (`eos`) or be told to stop (`stop`), the
    same tokens either way."""
    differ = 0
    for b, a in zip(before, after):
        same = all(b[k] == a[k] for k in ("token_ids", "text", "tool_calls"))
        differ += not same
        note = "" if b["finish_reason"] == a["finish_reason"] else f" (finish {b['finish_reason']} / {a['finish_reason']})"
        print(f"{'same     ' if same else 'DIFFERENT'} {b['name']}: {len(b['token_ids'])} / {len(a['token_ids'])} tokens{note}")
    print(f"{len(before) - differ} of {len(before)} requests token for token the same")
    return differ


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        before, after = outputs(sys.argv[2]), outputs(sys.argv[3])
        sys.exit(1 if compare(before, after) else 0)
    binary = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target/release/rillm")
    for result in outputs(binary):
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
