#!/usr/bin/env bash
# rillm serve vs llama.cpp's llama-server on the same model, loaded by the same `rillm bench`,
# one server at a time on the same cores. Prints ratios (rillm / llama-server).
#
#   LLAMA_SERVER=/path/to/llama-server scripts/compare-llama-server.sh [OUT_DIR]
#
# Build llama-server outside this repo (docs/benchmarks.md, "Measuring against llama.cpp").
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rillm-compare}
. scripts/compare-common.sh
mkdir -p "$OUT"

run_levels() { # name
  local url="http://127.0.0.1:$PORT/v1/chat/completions"
  ./target/release/rillm bench --url "$url" --concurrency 1,4,16 --requests 16 --max-tokens 128 \
    --ignore-eos --temperature 0 --warmup 2 --output "$OUT/$1-concurrency.json" > "$OUT/$1-concurrency.txt"
  ./target/release/rillm bench --url "$url" --rate 2,4,8 --requests 40 --max-tokens 64 \
    --temperature 0 --seed 1 --output "$OUT/$1-rate.json" > "$OUT/$1-rate.txt"
}

start_rillm "$OUT/rillm-server.log"; run_levels rillm; stop_server
start_llama "$OUT/llama-server.log"; run_levels llama; stop_server

ratios concurrency rate
