#!/usr/bin/env bash
# rillm replicas behind a real router (scripts/cluster: sglang-router 0.3.2, 2 replicas x 1
# thread on this machine's 2 cores) on a multi-tenant shared-prefix workload: 8 system
# prompts of ~400 tokens (a cold one costs about 3.5 s of prefill on one core here; ~1,000
# would cost 10 s and leave a run of this length mostly warm-up), Poisson arrivals below
# the capacity of prefix routing. Runs, one at a time:
#   1. cache_aware routing, 2. round_robin, 3. one rillm with 2 threads at the same load
#   (the cache of both replicas together), 4. a fault run: cache_aware, one replica killed
#   (SIGKILL) mid-run; failures counted before and after the router noticed.
# Each replica's prefix cache is smaller than the 8 prefixes (4 slots and 20 MiB of host
# memory, one saved prompt: 5 of them; 40 MiB held 7 once the host tier stopped keeping
# copies of what the slots hold), as a GPU's is smaller than a real working set: whether
# each replica sees 4 tenants or 8 is what routing decides.
# Results: $OUT/*.json, $OUT/summary.txt. Usage: scripts/compare-router.sh; RUNS picks parts
# (default "routing single fault"); the fault run sends FAULT_REQUESTS (150): after the kill
# one replica carries the whole load, past its capacity, and a longer run would only add
# requests that time out in its queue.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
rillm_router_venv
PY=$RILLM_ROUTER_PYTHON
OUT=${OUT:-target/compare-router}
PORT=${PORT:-18800}
RATE=${RATE:-0.6}
REQUESTS=${REQUESTS:-300}
FAULT_REQUESTS=${FAULT_REQUESTS:-150}
RUNS=${RUNS:-routing single fault}
BENCH=./target/release/rillm
mkdir -p "$OUT"
SERVE=(--max-running 4 --prefix-cache-mib 20)
WORKLOAD=(--rate "$RATE" --input-tokens 32 --output-tokens 16 --ignore-eos
  --shared-prefix-tokens 400 --prefix-groups 8 --seed 7 --timeout 300 --ttft-slo-ms 1500)

CLUSTER_PID=
start_cluster() { # policy
  scripts/cluster --port "$PORT" --policy "$1" -- "${SERVE[@]}" >"$OUT/cluster-$1.out" 2>&1 &
  CLUSTER_PID=$!
  for _ in $(seq 1 600); do
    grep -q '^logs:' "$OUT/cluster-$1.out" && return 0
    sleep 0.2
  done
  echo "the cluster did not start" >&2
  return 1
}
stop_cluster() {
  kill -TERM "$CLUSTER_PID"
  wait "$CLUSTER_PID" || true
}

# vLLM's prefix-cache counters summed over the given ports' /metrics.
prefix_share() { # label port...
  "$PY" - "$@" <<'PY'
import sys, urllib.request
label, ports = sys.argv[1], sys.argv[2:]
def total(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(name + "{") or l.startswith(name + " "))
hits = sum(total(p, "vllm:prefix_cache_hits_total") for p in ports)
queries = sum(total(p, "vllm:prefix_cache_queries_total") for p in ports)
print(f"{label}: prefix-cache hits {hits:.0f} of {queries:.0f} prompt tokens = {100 * hits / max(queries, 1):.1f} %")
PY
}

routing() {
for policy in cache_aware round_robin; do
  echo "== $policy: 2 replicas x 1 thread behind sglang-router"
  start_cluster "$policy"
  "$BENCH" bench --url "http://127.0.0.1:$PORT/v1/chat/completions" "${WORKLOAD[@]}" --requests "$REQUESTS" --output "$OUT/$policy.json"
  prefix_share "$policy" $((PORT + 1)) $((PORT + 2)) | tee "$OUT/$policy-cache.txt"
  stop_cluster
done
}

single() {
echo "== one rillm, 2 threads, the cache of both replicas"
./target/release/rillm serve --port $((PORT + 1)) --threads 2 --max-running 8 --prefix-cache-mib 40 \
  >"$OUT/single.log" 2>&1 &
single=$!
"$PY" -c "import time, urllib.request as u
for _ in range(600):
    try:
        u.urlopen('http://127.0.0.1:$((PORT + 1))/ready'); break
    except Exception: time.sleep(0.2)"
"$BENCH" bench --url "http://127.0.0.1:$((PORT + 1))/v1/chat/completions" "${WORKLOAD[@]}" --requests "$REQUESTS" --output "$OUT/single.json"
prefix_share single $((PORT + 1)) | tee "$OUT/single-cache.txt"
kill -TERM "$single"
wait "$single" || true
}

fault() {
echo "== fault run: cache_aware, replica 1 killed 100 s in, while it runs a request"
start_cluster cache_aware
victim=$(awk '/^replica 1:/ {print $5}' "$OUT/cluster-cache_aware.out")
"$BENCH" bench --url "http://127.0.0.1:$PORT/v1/chat/completions" "${WORKLOAD[@]}" --requests "$FAULT_REQUESTS" \
  --output "$OUT/fault.json" &
bench=$!
sleep 100
"$PY" - "$PORT" "$victim" "$OUT/fault-times.json" <<'PY'
import json, os, signal, sys, time, urllib.request
port, pid, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def running():
    text = urllib.request.urlopen(f"http://127.0.0.1:{port + 2}/metrics").read().decode()
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith("vllm:num_requests_running"))
# Killed with a request on it: the fault a router must answer for (up to 60 s more).
deadline = time.time() + 60
while running() < 1 and time.time() < deadline:
    time.sleep(0.02)
killed = time.time()
os.kill(pid, signal.SIGKILL)
while True:
    workers = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/workers"))["workers"]
    if any(not w["is_healthy"] for w in workers):
        break
    time.sleep(0.05)
noticed = time.time()
print(f"killed replica 1; the router took it out {noticed - killed:.2f} s later")
json.dump({"killed_unix_ms": killed * 1000, "noticed_unix_ms": noticed * 1000}, open(out, "w"))
PY
wait "$bench" || true
stop_cluster
"$PY" - "$OUT/fault.json" "$OUT/fault-times.json" <<'PY' | tee "$OUT/fault.txt"
import json, sys
result, times = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
start = result["run_context"]["started_unix_ms"]
killed, noticed = times["killed_unix_ms"] - start, times["noticed_unix_ms"] - start
failed = [r for r in result["requests"] if r["status"] != "completed"]
def when(r): return r.get("sent_ms") or r.get("scheduled_ms") or 0.0
before = [r for r in failed if when(r) < killed]
between = [r for r in failed if killed <= when(r) < noticed]
after = [r for r in failed if when(r) >= noticed]
print(f"fault run: {result['offered_requests']} offered, {result['completed']} completed, {len(failed)} failed: "
      f"{len(before)} sent before the kill (in flight on the killed replica), {len(between)} sent between the kill "
      f"and the router noticing ({(noticed - killed) / 1000:.2f} s), {len(after)} sent after")
PY
}

for run in $RUNS; do "$run"; done

{
  # What the runs asked for (RUNS) left; a part not run this time is left out.
  for f in "$OUT"/cache_aware-cache.txt "$OUT"/round_robin-cache.txt "$OUT"/single-cache.txt "$OUT"/fault.txt; do
    [ -f "$f" ] && cat "$f"
  done
  if [ -f "$OUT/round_robin.json" ] && [ -f "$OUT/cache_aware.json" ]; then
    echo "### cache_aware vs round_robin (ratios to round_robin)"
    "$BENCH" bench compare "$OUT/round_robin.json" "$OUT/cache_aware.json" --label round_robin --label cache_aware --format markdown
  fi
  if [ -f "$OUT/single.json" ] && [ -f "$OUT/cache_aware.json" ]; then
    echo "### 2 replicas (cache_aware) vs one rillm with 2 threads (ratios to one rillm)"
    # One rillm counts prompts with its /tokenize, the router forwards none: the same synthetic
    # words, counted one token each (446.02 against 446.0 tokens a prompt), hence --force.
    "$BENCH" bench compare "$OUT/single.json" "$OUT/cache_aware.json" --label one-2-threads --label cache_aware \
      --format markdown --force
  fi
} | tee "$OUT/summary.txt"
