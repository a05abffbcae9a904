#!/usr/bin/env bash
# Speculation beside streams that do not draft (issue 47): four streams that loop ("Write a
# long story.", 400 tokens, ignore_eos: prompt lookup drafts them deep) and one short one
# ("Hi", 100 tokens) sent together over /generate, three rounds on one server from its start
# (the first round after a start included), greedy. Servers, one at a time, each started
# afresh: rillm --speculative off, rillm --speculative ngram (the default, its fairness guard
# at 1.2x), and rillm --speculative ngram --spec-max-slowdown 100 (drafts chosen for the
# batch's throughput alone, as before the guard).
#
#   scripts/compare-spec-fairness.sh [OUT_DIR]
#
# Prints, per server and stream kind, the mean end-to-end time (the short stream's per
# round), TPOT p50 and p99 over the requests, the ratios to speculation off, output tok/s of
# the whole, and the guard's cuts (rillm_spec_decode_guard_cuts_total). (Gaps between
# tokens say little here: a stream that drafts gets its tokens in bursts.)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rillm-spec-fairness}
ROUNDS=${ROUNDS:-3}
SLOTS=${SLOTS:-8}
SERVERS=${SERVERS:-"off guarded unguarded"}
. scripts/compare-common.sh
mkdir -p "$OUT"
{
  for _ in 1 2 3 4; do echo '{"prompt": "Write a long story.", "max_tokens": 400}'; done
  echo '{"prompt": "Hi", "max_tokens": 100}'
} > "$OUT/mixed.jsonl"

# ANALYSE_ONLY=1 prints the figures of an earlier run in OUT_DIR without running servers.
for server in $SERVERS; do
  [ "${ANALYSE_ONLY:-0}" = 1 ] && break
  case $server in
    off) RILLM_ARGS="--speculative off" ;;
    guarded) RILLM_ARGS="--speculative ngram" ;;
    unguarded) RILLM_ARGS="--speculative ngram --spec-max-slowdown 100" ;;
    *) echo "unknown server $server" >&2; exit 2 ;;
  esac
  RILLM_ARGS=$RILLM_ARGS start_rillm "$OUT/$server.log"
  for round in $(seq 1 "$ROUNDS"); do
    "$BENCH" bench --url "http://127.0.0.1:$PORT/generate" --dataset "$OUT/mixed.jsonl" --requests 5 \
      --concurrency 5 --ignore-eos --temperature 0 --timeout 300 --output "$OUT/$server-$round.json" \
      > "$OUT/$server-$round.txt"
  done
  curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^(rillm_spec_decode_guard_cuts_total|vllm:spec_decode_num_(drafts|draft_tokens|accepted_tokens)_total)' \
    > "$OUT/$server.metrics" || true
  stop_server
done

python3 - "$OUT" $SERVERS <<'PY'
import json, pathlib, statistics, sys
out, servers = pathlib.Path(sys.argv[1]), sys.argv[2:]

def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] if values else float("nan")

figures = {}
for server in servers:
    kinds = {"short": {"e2e": [], "tpot": []}, "looping": {"e2e": [], "tpot": []}}
    tokens, seconds = 0, 0.0
    for path in sorted(out.glob(f"{server}-*.json")):
        run = json.loads(path.read_text())
        requests = [r for r in run["requests"] if r["status"] == "completed"]
        for r in requests:
            kind = kinds["short" if r.get("completion_tokens") == 100 else "looping"]
            kind["e2e"].append(r["e2e_ms"])
            kind["tpot"].append(r["tpot_ms"])
            tokens += r.get("completion_tokens") or 0
        seconds += (max(r["sent_ms"] + r["e2e_ms"] for r in requests) - min(r["sent_ms"] for r in requests)) / 1000
    figures[server] = {
        kind: {"e2e_ms": v["e2e"], "e2e_mean_ms": statistics.mean(v["e2e"]), "tpot_p50_ms": pct(v["tpot"], 50),
               "tpot_p99_ms": pct(v["tpot"], 99)}
        for kind, v in kinds.items()
    }
    figures[server]["output_tok_s"] = tokens / seconds if seconds else float("nan")
    metrics = out / f"{server}.metrics"
    figures[server]["metrics"] = metrics.read_text().strip().replace("\n", "; ") if metrics.exists() else ""

base = figures.get("off")
for server, f in figures.items():
    print(f"== {server}: output {f['output_tok_s']:.1f} tok/s" +
          (f" ({f['output_tok_s'] / base['output_tok_s']:.2f}x off)" if base else "") + f"  {f['metrics']}")
    for kind in ("short", "looping"):
        k = f[kind]
        rounds = " ".join(f"{e:.0f}" for e in k["e2e_ms"]) if kind == "short" else ""
        line = (f"  {kind:8} E2E mean {k['e2e_mean_ms']:7.0f} ms {('(' + rounds + ')') if rounds else ''}  "
                f"TPOT p50 {k['tpot_p50_ms']:5.1f} p99 {k['tpot_p99_ms']:5.1f} ms")
        if base:
            b = base[kind]
            line += (f"   vs off: E2E {k['e2e_mean_ms'] / b['e2e_mean_ms']:.2f}x  TPOT p50 "
                     f"{k['tpot_p50_ms'] / b['tpot_p50_ms']:.2f}x p99 {k['tpot_p99_ms'] / b['tpot_p99_ms']:.2f}x")
        print(line)
(out / "figures.json").write_text(json.dumps(figures, indent=1))
PY
