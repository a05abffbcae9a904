#!/usr/bin/env bash
# Agent loops, rillm serve vs llama.cpp's llama-server --jinja on the same model: 16 agents
# (the first 16 prompts of crates/bench/tools/prompts.jsonl), 8 at a time, each offered the
# 24 shipped tools (crates/bench/tools/tools.json); `rillm bench` plays the tools (a result
# of 64 tokens per call, up to 3 rounds per agent), greedy, 160 tokens a reply at most.
# tool_choice `required` and `auto`, every run on a fresh server; `rillm bench compare`
# prints the ratios (valid calls, TTFT of rounds 2+, output tok/s, throughput).
#
# llama-server runs with --jinja; SmolLM2's own template knows nothing of tools, so by default
# it is given Qwen2.5's (ChatML with Hermes tool calls, as rillm writes them: its best
# setting on this model; LLAMA_TEMPLATE= empty keeps the model's own).
#
# Rounds 2+ (replies to tool results) exist only where a server calls tools, and on this
# model llama-server calls none. So every run saves the requests it sent (--save-sessions),
# and the `required` agents rillm ran (calls, results and all) are then replayed as recorded
# against each server, fresh (REPLAY=0 skips it): both answer the very same rounds, and the
# TTFT of rounds 2+ compares how each reuses the conversation's KV.
#
# API=responses sends the same agents over the Responses API (/v1/responses, the OpenAI Agents
# SDK's default; llama-server serves it too) instead of chat.
#
# FINAL_SCHEMA=crates/bench/tools/final-answer.json asks every request for its answer in that
# schema too (`--final-schema`: tools and a typed answer in one request, as the Agents SDK's
# typed agents send them); its runs are named `-typed`, and where the same OUT_DIR holds a
# run without it, rillm's typed agents are compared with its plain ones. Those make other
# calls and other rounds, so the format's own price is measured apart too: rillm's typed
# requests (REPLAY=0 skips it) are replayed as recorded on fresh rillm servers, once as sent
# and once without their answer format: the very same rounds and histories, each way. The
# typed replies are shorter (answers that end), so output tok/s is compared once more with
# the untyped requests cut to the length of the typed reply to the same round (`max_tokens`,
# `ignore_eos`): the same requests and the same output tokens, with and without the format.
#
#   LLAMA_SERVER=/path/to/llama-server [API=responses] [FINAL_SCHEMA=F] scripts/compare-agents.sh [OUT_DIR]
# SERVERS="llama rillm" (the default) or either alone.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rillm-agents}
SLOTS=${SLOTS:-8}
# The tools' system block is ~2,300 tokens.
CTX=${CTX:-4096}
CHOICES=${CHOICES:-required auto}
SERVERS=${SERVERS:-llama rillm}
LLAMA_TEMPLATE=${LLAMA_TEMPLATE-$(ls -d /tmp/peer/llama_cpp_python-*/vendor/llama.cpp/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja 2>/dev/null | head -1 || true)}
LLAMA_JINJA="--jinja${LLAMA_TEMPLATE:+ --chat-template-file $LLAMA_TEMPLATE}"
. scripts/compare-common.sh
mkdir -p "$OUT"
case ${API:-chat} in
  chat) URL="http://127.0.0.1:$PORT/v1/chat/completions" ;;
  responses) URL="http://127.0.0.1:$PORT/v1/responses" ;;
  *) echo "API must be chat or responses" >&2; exit 2 ;;
esac
head -16 crates/bench/tools/prompts.jsonl > "$OUT/agents.jsonl"
TYPED=${FINAL_SCHEMA:+-typed}

bench() { # name choice
  "$BENCH" bench --url "$URL" --dataset "$OUT/agents.jsonl" --tools crates/bench/tools/tools.json \
    --tool-choice "$2" --max-tool-rounds 3 --tool-result-tokens 64 --concurrency 8 --temperature 0 \
    ${FINAL_SCHEMA:+--final-schema "$FINAL_SCHEMA"} \
    --timeout 600 --save-sessions "$OUT/$1.sessions.jsonl" --output "$OUT/$1.json" > "$OUT/$1.txt"
}

replay() { # name [saved requests]
  "$BENCH" bench --url "$URL" --dataset "${2:-$OUT/rillm-required.sessions.jsonl}" --concurrency 8 --temperature 0 \
    --timeout 600 --output "$OUT/$1.json" > "$OUT/$1.txt"
}

equal_lengths() { # untyped requests, typed replay results in; the requests cut to the typed replies' lengths out
  python3 -c 'import json, sys
tokens = {(r["session_id"], r["round"]): r["completion_tokens"] for r in json.load(open(sys.argv[1]))["requests"]}
for line in sys.stdin:
    r = json.loads(line)
    rnd = 1 + sum(m.get("role") == "assistant" for m in r["messages"])
    r["max_tokens"], r["ignore_eos"] = tokens[(r.get("session_id"), rnd)], True
    print(json.dumps(r))' "$2" < "$1" > "$3"
}

without_format() { # saved requests in, the same without `response_format` out
  python3 -c 'import json, sys
for line in sys.stdin:
    r = json.loads(line); r.pop("response_format", None); print(json.dumps(r))' < "$1" > "$2"
}

for choice in $CHOICES; do
  run="$choice$TYPED"
  if [[ " $SERVERS " == *" llama "* ]]; then
    LLAMA_ARGS=$LLAMA_JINJA start_llama "$OUT/llama-$run.log"; bench "llama-$run" "$choice"; stop_server
  fi
  if [[ " $SERVERS " == *" rillm "* ]]; then
    start_rillm "$OUT/rillm-$run.log"; bench "rillm-$run" "$choice"; stop_server
  fi
done

if [ "${REPLAY:-1}" = 1 ] && [ -z "$TYPED" ] && [ -f "$OUT/rillm-required.sessions.jsonl" ]; then
  if [[ " $SERVERS " == *" llama "* ]]; then
    LLAMA_ARGS=$LLAMA_JINJA start_llama "$OUT/llama-replay.log"; replay llama-replay; stop_server
  fi
  if [[ " $SERVERS " == *" rillm "* ]]; then
    start_rillm "$OUT/rillm-replay.log"; replay rillm-replay; stop_server
  fi
fi

if [ "${REPLAY:-1}" = 1 ] && [ -n "$TYPED" ] && [[ " $SERVERS " == *" rillm "* ]]; then
  for choice in $CHOICES; do
    saved="$OUT/rillm-$choice$TYPED.sessions.jsonl"
    [ -f "$saved" ] || continue
    without_format "$saved" "$OUT/rillm-$choice-untyped.sessions.jsonl"
    for form in typed untyped equal; do
      [ "$form" = equal ] && equal_lengths "$OUT/rillm-$choice-untyped.sessions.jsonl" \
        "$OUT/rillm-$choice-replay-typed.json" "$OUT/rillm-$choice-equal.sessions.jsonl"
      start_rillm "$OUT/rillm-$choice-replay-$form.log"
      replay "rillm-$choice-replay-$form" "$OUT/rillm-$choice-$form.sessions.jsonl"; stop_server
    done
  done
fi

for choice in $CHOICES; do
  run="$choice$TYPED"
  echo "== tool_choice $run: llama-server --jinja (a) vs rillm (b)"
  grep -E "tool calls|final answers" "$OUT/llama-$run.txt" "$OUT/rillm-$run.txt" || true
  if [ -f "$OUT/llama-$run.json" ] && [ -f "$OUT/rillm-$run.json" ]; then
    "$BENCH" bench compare "$OUT/llama-$run.json" "$OUT/rillm-$run.json" --label llama-server --label rillm
  fi
  if [ -n "$TYPED" ] && [ -f "$OUT/rillm-$choice.json" ]; then
    echo "== tool_choice $choice: rillm's plain agents (a) vs its typed agents (b)"
    "$BENCH" bench compare "$OUT/rillm-$choice.json" "$OUT/rillm-$run.json" --label plain --label typed --force
  fi
  if [ -f "$OUT/rillm-$choice-replay-typed.json" ] && [ -f "$OUT/rillm-$choice-replay-untyped.json" ]; then
    echo "== tool_choice $choice: rillm's typed requests replayed without (a) and with (b) their answer format"
    grep -E "tool calls|final answers" "$OUT/rillm-$choice-replay-untyped.txt" "$OUT/rillm-$choice-replay-typed.txt" || true
    "$BENCH" bench compare "$OUT/rillm-$choice-replay-untyped.json" "$OUT/rillm-$choice-replay-typed.json" \
      --label untyped --label typed --force
  fi
  if [ -f "$OUT/rillm-$choice-replay-typed.json" ] && [ -f "$OUT/rillm-$choice-replay-equal.json" ]; then
    echo "== tool_choice $choice: the same, the untyped replies cut to the typed ones' lengths (a) vs typed (b)"
    "$BENCH" bench compare "$OUT/rillm-$choice-replay-equal.json" "$OUT/rillm-$choice-replay-typed.json" \
      --label untyped-equal --label typed --force
  fi
done
if [ -f "$OUT/llama-replay.json" ] && [ -f "$OUT/rillm-replay.json" ]; then
  echo "== rillm's required agents replayed as recorded: llama-server --jinja (a) vs rillm (b)"
  grep "tool calls" "$OUT/llama-replay.txt" "$OUT/rillm-replay.txt" || true
  "$BENCH" bench compare "$OUT/llama-replay.json" "$OUT/rillm-replay.json" --label llama-server --label rillm
fi
