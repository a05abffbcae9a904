# Shared by the compare-*.sh scripts: start rillm serve or llama-server on one port with the
# same model, threads and sequences, wait until it answers, stop it. Source it; don't run it.
THREADS=${THREADS:-2}
SLOTS=${SLOTS:-16}
CTX=${CTX:-2048}
MODEL=${MODEL:-$(./target/release/rillm model path)}
PORT=${PORT:-18767}
BENCH=./target/release/rillm
# The server under test; another build (an A/B of two revisions) is loaded by the same bench.
RILLM_BIN=${RILLM_BIN:-./target/release/rillm}

wait_ready() { # path
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/$1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "server never became ready" >&2; return 1
}

start_rillm() { # log   (RILLM_ARGS: extra `rillm serve` flags)
  echo "== rillm serve: $RILLM_BIN (threads $THREADS, $SLOTS sequences) ${RILLM_ARGS:-}"
  "$RILLM_BIN" serve --model "$MODEL" --port "$PORT" --threads "$THREADS" --max-running "$SLOTS" \
    --ctx-size "$CTX" --max-waiting 1024 ${RILLM_ARGS:-} >"$1" 2>&1 &
  SERVER_PID=$!
  wait_ready ready
}

start_llama() { # log   (LLAMA_ARGS: extra llama-server flags)
  : "${LLAMA_SERVER:?set LLAMA_SERVER to a llama-server binary}"
  # On a CPU with AMX, llama.cpp's AMX matmul crashes (ggml-org/llama.cpp#20824) and rillm
  # is built without it (.cargo/llama-no-amx.cmake); --no-repack keeps llama-server off it
  # too, so both run the same AVX-512 kernels (Q4_1 has no other repacked layout).
  local extra=()
  grep -qw amx_tile /proc/cpuinfo 2>/dev/null && extra+=(--no-repack)
  echo "== llama-server (threads $THREADS, $SLOTS slots) ${extra[*]} ${LLAMA_ARGS:-}"
  "$LLAMA_SERVER" -m "$MODEL" --port "$PORT" -t "$THREADS" -tb "$THREADS" -np "$SLOTS" -c $((CTX * SLOTS)) \
    --no-webui "${extra[@]}" ${LLAMA_ARGS:-} >"$1" 2>&1 &
  SERVER_PID=$!
  wait_ready health
}

stop_server() {
  kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true
}

# Prints `rillm bench compare` of OUT/llama-KIND.json (baseline) and OUT/rillm-KIND.json for
# each KIND: ratios are rillm / llama-server; FORMAT (default markdown) as `--format` takes it.
ratios() { # KIND...
  local kind
  for kind in "$@"; do
    if [ -f "$OUT/llama-$kind.json" ] && [ -f "$OUT/rillm-$kind.json" ]; then
      echo "### $kind"
      "$BENCH" bench compare "$OUT/llama-$kind.json" "$OUT/rillm-$kind.json" \
        --label llama-server --label rillm --format "${FORMAT:-markdown}"
    else
      echo "$kind: no ratios, a result file is missing in $OUT"
    fi
  done
}
