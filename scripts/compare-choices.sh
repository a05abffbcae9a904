#!/usr/bin/env bash
# `n` choices and prompt scoring (docs/benchmarks.md), each run on a fresh server:
#  - n=4 at temperature 1, ~300-token prompts, 64-token answers: time until all four are
#    done with one n=4 request to rillm, four concurrent requests to rillm, and four to
#    llama-server (which takes only n=1); rillm's prompt tokens computed for each;
#  - prompt scoring (echo, max_tokens 0, logprobs 1), ~500-token prompts, 8 concurrent:
#    prompt tokens/s against rillm's plain prefill (max_tokens 1) of the same prompts.
# Every trial has its own prompt, so no prefix cache helps.
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
client() { python3 scripts/choices-client.py "$@" --url "$URL"; }
computed() { curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^rillm_prompt_tokens_computed_total/ {print $2}'; }

start_rillm "$OUT/rillm-prompts.log"
client prompts "$OUT/p300.jsonl" --tokens 300 --count "$TRIALS"
client prompts "$OUT/p500.jsonl" --tokens 500 --count 48
stop_server

part() { [[ " $PARTS " == *" $1 "* ]]; }

if part choices; then
for mode in n separate; do
  start_rillm "$OUT/rillm-$mode.log"
  client n4 "$OUT/p300.jsonl" --mode "$mode" --trials "$TRIALS" > "$OUT/rillm-$mode.json"
  echo "{\"prompt_tokens_computed\": $(computed)}" > "$OUT/rillm-$mode-computed.json"
  stop_server
done
start_llama "$OUT/llama-separate.log"
client n4 "$OUT/p300.jsonl" --mode separate --trials "$TRIALS" > "$OUT/llama-separate.json"
stop_server
fi

if part score; then
for mode in echo plain; do
  start_rillm "$OUT/rillm-score-$mode.log"
  client score "$OUT/p500.jsonl" --mode "$mode" --concurrency 8 > "$OUT/rillm-score-$mode.json"
  stop_server
done
fi

python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
read = lambda name: json.loads((out / f"{name}.json").read_text())
n, sep, llama = read("rillm-n"), read("rillm-separate"), read("llama-separate")
cn, cs = read("rillm-n-computed")["prompt_tokens_computed"], read("rillm-separate-computed")["prompt_tokens_computed"]
echo, plain = read("rillm-score-echo"), read("rillm-score-plain")
print(f"n=4, {n['trials']} trials, median time until all four answers are done:")
print(f"  rillm n=4            {n['median_s']:.2f} s")
print(f"  rillm 4 requests     {sep['median_s']:.2f} s   n=4 / separate = {n['median_s'] / sep['median_s']:.2f}x")
print(f"  llama-server 4 req.  {llama['median_s']:.2f} s   rillm n=4 / llama-server = {n['median_s'] / llama['median_s']:.2f}x")
print(f"  prompt tokens computed: n=4 {cn:.0f}, separate {cs:.0f}: {cn / cs:.2f}x")
print("prompt scoring, 8 concurrent, 48 prompts:")
print(f"  echo  {echo['prompt_tokens_per_s']:.0f} prompt tok/s   plain prefill {plain['prompt_tokens_per_s']:.0f} tok/s"
      f"   echo / plain = {echo['prompt_tokens_per_s'] / plain['prompt_tokens_per_s']:.2f}x")
PY
