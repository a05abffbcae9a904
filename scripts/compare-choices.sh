#!/usr/bin/env bash
# `n` choices and prompt scoring (docs/benchmarks.md), each run on a fresh server, every
# figure computed by `rillm bench` and compared by `rillm bench compare`:
#  - n=4 at temperature 1, 300-token prompts, 64-token answers (ignore_eos): one request
#    with `n: 4` to rillm, against each prompt sent as four concurrent requests
#    (`--prompt-repeats 4 --concurrency 4`) to rillm and to llama-server (which takes only
#    n=1). A request's E2E is the time until its answers are all in (for the four
#    concurrent ones, which run in step, about the same for each);
#  - prompt scoring (echo, max_tokens 0, logprobs 1, as lm-evaluation-harness sends it),
#    500-token prompts, 8 concurrent: prompt tok/s against rillm's plain prefill
#    (max_tokens 1) of the same prompts.
# Every trial has its own prompt, so no prefix cache helps across trials.
#
#   LLAMA_SERVER=/path/to/llama-server scripts/compare-choices.sh [OUT_DIR]
# PARTS="choices score" (the default) or either one alone.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rillm-choices}
SLOTS=${SLOTS:-8}
TRIALS=${TRIALS:-5}
PARTS=${PARTS:-choices score}
. scripts/compare-common.sh
mkdir -p "$OUT"
URL="http://127.0.0.1:$PORT/v1/completions"
part() { [[ " $PARTS " == *" $1 "* ]]; }
bench() { # name, then bench flags
  local name=$1; shift
  "$BENCH" bench --url "$URL" --seed 1 "$@" --output "$OUT/$name.json" > "$OUT/$name.txt"
}
answers=(--input-tokens 300 --output-tokens 64 --ignore-eos --temperature 1)

if part choices; then
  start_rillm "$OUT/rillm-n.log"
  bench rillm-n "${answers[@]}" --extra-body '{"n": 4}' --concurrency 1 --requests "$TRIALS"
  stop_server
  start_rillm "$OUT/rillm-separate.log"
  bench rillm-separate "${answers[@]}" --prompt-repeats 4 --concurrency 4 --requests $((4 * TRIALS))
  stop_server
  start_llama "$OUT/llama-separate.log"
  bench llama-separate "${answers[@]}" --prompt-repeats 4 --concurrency 4 --requests $((4 * TRIALS))
  stop_server
  echo "### n=4 in one request vs four requests (E2E: until the answers are in)"
  # The request shapes differ on purpose (n=4 against four copies): --force.
  "$BENCH" bench compare "$OUT/rillm-n.json" "$OUT/rillm-separate.json" "$OUT/llama-separate.json" \
    --label "rillm n=4" --label "rillm 4 requests" --label "llama-server 4 requests" --force --format "${FORMAT:-text}"
fi

if part score; then
  scoring=(--input-tokens 500 --concurrency 8 --requests 48 --temperature 0)
  start_rillm "$OUT/rillm-score-plain.log"
  bench rillm-score-plain "${scoring[@]}" --max-tokens 1
  stop_server
  start_rillm "$OUT/rillm-score-echo.log"
  bench rillm-score-echo "${scoring[@]}" --max-tokens 0 --extra-body '{"echo": true, "logprobs": 1}'
  stop_server
  echo "### prompt scoring (echo) vs plain prefill: prompt tok/s"
  "$BENCH" bench compare "$OUT/rillm-score-plain.json" "$OUT/rillm-score-echo.json" \
    --label "plain prefill" --label "scoring (echo)" --force --format "${FORMAT:-text}"
fi
