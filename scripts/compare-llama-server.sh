#!/usr/bin/env bash
# rillm serve vs llama.cpp's llama-server on the same model, loaded by the same `rillm bench`,
# one server at a time on the same cores. Prints ratios (rillm / llama-server).
#
#   LLAMA_SERVER=/path/to/llama-server scripts/compare-llama-server.sh [OUT_DIR]
#
# Build llama-server outside this repo (see the README, "Measuring against llama.cpp").
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_SERVER:?set LLAMA_SERVER to a llama-server binary}"
OUT=${1:-/tmp/rillm-compare}
THREADS=${THREADS:-2}
SLOTS=${SLOTS:-16}
CTX=${CTX:-2048}
MODEL=${MODEL:-$(./target/release/rillm model path)}
PORT=18767
mkdir -p "$OUT"

wait_ready() {
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/$1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "server never became ready" >&2; return 1
}

run_levels() { # name
  local url="http://127.0.0.1:$PORT/v1/chat/completions"
  ./target/release/rillm bench --url "$url" --concurrency 1,4,16 --requests 16 --max-tokens 128 \
    --ignore-eos --temperature 0 --warmup 2 --output "$OUT/$1-concurrency.json" > "$OUT/$1-concurrency.txt"
  ./target/release/rillm bench --url "$url" --rate 2,4,8 --requests 40 --max-tokens 64 \
    --temperature 0 --seed 1 --output "$OUT/$1-rate.json" > "$OUT/$1-rate.txt"
}

echo "== rillm serve (threads $THREADS, $SLOTS sequences)"
./target/release/rillm serve --model "$MODEL" --port $PORT --threads "$THREADS" --max-running "$SLOTS" \
  --ctx-size "$CTX" --max-waiting 1024 >"$OUT/rillm-server.log" 2>&1 &
pid=$!
wait_ready ready; run_levels rillm; kill -TERM $pid; wait $pid || true

echo "== llama-server (threads $THREADS, $SLOTS slots)"
"$LLAMA_SERVER" -m "$MODEL" --port $PORT -t "$THREADS" -tb "$THREADS" -np "$SLOTS" -c $((CTX * SLOTS)) \
  --no-webui >"$OUT/llama-server.log" 2>&1 &
pid=$!
wait_ready health; run_levels llama; kill -TERM $pid; wait $pid || true

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def levels(name, kind):
    d = json.load(open(f"{out}/{name}-{kind}.json"))
    return d["levels"] if "levels" in d else [d]
def g(l, *path):
    for p in path:
        l = None if l is None else l.get(p)
    return l
print(f"{'level':<16}{'metric':<22}{'rillm':>10}{'llama':>10}{'ratio':>8}")
for kind in ("concurrency", "rate"):
    for r, l in zip(levels("rillm", kind), levels("llama", kind)):
        name = f"c={r['load']['concurrency']}" if kind == "concurrency" else f"{r['load']['requested_rate_rps']} req/s"
        rows = [("output tok/s", ("output_tokens_per_s",)), ("TTFT p50 ms", ("latency", "ttft_ms", "p50")),
                ("TTFT p99 ms", ("latency", "ttft_ms", "p99")), ("TPOT p50 ms", ("latency", "tpot_ms", "p50")),
                ("goodput req/s", ("goodput_rps",)), ("rejected 429", ("rejected_429",))]
        for label, path in rows:
            a, b = g(r, *path), g(l, *path)
            ratio = f"{a / b:.2f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "-"
            fa = f"{a:.1f}" if isinstance(a, float) else str(a)
            fb = f"{b:.1f}" if isinstance(b, float) else str(b)
            print(f"{name:<16}{label:<22}{fa:>10}{fb:>10}{ratio:>8}")
PY
