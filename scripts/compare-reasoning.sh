#!/usr/bin/env bash
# A reasoning model's budgeted thought, rillm serve vs llama.cpp's llama-server on the same
# model and the same thinking template: QwQ-32B's (its generation prompt opens `<think>`, so
# everything SmolLM2 writes is a thought until the server's budget closes it). Both read
# the thought apart (llama-server: --jinja --reasoning-format deepseek) and take the
# per-request budget in llama-server's spelling (`thinking_budget_tokens`, BUDGET tokens);
# synthetic ~200-token prompts, 128 output tokens (ignore_eos), greedy, at concurrency 1
# and 8. One server at a time, the same `rillm bench`; ratios are rillm / llama-server.
#
#   LLAMA_SERVER=/path/to/llama-server [BUDGET=48] scripts/compare-reasoning.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rillm-reasoning}
SLOTS=${SLOTS:-8}
BUDGET=${BUDGET:-48}
. scripts/compare-common.sh
mkdir -p "$OUT"
TEMPLATE=crates/engine/tests/fixtures/qwq-32b.jinja
URL="http://127.0.0.1:$PORT/v1/chat/completions"

bench() { # name concurrency
  "$BENCH" bench --url "$URL" --input-tokens 200,50 --output-tokens 128 --ignore-eos --temperature 0 \
    --concurrency "$2" --requests 32 --warmup 1 --extra-body "{\"thinking_budget_tokens\": $BUDGET}" \
    --output "$OUT/$1-c$2.json" > "$OUT/$1-c$2.txt"
}

for c in 1 8; do
  LLAMA_ARGS="--jinja --chat-template-file $TEMPLATE --reasoning-format deepseek" \
    start_llama "$OUT/llama-server-c$c.log"
  bench llama "$c"; stop_server
  RILLM_ARGS="--chat-template-file $TEMPLATE" start_rillm "$OUT/rillm-c$c.log"
  bench rillm "$c"; stop_server
done
for c in 1 8; do
  echo "== concurrency $c: llama-server (a) vs rillm (b), thought budget $BUDGET"
  grep -E "TTFT|first answer|reasoning:|tokens:" "$OUT/llama-c$c.txt" | sed 's/^/  llama-server /'
  grep -E "TTFT|first answer|reasoning:|tokens:" "$OUT/rillm-c$c.txt" | sed 's/^/  rillm        /'
  "$BENCH" bench compare "$OUT/llama-c$c.json" "$OUT/rillm-c$c.json" --label llama-server --label rillm
done
