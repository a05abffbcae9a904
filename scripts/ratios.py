"""Prints rillm / llama-server ratios from pairs of `rillm bench --output` files.

    python3 scripts/ratios.py OUT_DIR KIND [KIND ...]

reads OUT_DIR/rillm-KIND.json and OUT_DIR/llama-KIND.json for each KIND. For a sweep of
rates it also prints each server's sustainable rate: the highest swept rate at which at
least 90 % of the offered requests met the TTFT SLO (none when no rate did).
"""
import json
import os
import sys


def levels(path):
    d = json.load(open(path))
    return d["levels"] if "levels" in d else [d]


def get(d, *path):
    for p in path:
        d = None if d is None else d.get(p)
    return d


def level_name(r):
    load = r["load"]
    if load.get("concurrency") is not None:
        return f"c={load['concurrency']}"
    if load.get("requested_rate_rps") is not None:
        return f"{load['requested_rate_rps']} req/s"
    return load["mode"]


ROWS = [
    ("completed", ("completed",)),
    ("output tok/s", ("output_tokens_per_s",)),
    ("TTFT p50 ms", ("latency", "ttft_ms", "p50")),
    ("TTFT p90 ms", ("latency", "ttft_ms", "p90")),
    ("TTFT p99 ms", ("latency", "ttft_ms", "p99")),
    ("TPOT p50 ms", ("latency", "tpot_ms", "p50")),
    ("ITL p99 ms", ("latency", "itl_ms", "p99")),
    ("goodput req/s", ("goodput_rps",)),
    ("SLO attainment %", ("slo_attainment_pct",)),
    ("rejected 429", ("rejected_429",)),
    ("prompt-cache hit %", ("tokens", "prefix_cache_hit_pct")),
]


def fmt(v):
    if isinstance(v, float):
        return f"{v:.2f}" if abs(v) < 1 else f"{v:.1f}"
    return str(v)


def row(name, label, a, b):
    numeric = isinstance(a, (int, float)) and isinstance(b, (int, float))
    ratio = f"{a / b:.2f}" if numeric and b else "-"
    print(f"{name:<24} {label:<22}{fmt(a):>10}{fmt(b):>10}{ratio:>8}")


def sustainable_rate(sweep):
    """The highest swept rate at >= 90 % SLO attainment, or None."""
    rates = [r["load"].get("requested_rate_rps") for r in sweep if r.get("slo_attainment_pct", 0) >= 90]
    return max((r for r in rates if r is not None), default=None)


def main():
    out, kinds = sys.argv[1], sys.argv[2:]
    print(f"{'workload / level':<24} {'metric':<22}{'rillm':>10}{'llama':>10}{'ratio':>8}")
    for kind in kinds:
        files = [f"{out}/{server}-{kind}.json" for server in ("rillm", "llama")]
        missing = [f for f in files if not os.path.exists(f)]
        if missing:
            print(f"{kind}: no ratios, missing {' and '.join(missing)}")
            continue
        ours, theirs = levels(files[0]), levels(files[1])
        if len(ours) > 1 and ours[0]["load"].get("requested_rate_rps") is not None:
            a, b = sustainable_rate(ours), sustainable_rate(theirs)
            row(kind, "sustainable req/s", "none" if a is None else a, "none" if b is None else b)
        pairs = zip(ours, theirs)
        for r, l in pairs:
            name = f"{kind} {level_name(r)}"
            for label, path in ROWS:
                row(name, label, get(r, *path), get(l, *path))
            for tr, tl in zip(r.get("per_turn") or [], l.get("per_turn") or []):
                row(name, f"turn {tr['turn']} TTFT p50", get(tr, "ttft_ms", "p50"), get(tl, "ttft_ms", "p50"))


main()
