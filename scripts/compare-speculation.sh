#!/usr/bin/env bash
# Speculative decoding against llama.cpp's llama-server: copy-heavy prompts (a source file of
# this repo, to be repeated) and natural prompts (stories: the control, where drafts rarely
# match), one stream and four, greedy, 200 tokens each. Servers, one at a time on the same
# cores and model (replies end where the model ends them): rillm --speculative off, rillm --speculative ngram (the default), llama-server
# without speculation and with its n-gram speculation (--spec-type ngram-mod).
#
#   LLAMA_SERVER=/path/to/llama-server scripts/compare-speculation.sh [OUT_DIR]
#
# Prints `rillm bench compare` per workload (ratios to rillm off), and each server's drafted
# and accepted tokens where it reports vLLM's spec_decode metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rillm-speculation}
REQUESTS=${REQUESTS:-6}
SERVERS=${SERVERS:-"rillm-off rillm-ngram llama llama-ngram"}
. scripts/compare-common.sh
mkdir -p "$OUT"

# The prompts: the head of six of this repo's source files, to be repeated; six stories.
python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
files = ["crates/engine/src/speculate.rs", "crates/engine/src/queue.rs", "crates/bench/src/stats.rs",
         "crates/server/src/json.rs", "crates/engine/src/prefix_cache.rs", "crates/bench/src/think.rs"]
with open(out / "code.jsonl", "w") as f:
    for path in files:
        code = pathlib.Path(path).read_text()[:1500]
        prompt = f"Repeat the following Rust code exactly, with no changes:\n\n```rust\n{code}\n```"
        f.write(json.dumps({"messages": [{"role": "user", "content": prompt}]}) + "\n")
topics = ["a lighthouse keeper who finds a message in a bottle", "a robot learning to paint",
          "two friends lost in a night market", "a baker whose bread can talk",
          "the last train before a snowstorm", "a cat that runs a small library"]
with open(out / "story.jsonl", "w") as f:
    for t in topics:
        f.write(json.dumps({"messages": [{"role": "user", "content": f"Write a short story about {t}."}]}) + "\n")
PY

run() { # name
  local url="http://127.0.0.1:$PORT/v1/chat/completions"
  for kind in code story; do
    for c in 1 4; do
      "$BENCH" bench --url "$url" --dataset "$OUT/$kind.jsonl" --concurrency "$c" --requests "$REQUESTS" \
        --max-tokens 200 --temperature 0 --warmup 1 --output "$OUT/$1-$kind-c$c.json" \
        > "$OUT/$1-$kind-c$c.txt"
    done
  done
  curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^vllm:spec_decode_num_(draft|accepted)_tokens_total' \
    | sed "s/^/$1 /" || true
}

for server in $SERVERS; do
  case $server in
    rillm-off) RILLM_ARGS="--speculative off" start_rillm "$OUT/$server.log" ;;
    rillm-ngram) RILLM_ARGS="--speculative ngram" start_rillm "$OUT/$server.log" ;;
    llama) start_llama "$OUT/$server.log" ;;
    llama-ngram) LLAMA_ARGS="--spec-type ngram-mod --metrics" start_llama "$OUT/$server.log" ;;
    *) echo "unknown server $server" >&2; exit 2 ;;
  esac
  run "$server"; stop_server
done

for kind in code story; do
  for c in 1 4; do
    files=(); labels=()
    for server in $SERVERS; do
      if [ -f "$OUT/$server-$kind-c$c.json" ]; then files+=("$OUT/$server-$kind-c$c.json"); labels+=(--label "$server"); fi
    done
    echo "### $kind, concurrency $c"
    "$BENCH" bench compare "${files[@]}" "${labels[@]}" --format "${FORMAT:-markdown}" | grep -E '^\| (metric|---|output tok/s|TPOT p50 ms|TTFT p50 ms|completed|drafted tokens kept %|tokens a draft) '
  done
done
