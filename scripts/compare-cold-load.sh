#!/usr/bin/env bash
# Cold load to first token with several models: a fresh server serving two copies of the
# default model (`chat`, `chat2`), the time of the first request for `chat2` (not loaded
# yet; `max_tokens: 1`), on rillm (`--model NAME=PATH` twice, `chat` preloaded and waited
# for) and on llama-server's router mode (`--models-dir`), RUNS times each, alternating.
#
#   LLAMA_SERVER=/path/to/llama-server [RUNS=3] [RILLM_FLAGS=...] [LLAMA_ARGS=...] scripts/compare-cold-load.sh
#
# RILLM_FLAGS: e.g. `--max-running 4` gives rillm the KV cells llama-server's default has
# (4 slots × 2,048 = 8,192; llama-server: 4 slots in one unified 8,192-cell cache). rillm's
# default (16 × 2,048) allocates and clears four times that at each load; LLAMA_ARGS="-np 16
# -c 32768" gives llama-server rillm's.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_SERVER:?set LLAMA_SERVER to a llama-server binary}"
RUNS=${RUNS:-3}
THREADS=${THREADS:-2}
MODEL=${MODEL:-$(./target/release/rillm model path)}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
ln -s "$MODEL" "$DIR/chat.gguf"
cp "$MODEL" "$DIR/chat2.gguf"   # a file of its own, as a second model would be
REQUEST='{"model": "chat2", "prompt": "Hi", "max_tokens": 1}'
first_answer() { # port
  curl -s -o /dev/null -w "%{time_total}" "http://127.0.0.1:$1/v1/completions" \
    -H 'content-type: application/json' -d "$REQUEST"
}
for run in $(seq "$RUNS"); do
  # shellcheck disable=SC2086 # RILLM_FLAGS is a list of flags
  ./target/release/rillm serve --port 18797 --threads "$THREADS" ${RILLM_FLAGS:-} \
    --model "chat=$DIR/chat.gguf" --model "chat2=$DIR/chat2.gguf" >"$DIR/rillm.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do curl -s http://127.0.0.1:18797/v1/models | grep -q '"loaded"' && break; sleep 0.1; done
  echo "run $run rillm: $(first_answer 18797) s"
  kill "$pid"; wait "$pid" || true
  # shellcheck disable=SC2086 # LLAMA_ARGS is a list of flags
  "$LLAMA_SERVER" --models-dir "$DIR" --port 18798 -t "$THREADS" ${LLAMA_ARGS:-} >"$DIR/llama.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do curl -sf http://127.0.0.1:18798/v1/models >/dev/null && break; sleep 0.1; done
  echo "run $run llama-server: $(first_answer 18798) s"
  kill "$pid"; wait "$pid" || true
done
