"""NVIDIA's AIPerf (`aiperf profile`) against a rillm server, as its users run it: streamed
chat and the streamed Responses API, the server's own token counts (chat's per-chunk usage,
`--per-chunk-usage`, vLLM's `continuous_usage_stats`; the Responses API's last event), and
the server's Prometheus metrics scraped beside the run.

AIPerf needs a Hugging Face tokenizer to write its prompts; with no model hub here it is
built from the GGUF file the server loaded, and checked against the server's /tokenize.

usage: aiperf_profile.py BASE_URL GGUF_PATH
"""

import json
import pathlib
import subprocess
import sys
import tempfile
import urllib.request

REQUESTS = 8
OUTPUT_TOKENS = 24
INPUT_TOKENS = 64


def tokenizer_dir(gguf: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """The GGUF's byte-level BPE (vocabulary, merges, special tokens, chat template) as a
    Hugging Face tokenizer directory (SmolLM2's pre-tokenizer: digits one by one, then
    GPT-2's byte-level split)."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    fields = GGUFReader(str(gguf)).fields
    value = lambda key: fields[key].contents()
    assert value("tokenizer.ggml.model") == "gpt2", value("tokenizer.ggml.model")
    tokens = value("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in value("tokenizer.ggml.merges")]
    bpe = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    bpe.decoder = decoders.ByteLevel()
    control = [t for t, kind in zip(tokens, value("tokenizer.ggml.token_type")) if kind == 3]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=tokens[value("tokenizer.ggml.bos_token_id")],
        eos_token=tokens[value("tokenizer.ggml.eos_token_id")],
        additional_special_tokens=control,
    )
    tokenizer.chat_template = value("tokenizer.chat_template")
    tokenizer.save_pretrained(str(out))
    return out


def server_tokens(base: str, text: str) -> list[int]:
    body = json.dumps({"prompt": text, "add_special_tokens": False}).encode()
    request = urllib.request.Request(f"{base}/tokenize", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.load(r)["tokens"]


def model_name(base: str) -> str:
    with urllib.request.urlopen(f"{base}/v1/models", timeout=10) as r:
        return json.load(r)["data"][0]["id"]


def main() -> None:
    base, gguf = sys.argv[1], pathlib.Path(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix="rillm-aiperf-") as tmp:
        tmp = pathlib.Path(tmp)
        tokenizer = tokenizer_dir(gguf, tmp / "tokenizer")
        # AIPerf sizes its prompts with this tokenizer: it must split text as the server does.
        from transformers import AutoTokenizer

        sample = "Hello, world! 12345 tokens\n\n  def f(x):\treturn x**2  # café, naïve — 東京"
        ours = AutoTokenizer.from_pretrained(str(tokenizer)).encode(sample, add_special_tokens=False)
        theirs = server_tokens(base, sample)
        assert ours == theirs, (ours, theirs)
        # Chat with per-chunk usage, then the Responses API (usage in its last event).
        for endpoint, extra in [("chat", ["--per-chunk-usage"]), ("responses", [])]:
            artifacts = tmp / f"artifacts-{endpoint}"
            run_aiperf(base, tokenizer, endpoint, extra, artifacts)
            check(artifacts, endpoint)


def run_aiperf(base: str, tokenizer: pathlib.Path, endpoint: str, extra: list[str], artifacts: pathlib.Path) -> None:
    command = [
        sys.executable, "-m", "aiperf", "profile",
        "--model", model_name(base), "--url", base, "--endpoint-type", endpoint, "--streaming",
        "--tokenizer", str(tokenizer),
        "--request-count", str(REQUESTS), "--concurrency", "2",
        "--synthetic-input-tokens-mean", str(INPUT_TOKENS), "--synthetic-input-tokens-stddev", "0",
        "--output-tokens-mean", str(OUTPUT_TOKENS), "--output-tokens-stddev", "0",
        # AIPerf's recipe for fixed output lengths: vLLM's min_tokens beside ignore_eos.
        "--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{OUTPUT_TOKENS}",
        "--use-server-token-count", *extra,
        "--random-seed", "1", "--ui-type", "none", "--artifact-dir", str(artifacts),
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=240)
    if run.returncode != 0:
        sys.exit(f"aiperf {endpoint} failed ({run.returncode})\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}")


def check(artifacts: pathlib.Path, endpoint: str) -> None:
    records = [json.loads(line) for line in (artifacts / "profile_export.jsonl").read_text().splitlines() if line]
    failed = [r for r in records if r.get("error")]
    assert not failed, f"requests failed: {failed[:2]}"
    assert len(records) == REQUESTS, f"{len(records)} records of {REQUESTS}"
    for r in records:
        m = {k: v["value"] for k, v in r["metrics"].items()}
        # The server's own count, from its usage: every request ran to max_tokens.
        assert m["output_sequence_length"] == OUTPUT_TOKENS, m
        assert 0 < m["time_to_first_token"] < m["request_latency"], m
        # A chunk may hold several tokens (kept drafts): at most one gap a token, and on the
        # Responses API one more, before `response.output_text.done` (AIPerf times it too).
        gaps = OUTPUT_TOKENS - 1 + (endpoint == "responses")
        assert 1 <= len(m["inter_chunk_latency"]) <= gaps, m["inter_chunk_latency"]
        assert m["inter_token_latency"] > 0, m
    summary = json.loads((artifacts / "profile_export_aiperf.json").read_text())
    assert summary["completed_request_count"]["avg"] == REQUESTS, summary["completed_request_count"]
    assert not summary["error_summary"], summary["error_summary"]
    assert summary["osl_mismatch_count"]["avg"] == 0, summary["osl_mismatch_count"]
    # AIPerf scraped /metrics through the run. Its first scrape may come after a request
    # ended, so the counter's rise is whole requests' tokens, at most all of them.
    scraped = json.loads((artifacts / "server_metrics_export.json").read_text())["metrics"]
    generated = scraped["vllm:generation_tokens"]
    assert generated["description"], "vllm:generation_tokens has no HELP text"
    rise = generated["series"][0]["stats"]["total"]
    assert 0 < rise <= REQUESTS * OUTPUT_TOKENS and rise % OUTPUT_TOKENS == 0, generated
    for name in ["vllm:num_requests_running", "vllm:time_to_first_token_seconds", "vllm:kv_cache_usage_perc"]:
        assert name in scraped, f"{name} not among the scraped server metrics"
    print(f"aiperf {endpoint}: {len(records)} requests, {OUTPUT_TOKENS} tokens each by the server's count; "
          f"TTFT avg {summary['time_to_first_token']['avg']:.1f} ms, ITL avg {summary['inter_token_latency']['avg']:.1f} ms")


if __name__ == "__main__":
    main()
