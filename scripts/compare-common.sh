# Shared by the compare-*.sh scripts: start rillm serve or llama-server on one port with the
# same model, threads and sequences, wait until it answers, stop it. Source it; don't run it.
THREADS=${THREADS:-2}
SLOTS=${SLOTS:-16}
CTX=${CTX:-2048}
MODEL=${MODEL:-$(./target/release/rillm model path)}
PORT=${PORT:-18767}
BENCH=./target/release/rillm

wait_ready() { # path
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/$1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "server never became ready" >&2; return 1
}

start_rillm() { # log   (RILLM_ARGS: extra `rillm serve` flags)
  echo "== rillm serve (threads $THREADS, $SLOTS sequences) ${RILLM_ARGS:-}"
  ./target/release/rillm serve --model "$MODEL" --port "$PORT" --threads "$THREADS" --max-running "$SLOTS" \
    --ctx-size "$CTX" --max-waiting 1024 ${RILLM_ARGS:-} >"$1" 2>&1 &
  SERVER_PID=$!
  wait_ready ready
}

start_llama() { # log
  : "${LLAMA_SERVER:?set LLAMA_SERVER to a llama-server binary}"
  echo "== llama-server (threads $THREADS, $SLOTS slots)"
  "$LLAMA_SERVER" -m "$MODEL" --port "$PORT" -t "$THREADS" -tb "$THREADS" -np "$SLOTS" -c $((CTX * SLOTS)) \
    --no-webui >"$1" 2>&1 &
  SERVER_PID=$!
  wait_ready health
}

stop_server() {
  kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true
}
