#!/usr/bin/env bash
# Embeddings: rillm against llama.cpp's llama-server (--embedding --pooling mean) on the
# same GGUF (all-MiniLM-L6-v2 F16, `rillm model fetch all-minilm-l6-v2`), cores and client,
# one server at a time.
#
#   LLAMA_SERVER=/path/to/llama-server [LLAMA_BENCH=/path/to/llama-bench] scripts/compare-embeddings.sh [OUT_DIR]
#
# Kinds: single-input requests at concurrency 1, 8 and 32 (c1, c8, c32); requests of 64
# inputs, two at a time (b64); inputs of ~450 tokens, four at a time (long). Inputs are
# the bench's synthetic prompts of 40 tokens (~42 with [CLS] and [SEP]). llama-server runs
# at the setting that was fastest in a sweep of -np 8/16/32/64 and -ub 256/512 (-np 64,
# -ub 512, 512 context per slot); rillm with as many inputs per batch (--max-running 64)
# and its default batch of 256 tokens. The `long` kind also runs on llama-server with
# -ub 256 (an input must fit one ubatch there: the rest are its 500s). With LLAMA_BENCH,
# llama-bench's prompt-processing rate of the same GGUF is the ceiling the tokens/s of
# both are read against.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rillm-embeddings}
SLOTS=${SLOTS:-64}
CTX=512
MODEL=${MODEL:-$(./target/release/rillm model fetch all-minilm-l6-v2)}
. scripts/compare-common.sh
mkdir -p "$OUT"

URL() { echo "http://127.0.0.1:$PORT/v1/embeddings"; }

kinds() { # name
  local name=$1
  "$BENCH" bench --url "$(URL)" --input-tokens 40 --requests 200 --concurrency 1 --warmup 4 --output "$OUT/$name-c1.json" > "$OUT/$name-c1.txt"
  "$BENCH" bench --url "$(URL)" --input-tokens 40 --requests 400 --concurrency 8 --output "$OUT/$name-c8.json" > "$OUT/$name-c8.txt"
  "$BENCH" bench --url "$(URL)" --input-tokens 40 --requests 600 --concurrency 32 --output "$OUT/$name-c32.json" > "$OUT/$name-c32.txt"
  "$BENCH" bench --url "$(URL)" --input-tokens 40 --batch-size 64 --requests 20 --concurrency 2 --output "$OUT/$name-b64.json" > "$OUT/$name-b64.txt"
  long "$name-long"
  for kind in c1 c8 c32 b64 long; do
    echo "$name $kind: $(grep -m1 -E '^  inputs' "$OUT/$name-$kind.txt" || true) $(grep -m1 -E '^  offered' "$OUT/$name-$kind.txt")"
  done
}

long() { # result name
  "$BENCH" bench --url "$(URL)" --input-tokens 450 --requests 40 --concurrency 4 --output "$OUT/$1.json" > "$OUT/$1.txt"
}

if [ -n "${LLAMA_BENCH:-}" ]; then
  "$LLAMA_BENCH" -m "$MODEL" -p 32,128,512 -n 0 -t "$THREADS" -embd 1 -r 3 | tee "$OUT/llama-bench.txt"
fi

start_rillm "$OUT/rillm-server.log"
kinds rillm
stop_server

LLAMA_ARGS="--embedding --pooling mean -ub 512 -b 2048" start_llama "$OUT/llama-server.log"
kinds llama
stop_server

LLAMA_ARGS="--embedding --pooling mean -ub 256 -b 256" start_llama "$OUT/llama-ub256-server.log"
long llama-ub256-long
echo "llama -ub 256 long: $(grep -m1 -E '^  offered' "$OUT/llama-ub256-long.txt")"
stop_server

ratios c1 c8 c32 b64 long
