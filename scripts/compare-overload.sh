#!/usr/bin/env bash
# Past capacity: rillm with and without SLO-aware admission (--max-queue-ms) against
# llama.cpp's llama-server, same model, cores and client, one server at a time.
#
#   LLAMA_SERVER=/path/to/llama-server scripts/compare-overload.sh [OUT_DIR]
#
# Poisson arrivals at 0.5x to 3x capacity, prompts of the Azure conversation trace's lengths
# x0.1 (~100 tokens, sd 40), 48-token answers. The capacity is measured first, in the same
# run: rillm's throughput with every slot busy (a closed loop of SLOTS requests at a time,
# 64 requests of the same shape), so "1x" means the same load on any machine; CAPACITY=R
# skips the probe and uses R req/s. Each level uses its own prompts (seed = level index), so no level
# reuses another's KV. Goodput counts requests whose TTFT, from the scheduled arrival, is
# within TTFT_SLO_MS; 429s count as offered and not good. llama-server queues without
# limit; rillm without the flag queues up to 1024. SERVERS="rillm rillm-slo llama" picks
# which to run (ratios are printed for the result sets OUT_DIR holds).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rillm-overload}
CAPACITY=${CAPACITY:-}
FACTORS=${FACTORS:-0.5 1 1.5 2 3}
REQUESTS=${REQUESTS:-48}
TTFT_SLO_MS=${TTFT_SLO_MS:-1500}
# The admission bound is the SLO itself: a request the forecast admitted wrongly is refused
# when it reaches the head of the queue, on what it actually waited, so the bound no longer
# needs a margin below the SLO for the forecast's error (it was 1000 ms until 2026-12-04).
MAX_QUEUE_MS=${MAX_QUEUE_MS:-$TTFT_SLO_MS}
SERVERS=${SERVERS:-rillm rillm-slo llama}
. scripts/compare-common.sh
mkdir -p "$OUT"

sweep() { # name
  local i=0
  for f in $FACTORS; do
    i=$((i + 1))
    local rate
    rate=$(awk -v c="$CAPACITY" -v f="$f" 'BEGIN { printf "%.3f", c * f }')
    "$BENCH" bench --url "http://127.0.0.1:$PORT/v1/completions" --temperature 0 --seed "$i" \
      --input-tokens 100,40 --output-tokens 48 --rate "$rate" --requests "$REQUESTS" \
      --ttft-slo-ms "$TTFT_SLO_MS" --output "$OUT/$1-x$f.json" > "$OUT/$1-x$f.txt"
    echo "$1 x$f: $(grep -m1 -E 'goodput' "$OUT/$1-x$f.txt" || true)"
  done
}

if [ -z "$CAPACITY" ]; then
  start_rillm "$OUT/capacity-server.log"
  "$BENCH" bench --url "http://127.0.0.1:$PORT/v1/completions" --temperature 0 --seed 99 \
    --input-tokens 100,40 --output-tokens 48 --concurrency "$SLOTS" --requests 64 \
    --output "$OUT/capacity.json" > "$OUT/capacity.txt"
  stop_server
  CAPACITY=$(python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["throughput_rps"], 3))' "$OUT/capacity.json")
fi
echo "capacity: $CAPACITY req/s (levels: $FACTORS x)" | tee "$OUT/capacity-used.txt"

for server in $SERVERS; do
  case $server in
    rillm) start_rillm "$OUT/rillm-server.log" ;;
    rillm-slo) RILLM_ARGS="--max-queue-ms $MAX_QUEUE_MS" start_rillm "$OUT/rillm-slo-server.log" ;;
    llama) start_llama "$OUT/llama-server.log" ;;
    *) echo "unknown server $server" >&2; exit 2 ;;
  esac
  sweep "$server"; stop_server
done

# Per load factor, every server's figures and their ratios to llama-server (or the first present).
for f in $FACTORS; do
  files=(); labels=()
  for server in llama rillm rillm-slo; do
    if [ -f "$OUT/$server-x$f.json" ]; then files+=("$OUT/$server-x$f.json"); labels+=(--label "$server"); fi
  done
  if [ "${#files[@]}" -ge 2 ]; then
    echo "### x$f of capacity"
    "$BENCH" bench compare "${files[@]}" "${labels[@]}" --format "${FORMAT:-text}"
  fi
done
