#!/usr/bin/env bash
# Past capacity: rillm with and without SLO-aware admission (--max-queue-ms) against
# llama.cpp's llama-server, same model, cores and client, one server at a time.
#
#   LLAMA_SERVER=/path/to/llama-server scripts/compare-overload.sh [OUT_DIR]
#
# Poisson arrivals at 0.5x to 3x capacity (CAPACITY req/s, measured on this machine: see
# docs/results/2026-11-serving-and-real-traffic.md), prompts of the Azure conversation trace's lengths x0.1 (~100 tokens, sd 40),
# 48-token answers. Each level uses its own prompts (seed = level index), so no level
# reuses another's KV. Goodput counts requests whose TTFT, from the scheduled arrival, is
# within TTFT_SLO_MS; 429s count as offered and not good. llama-server queues without
# limit; rillm without the flag queues up to 1024. SERVERS="rillm rillm-slo llama" picks
# which to run (ratios are printed for the result sets OUT_DIR holds).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rillm-overload}
CAPACITY=${CAPACITY:-1.4}
FACTORS=${FACTORS:-0.5 1 1.5 2 3}
REQUESTS=${REQUESTS:-48}
TTFT_SLO_MS=${TTFT_SLO_MS:-1500}
# The admission bound sits below the SLO: the prediction is a typical wait, not a tail, so
# a bound of 2/3 of the SLO keeps the admitted requests' p90 inside it (docs/results/2026-11-serving-and-real-traffic.md).
MAX_QUEUE_MS=${MAX_QUEUE_MS:-1000}
SERVERS=${SERVERS:-rillm rillm-slo llama}
. scripts/compare-common.sh
mkdir -p "$OUT"

sweep() { # name
  local i=0
  for f in $FACTORS; do
    i=$((i + 1))
    local rate
    rate=$(python3 -c "print(round($CAPACITY * $f, 3))")
    "$BENCH" bench --url "http://127.0.0.1:$PORT/v1/completions" --temperature 0 --seed "$i" \
      --input-tokens 100,40 --output-tokens 48 --rate "$rate" --requests "$REQUESTS" \
      --ttft-slo-ms "$TTFT_SLO_MS" --output "$OUT/$1-x$f.json" > "$OUT/$1-x$f.txt"
    python3 - "$OUT/$1-x$f.json" "$1" "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ttft = (d["latency"].get("ttft_ms") or {}).get("p90")
print(f"{sys.argv[2]:>12} x{sys.argv[3]:<4} offered {d['offered_requests']:3}  completed {d['completed']:3}  "
      f"429 {d['rejected_429']:3}  failed {d['failed']:2}  goodput {d['goodput_rps']:.3f} req/s  "
      f"attainment {d['slo_attainment_pct']:5.1f} %  TTFT p90 {ttft if ttft is None else round(ttft)} ms")
PY
  done
}

for server in $SERVERS; do
  case $server in
    rillm) start_rillm "$OUT/rillm-server.log" ;;
    rillm-slo) RILLM_ARGS="--max-queue-ms $MAX_QUEUE_MS" start_rillm "$OUT/rillm-slo-server.log" ;;
    llama) start_llama "$OUT/llama-server.log" ;;
    *) echo "unknown server $server" >&2; exit 2 ;;
  esac
  sweep "$server"; stop_server
done

python3 - "$OUT" "$FACTORS" <<'PY'
import json, os, sys
out, factors = sys.argv[1], sys.argv[2].split()
def g(name, f):
    path = f"{out}/{name}-x{f}.json"
    return json.load(open(path))["goodput_rps"] if os.path.exists(path) else None
print("\ngoodput ratios (x capacity: rillm-slo / llama, rillm / llama, rillm-slo / rillm)")
for f in factors:
    slo, plain, llama = g("rillm-slo", f), g("rillm", f), g("llama", f)
    r = lambda a, b: "-" if a is None or b is None else f"{a / b:.2f}" if b else ("inf" if a else "-")
    v = lambda a: "    -" if a is None else f"{a:.3f}"
    print(f"  x{f:<4} {v(slo)} {v(plain)} {v(llama)}   {r(slo, llama):>5} {r(plain, llama):>5} {r(slo, plain):>5}")
PY
