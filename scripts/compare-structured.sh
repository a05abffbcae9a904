#!/usr/bin/env bash
# Structured outputs, rillm serve vs llama.cpp's llama-server on the same model: the 32
# shipped JSON Schemas (crates/bench/schemas), each with a prompt from its description, sent
# with OpenAI's response_format json_schema at concurrency 1 and 8, greedy, 300 tokens at
# most; llama-server also with its n-gram speculation (--spec-type ngram-mod); the same
# prompts without a constraint on rillm for its own baseline. One server at a
# time, the same `rillm bench`; `rillm bench compare` prints the ratios.
# WORKLOAD=extract sends instead 32 order confirmations (~210-token prompts) to be extracted
# under one schema (scripts/extraction-prompts.py), the first request of each run kept out
# of the figures (it compiles the schema).
#
#   LLAMA_SERVER=/path/to/llama-server [WORKLOAD=extract] scripts/compare-structured.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rillm-structured}
SLOTS=${SLOTS:-8}
. scripts/compare-common.sh
mkdir -p "$OUT"
URL="http://127.0.0.1:$PORT/v1/chat/completions"
WARMUP=()

case ${WORKLOAD:-schemas} in
  schemas)
    SCHEMAS=crates/bench/schemas
    # The prompts, one per schema in file-name order: the order constraints are assigned in.
    PROMPTS="$OUT/prompts.jsonl"
    python3 - "$SCHEMAS" > "$PROMPTS" <<'PY'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    schema = json.loads(path.read_text())
    ask = (schema.get("description") or schema.get("title") or path.stem) + " Reply with a JSON object only."
    print(json.dumps({"prompt": ask, "max_tokens": 300}))
PY
    ;;
  extract)
    python3 scripts/extraction-prompts.py "$OUT"
    SCHEMAS="$OUT/extract-schema" PROMPTS="$OUT/extract.jsonl" WARMUP=(--warmup 1)
    ;;
  *) echo "WORKLOAD must be schemas or extract" >&2; exit 2 ;;
esac

bench() { # name concurrency [extra args...]
  local name=$1 c=$2; shift 2
  "$BENCH" bench --url "$URL" --dataset "$PROMPTS" --concurrency "$c" --requests 32 --max-tokens 300 \
    --temperature 0 "${WARMUP[@]}" --output "$OUT/$name-c$c.json" "$@" > "$OUT/$name-c$c.txt"
}
constrained=(--response-format json_schema --schemas "$SCHEMAS")

# Every run on a fresh server, so none finds another's prompts in its prefix cache.
for c in 1 8; do
  start_llama "$OUT/llama-server-c$c.log"; bench llama-schema "$c" "${constrained[@]}"; stop_server
  # llama-server's n-gram speculation, its best setting where outputs repeat themselves.
  LLAMA_ARGS="--spec-type ngram-mod" start_llama "$OUT/llama-server-ngram-c$c.log"
  bench llama-ngram-schema "$c" "${constrained[@]}"; stop_server
  start_rillm "$OUT/rillm-schema-c$c.log"; bench rillm-schema "$c" "${constrained[@]}"
  curl -s "http://127.0.0.1:$PORT/metrics" | grep '^rillm_structured' > "$OUT/rillm-metrics-c$c.txt"
  stop_server
  start_rillm "$OUT/rillm-plain-c$c.log"; bench rillm-plain "$c"; stop_server
done

for c in 1 8; do
  echo "== concurrency $c: llama-server json_schema (a) vs rillm json_schema (b)"
  "$BENCH" bench compare "$OUT/llama-schema-c$c.json" "$OUT/rillm-schema-c$c.json" --label llama-server --label rillm
  echo "== concurrency $c: llama-server json_schema with --spec-type ngram-mod (a) vs rillm json_schema (b)"
  "$BENCH" bench compare "$OUT/llama-ngram-schema-c$c.json" "$OUT/rillm-schema-c$c.json" --label llama-ngram --label rillm
  echo "== concurrency $c: rillm without (a) and with (b) the schemas"
  "$BENCH" bench compare "$OUT/rillm-plain-c$c.json" "$OUT/rillm-schema-c$c.json" --label plain --label schema --force
  echo "== concurrency $c: rillm's structured-output counters"
  cat "$OUT/rillm-metrics-c$c.txt"
done
