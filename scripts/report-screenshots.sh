#!/usr/bin/env bash
# The report and compare screenshots in docs/benchmarks.md, from a real run: a Poisson sweep from half to
# twice capacity against rillm serve (--max-queue-ms 1000) and llama.cpp's llama-server,
# same model, cores and client, one server at a time; then `rillm bench compare` and
# headless Chromium at 1280 px.
#
#   LLAMA_SERVER=/path/to/llama-server scripts/report-screenshots.sh [OUT_DIR]
#
# The levels share one prompt set (one seed), so a later level may find an earlier one's
# prompts in a server's prefix cache: the pages show how much (prefix-cache hit).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rillm-report}
RATES=${RATES:-0.7,1.4,2.8}
REQUESTS=${REQUESTS:-30}
. scripts/compare-common.sh
mkdir -p "$OUT" docs/img

run() { # name
  "$BENCH" bench --url "http://127.0.0.1:$PORT/v1/completions" --temperature 0 --seed 1 \
    --input-tokens 100,40 --output-tokens 48 --rate "$RATES" --requests "$REQUESTS" --ttft-slo-ms 1500 \
    --output "$OUT/$1.json" --report "$OUT/$1.html" > "$OUT/$1.txt"
}

RILLM_ARGS="--max-queue-ms 1000" start_rillm "$OUT/rillm-server.log"; run rillm; stop_server
start_llama "$OUT/llama-server.log"; run llama-server; stop_server
"$BENCH" bench compare "$OUT/llama-server.json" "$OUT/rillm.json" --report "$OUT/compare.html" | tee "$OUT/compare.txt"

shot() { # page png height
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="1280,$3" \
    --screenshot="$2" "file://$1" 2>/dev/null
}
shot "$OUT/rillm.html" docs/img/report.png 1800
shot "$OUT/compare.html" docs/img/compare.png 1800
