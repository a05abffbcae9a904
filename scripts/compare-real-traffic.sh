#!/usr/bin/env bash
# rillm serve vs llama.cpp's llama-server on traffic shaped like production, loaded by the
# same `rillm bench`, one server at a time on the same cores. Prints ratios (rillm / llama).
#
#   LLAMA_SERVER=/path/to/llama-server scripts/compare-real-traffic.sh [OUT_DIR]
#
# Workloads (WORKLOADS="trace sessions recurring prefix" by default; session-rate on request):
#   trace      the shared Azure conversation trace (Patel et al., Splitwise, ISCA 2024; CC-BY 4.0),
#              first 200 requests at their recorded times, 5x slower, prompts x0.1, outputs x0.2
#   sessions   24 chat sessions x 4 turns: a ~300-token opening document, then short follow-ups,
#              8 sessions open at a time, the server's live replies in the history
#   session-rate  the same sessions arriving open-loop at SESSION_RATES sessions/s (12 per level,
#              think time between a reply and the next turn exponential, mean 2 s)
#   recurring  40 distinct prompts (~100 tokens, sd 40: the Azure trace's lengths x0.1) sent twice
#              in turn, Poisson 2 req/s
#   prefix     4 shared system prompts of 200 tokens, each request picks one, unique 40-token
#              question, Poisson 2 req/s
# RATES="1,2,4" makes recurring and prefix sweep those Poisson rates instead of 2 req/s (each
# level of recurring sends its own 40 prompts twice; prefix keeps its 4 system prompts and
# draws new questions), and `rillm bench compare` then names each server's sustainable rate: the highest
# swept rate with >= 90 % of requests within the TTFT SLO (500 ms).
# SERVERS="rillm llama" picks which servers run (ratios for the workloads OUT_DIR has both of).
# SLO_SCALE=S judges every workload by calibrated objectives (TTFT and TPOT, `--slo-scale`):
# calibrated on the first server in SERVERS, workload by workload, and passed to the others
# with `--slos-from`, so the sustainable rates and goodput compare against one yardstick.
# SLOS_FROM=DIR/NAME takes every server's objectives from DIR/NAME-WORKLOAD.json instead (an
# earlier run's, e.g. to add a server with other flags: SERVERS=rillm RILLM_ARGS=...).
# Prompts have exact token lengths on both servers: the bench counts them with each
# server's own /tokenize.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rillm-real-traffic}
TRACE=${TRACE:-../shared/data/azure-llm-2023-conv.csv}
WORKLOADS=${WORKLOADS:-trace sessions recurring prefix}
RATES=${RATES:-2}
SESSION_RATES=${SESSION_RATES:-0.1,0.2,0.4}
SERVERS=${SERVERS:-rillm llama}
TRACE_TIME_SCALE=${TRACE_TIME_SCALE:-5}
. scripts/compare-common.sh
mkdir -p "$OUT"

run_workloads() { # name
  local url="http://127.0.0.1:$PORT/v1/chat/completions"
  # session-rate draws other conversations (seed 2) than sessions: none of its turns may be
  # cached by the run before it.
  local common=(--url "$url" --temperature 0)
  local first=${SERVERS%% *}
  for w in $WORKLOADS; do
    local slos=()
    if [ -n "${SLOS_FROM:-}" ]; then
      slos=(--slos-from "$SLOS_FROM-$w.json")
    elif [ -n "${SLO_SCALE:-}" ]; then
      if [ "$1" = "$first" ]; then slos=(--slo-scale "$SLO_SCALE"); else slos=(--slos-from "$OUT/$first-$w.json"); fi
    fi
    case $w in
      trace) "$BENCH" bench "${common[@]}" "${slos[@]}" --seed 1 --trace "$TRACE" --requests 200 --input-scale 0.1 --output-scale 0.2 \
               --time-scale "$TRACE_TIME_SCALE" --output "$OUT/$1-trace.json" > "$OUT/$1-trace.txt" ;;
      sessions) "$BENCH" bench "${common[@]}" "${slos[@]}" --seed 1 --sessions 24 --turns 4 --opening-tokens 300,30 --input-tokens 30,10 \
               --output-tokens 48 --concurrency 8 --output "$OUT/$1-sessions.json" > "$OUT/$1-sessions.txt" ;;
      session-rate) "$BENCH" bench "${common[@]}" "${slos[@]}" --seed 2 --sessions 12 --turns 4 --opening-tokens 300,30 --input-tokens 30,10 \
               --output-tokens 48 --think-ms exp:2000 --rate "$SESSION_RATES" --output "$OUT/$1-session-rate.json" \
               > "$OUT/$1-session-rate.txt" ;;
      recurring) "$BENCH" bench "${common[@]}" "${slos[@]}" --seed 1 --input-tokens 100,40 --distinct-prompts 40 --requests 80 \
               --output-tokens 32 --rate "$RATES" --output "$OUT/$1-recurring.json" > "$OUT/$1-recurring.txt" ;;
      prefix) "$BENCH" bench "${common[@]}" "${slos[@]}" --seed 1 --shared-prefix-tokens 200 --prefix-groups 4 --input-tokens 40 \
               --output-tokens 32 --rate "$RATES" --requests 60 --output "$OUT/$1-prefix.json" > "$OUT/$1-prefix.txt" ;;
      *) echo "unknown workload $w" >&2; exit 2 ;;
    esac
  done
}

for server in $SERVERS; do
  case $server in
    rillm)
      start_rillm "$OUT/rillm-server.log"; run_workloads rillm
      curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^(vllm:prefix|rillm_prefix)' > "$OUT/rillm-prefix-cache.txt" || true
      stop_server ;;
    llama) start_llama "$OUT/llama-server.log"; run_workloads llama; stop_server ;;
    *) echo "unknown server $server" >&2; exit 2 ;;
  esac
done

# shellcheck disable=SC2086
ratios $WORKLOADS
