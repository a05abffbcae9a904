#!/usr/bin/env bash
# Speculative decoding against llama.cpp's llama-server, on the workloads where it matters in
# real use and a control, one stream and four, greedy, 200 tokens each:
#   code     a source file of this repo (its first 1,500 characters), to be repeated;
#   edit     the same files, to be given back with one function renamed;
#   summary  a section of this repo's docs, to be summarised;
#   extract  a made-up order confirmation, its fields to be extracted as JSON under a
#            json_schema (response_format): drafts under the grammar, values copied;
#   story    short stories: the control, where drafts rarely match;
#   repeat   three of the stories, each asked twice: a recurring prompt, where drafts
#            from earlier requests (rillm's n-gram pool, llama-server's ngram-mod) pay.
# Servers, one at a time on the same cores and model (replies end where the model ends
# them): rillm --speculative off, rillm --speculative ngram (the default), llama-server
# without speculation and with its n-gram speculation (--spec-type ngram-mod). Each server
# starts afresh for every workload and concurrency: drafts kept across requests would
# otherwise turn the second concurrency's prompts into repeats of the first's.
#
#   LLAMA_SERVER=/path/to/llama-server scripts/compare-speculation.sh [OUT_DIR]
#   KINDS="code extract" ... runs only those workloads.
#   DRAFT_MODEL=small.gguf SERVERS="rillm-off rillm-draft llama llama-draft" ... adds
#   speculation with a draft model of the same vocabulary (rillm --speculative draft,
#   llama-server --model-draft); MODEL=big.gguf sets the target.
#
# Prints `rillm bench compare` per workload (ratios to rillm off), and each server's drafted
# and accepted tokens where it reports vLLM's spec_decode metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/rillm-speculation}
REQUESTS=${REQUESTS:-6}
SERVERS=${SERVERS:-"rillm-off rillm-ngram llama llama-ngram"}
KINDS=${KINDS:-"code edit summary extract story repeat"}
. scripts/compare-common.sh
mkdir -p "$OUT"

# The prompts, six of each workload, made from this repo's own files.
python3 - "$OUT" <<'PY'
import json, pathlib, re, sys
out = pathlib.Path(sys.argv[1])

def write(kind, prompts):
    with open(out / f"{kind}.jsonl", "w") as f:
        for prompt in prompts:
            f.write(json.dumps({"messages": [{"role": "user", "content": prompt}]}) + "\n")

# The files as they were at one commit, so the prompts stay the same however the code moves.
import subprocess
PINNED = "c7982ca"
def read(path):
    return subprocess.run(["git", "show", f"{PINNED}:{path}"], check=True, capture_output=True, text=True).stdout

files = ["crates/engine/src/speculate.rs", "crates/engine/src/queue.rs", "crates/bench/src/stats.rs",
         "crates/server/src/json.rs", "crates/engine/src/prefix_cache.rs", "crates/bench/src/workload/think.rs"]
heads = [read(path)[:1500] for path in files]
write("code", [f"Repeat the following Rust code exactly, with no changes:\n\n```rust\n{code}\n```" for code in heads])
edits = []
for path, code in zip(files, heads):
    found = re.search(r"\bfn (\w+)", code) or re.search(r"\b(?:struct|enum|const) (\w+)", code)
    if found is None:
        # A long module doc fills the head: start at the code instead.
        text = read(path)
        code = text[re.search(r"^(?!//)", text, re.M).start():][:1500]
        found = re.search(r"\bfn (\w+)", code) or re.search(r"\b(?:struct|enum|const) (\w+)", code)
    name = found.group(1)
    edits.append(f"Rename `{name}` to `{name}_v2` everywhere in the following Rust code and give back the "
                 f"whole code with only that change:\n\n```rust\n{code}\n```")
write("edit", edits)

sections = []
for doc in ["docs/tuning.md", "docs/architecture.md", "docs/scale-out.md", "docs/benchmarks.md"]:
    parts = re.split(r"\n(?=## )", read(doc))
    sections += [p[:1500] for p in parts[1:] if len(p) > 600][:2]
write("summary", [f"Summarise the following text in three sentences, keeping its terms:\n\n{text}" for text in sections[:6]])

people = [("Ada Lovelace", "ada@example.org", "12 Marsh Lane, Bristol"), ("Alan Turing", "alan@example.net", "4 Hill Road, Wilmslow"),
          ("Grace Hopper", "grace@example.com", "77 Harbor Street, Arlington"), ("Edsger Dijkstra", "edsger@example.nl", "9 Canal Row, Nuenen"),
          ("Barbara Liskov", "barbara@example.edu", "31 Elm Avenue, Cambridge"), ("Donald Knuth", "don@example.org", "1 Vine Street, Stanford")]
items = [["USB-C cable, 2 m", "Laptop stand"], ["Mechanical keyboard"], ["Noise-cancelling headphones", "Carry case", "Spare ear pads"],
         ["27-inch monitor", "HDMI cable"], ["Wireless mouse", "Mouse pad"], ["External SSD, 1 TB"]]
extracts = []
for i, ((name, email, address), bought) in enumerate(zip(people, items)):
    lines = "\n".join(f"- {item}: {2 + j} x {19.99 + 10 * j:.2f} EUR" for j, item in enumerate(bought))
    text = (f"Order confirmation ORD-{4711 + i}\nCustomer: {name}\nEmail: {email}\nShip to: {address}\n"
            f"Items:\n{lines}\nThank you for your order, {name.split()[0]}!")
    extracts.append(f"Extract the order number, customer name, email, shipping address and every item's name, "
                    f"quantity and unit price from this message as JSON:\n\n{text}")
write("extract", extracts)
schema = {"type": "object", "additionalProperties": False,
          "required": ["order", "customer", "email", "ship_to", "items"],
          "properties": {"order": {"type": "string"}, "customer": {"type": "string"}, "email": {"type": "string"},
                         "ship_to": {"type": "string"},
                         "items": {"type": "array", "maxItems": 5, "items": {
                             "type": "object", "additionalProperties": False, "required": ["name", "quantity", "unit_price"],
                             "properties": {"name": {"type": "string"}, "quantity": {"type": "integer"},
                                            "unit_price": {"type": "number"}}}}}}
(out / "extract-schema").mkdir(exist_ok=True)
(out / "extract-schema" / "order.json").write_text(json.dumps(schema))

topics = ["a lighthouse keeper who finds a message in a bottle", "a robot learning to paint",
          "two friends lost in a night market", "a baker whose bread can talk",
          "the last train before a snowstorm", "a cat that runs a small library"]
write("story", [f"Write a short story about {t}." for t in topics])
write("repeat", [f"Write a short story about {t}." for t in topics[:3] * 2])
PY

start() { # server log
  case $1 in
    rillm-off) RILLM_ARGS="--speculative off" start_rillm "$2" ;;
    rillm-ngram) RILLM_ARGS="--speculative ngram" start_rillm "$2" ;;
    llama) start_llama "$2" ;;
    llama-ngram) LLAMA_ARGS="--spec-type ngram-mod --metrics" start_llama "$2" ;;
    rillm-draft) RILLM_ARGS="--speculative draft --draft-model ${DRAFT_MODEL:?}" start_rillm "$2" ;;
    llama-draft) LLAMA_ARGS="--model-draft ${DRAFT_MODEL:?} --metrics" start_llama "$2" ;;
    *) echo "unknown server $1" >&2; exit 2 ;;
  esac
}

for server in $SERVERS; do
  for kind in $KINDS; do
    constrained=()
    [ "$kind" = extract ] && constrained=(--response-format json_schema --schemas "$OUT/extract-schema")
    for c in 1 4; do
      start "$server" "$OUT/$server-$kind-c$c.log"
      "$BENCH" bench --url "http://127.0.0.1:$PORT/v1/chat/completions" --dataset "$OUT/$kind.jsonl" \
        --concurrency "$c" --requests "$REQUESTS" --max-tokens 200 --temperature 0 --warmup 1 \
        --output "$OUT/$server-$kind-c$c.json" "${constrained[@]}" > "$OUT/$server-$kind-c$c.txt"
      curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^vllm:spec_decode_num_(draft|accepted)_tokens_total' \
        | sed "s/^/$server $kind c$c /" || true
      stop_server
    done
  done
done

for kind in $KINDS; do
  for c in 1 4; do
    files=(); labels=()
    for server in $SERVERS; do
      if [ -f "$OUT/$server-$kind-c$c.json" ]; then files+=("$OUT/$server-$kind-c$c.json"); labels+=(--label "$server"); fi
    done
    echo "### $kind, concurrency $c"
    "$BENCH" bench compare "${files[@]}" "${labels[@]}" --format "${FORMAT:-markdown}" | grep -E '^\| (metric|---|output tok/s|TPOT p50 ms|TTFT p50 ms|completed|drafted tokens kept %|tokens a draft|valid outputs % of finished) '
  done
done
