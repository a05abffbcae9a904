#!/usr/bin/env bash
# Two chat models behind one server: rillm (`--model NAME=PATH` twice) against
# llama-server's router mode (`--models-dir`), the same GGUF twice (`chat`, `chat2`), a
# 0.7/0.3 mix of Poisson arrivals (`rillm bench --model-mix`), one server at a time.
#
#   LLAMA_SERVER=/path/to/llama-server [LLAMA_ARGS=...] [MAX=2] [RATE=2] [REQUESTS=80] [STATUS_MS=100] \
#     [THREADS=2] [LLAMA_THREADS=$THREADS] scripts/compare-model-mix.sh [OUT_DIR]
#
# STATUS_MS: the bench reads each server's /v1/models that often to count the requests
# that waited on a load (`--model-status-ms`; off by default: llama-server's router served
# fewer requests while read every 100 ms). Without it, the swaps are told from the order
# the requests went out: the first request to a model after one to the other (with MAX=1,
# every such switch is a swap) -- its TTFT and, on rillm, its prompt tokens found cached.
#
# MAX is both servers' --models-max: 2 keeps both models loaded; 1 makes every switch a
# swap. Prompts recur (--distinct-prompts 8), so a server that kept a model's prefix cache
# across its unload would answer a swapped-back model's recurring prompt warm. Both models
# are loaded once before the run (a request each), so the run measures serving, not the
# first load (scripts/compare-cold-load.sh measures that).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_SERVER:?set LLAMA_SERVER to a llama-server binary}"
OUT=${1:-/tmp/rillm-model-mix}
MAX=${MAX:-2}
RATE=${RATE:-2}
REQUESTS=${REQUESTS:-80}
THREADS=${THREADS:-2}
# llama-server runs a process per model: with both loaded (MAX=2) two children of 2 threads
# fight over 2 cores (TTFT p50 33 s in one run); LLAMA_THREADS=1 is its best setting there.
LLAMA_THREADS=${LLAMA_THREADS:-$THREADS}
MODEL=${MODEL:-$(./target/release/rillm model path)}
PORT=18799
mkdir -p "$OUT"
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
ln -s "$MODEL" "$DIR/chat.gguf"
cp "$MODEL" "$DIR/chat2.gguf"

warm() { for m in chat2 chat; do
  curl -s -o /dev/null "http://127.0.0.1:$PORT/v1/completions" -H 'content-type: application/json' \
    -d "{\"model\": \"$m\", \"prompt\": \"Hi\", \"max_tokens\": 1}"; done; }
bench() { # name
  ./target/release/rillm bench --url "http://127.0.0.1:$PORT/v1/completions" --model-mix chat:0.7,chat2:0.3 \
    --rate "$RATE" --requests "$REQUESTS" --input-tokens 200,50 --output-tokens 32 --distinct-prompts 8 \
    --temperature 0 ${STATUS_MS:+--model-status-ms "$STATUS_MS"} --output "$OUT/$1.json" > "$OUT/$1.txt"
  grep -E '^  (offered|goodput|model|TTFT  )' "$OUT/$1.txt" | sed "s/^/$1 /"
  python3 - "$OUT/$1.json" <<'PY' | sed "s/^/$1 /"
import json, statistics, sys
records = sorted(json.load(open(sys.argv[1]))["requests"], key=lambda r: r["sent_ms"])
switched = [r for prev, r in zip(records, records[1:]) if r["model"] != prev["model"] and "ttft_ms" in r]
if switched:
    cached = sum(r.get("cached_tokens", 0) for r in switched) / max(1, sum(r.get("prompt_tokens", 0) for r in switched))
    print(f"  first after a switch: {len(switched)} requests, TTFT p50 {statistics.median(r['ttft_ms'] for r in switched):.1f} ms,"
          f" prompt tokens found cached {100 * cached:.0f} %")
PY
}

./target/release/rillm serve --port "$PORT" --threads "$THREADS" --max-running 4 --models-max "$MAX" \
  --model "chat=$DIR/chat.gguf" --model "chat2=$DIR/chat2.gguf" >"$OUT/rillm-server.log" 2>&1 &
pid=$!
for _ in $(seq 300); do curl -s "http://127.0.0.1:$PORT/v1/models" | grep -q '"loaded"' && break; sleep 0.1; done
warm
bench "rillm-max$MAX"
kill "$pid"; wait "$pid" || true

# shellcheck disable=SC2086 # LLAMA_ARGS is a list of flags
"$LLAMA_SERVER" --models-dir "$DIR" --models-max "$MAX" --port "$PORT" -t "$LLAMA_THREADS" -np 4 ${LLAMA_ARGS:-} >"$OUT/llama-server.log" 2>&1 &
pid=$!
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && break; sleep 0.1; done
warm
bench "llama-max$MAX"
kill "$pid"; wait "$pid" || true
./target/release/rillm bench compare "$OUT/llama-max$MAX.json" "$OUT/rillm-max$MAX.json" \
  --label llama-server --label rillm --format markdown > "$OUT/compare-max$MAX.md"
