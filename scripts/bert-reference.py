#!/usr/bin/env python3
"""A numpy forward pass of a BERT sentence encoder's safetensors (sentence-transformers'
layout), the reference an embedding server's vectors are checked against: tokenized by the
model's own tokenizer.json (the `tokenizers` package), BERT's layers, the pooling of
1_Pooling, then L2-normalised (modules.json's Normalize).

    scripts/bert-reference.py MODEL_DIR --compare URL [--sentences FILE] [--min-cosine 0.999] [--batch]
    scripts/bert-reference.py CROSS_ENCODER_DIR --rerank URL [--score-tolerance 5e-3]

--compare posts each sentence (all in one request with --batch) to URL (an OpenAI
`/v1/embeddings`, e.g. llama-server --embedding --pooling mean, or rillm) and prints the
cosine of each vector with the reference's; exits 1 if any is under --min-cosine. --rerank
posts five queries with the sentences as documents to a `/v1/rerank` URL and checks each
score (a sigmoid of the classifier's logit) and the order against the reference's. Without --sentences, 60 varied built-in
sentences (short, long, punctuation, numbers, accents, code).
"""

import argparse
import json
import math
import pathlib
import sys
import urllib.request

import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
bert_to_gguf = __import__("bert-to-gguf")

SENTENCES = [
    "Hello.", "The cat sat on the mat.", "A quick brown fox jumps over the lazy dog.",
    "What is the capital of France?", "Paris is the capital and most populous city of France.",
    "How do I reset my password?", "Click 'Forgot password' on the sign-in page and follow the email link.",
    "The mitochondria is the powerhouse of the cell.", "Interest rates rose by 0.25 percentage points in March 2024.",
    "I can't believe it's not butter!", "Café, naïve, résumé and façade keep their accents.",
    "fn main() { println!(\"hello\"); }", "SELECT name, price FROM products WHERE price > 100 ORDER BY price;",
    "The patient presented with a fever of 39.5 °C and a persistent cough.", "Shipping takes 3-5 business days.",
    "Machine learning models need representative training data.", "Neural networks approximate functions.",
    "The Eiffel Tower was completed in 1889.", "Photosynthesis converts light energy into chemical energy.",
    "Do you ship to Canada?", "Our return policy allows returns within 30 days of purchase.",
    "A retrieval pipeline embeds documents and queries into the same vector space.",
    "Rerankers score each query-document pair jointly.", "He said: \"Don't forget the keys!\"",
    "Q3 revenue: $4.2M (+12% YoY).", "email me at someone@example.com", "https://example.com/path?query=1",
    "The quick brown fox. The quick brown fox. The quick brown fox.", "Ünïcödé text with emojis 🙂🚀 and symbols ©®.",
    "Tokyo, Osaka and Kyoto are cities in Japan.", "The stock market closed higher on Friday.",
    "Water boils at 100 degrees Celsius at sea level.", "The committee postponed its decision until next week.",
    "Kubernetes schedules pods onto nodes.", "Rust's borrow checker prevents data races at compile time.",
    "The recipe calls for two cups of flour and one egg.", "She plays the violin in the city orchestra.",
    "Thunderstorms are expected this afternoon.", "The library opens at nine and closes at five.",
    "An apple a day keeps the doctor away.", "The invoice number is INV-2024-00042.",
    "Please summarise the attached report in three bullet points.", "Translate 'good morning' into Spanish.",
    "Mount Everest is the highest mountain above sea level.", "Electric cars have fewer moving parts.",
    "The train to Lisbon departs from platform 4.", "Inflation erodes purchasing power over time.",
    "Vaccines train the immune system to recognise pathogens.", "The museum features modern art.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light.",
    "Bananas are berries, but strawberries are not.", "The meeting has been moved to Room 301.",
    "Password must contain at least 8 characters, one digit and one symbol.", "GPUs accelerate matrix multiplication.",
    "The river flooded after a week of heavy rain.", "Birds migrate south for the winter.",
    "Sorry, I didn't catch that — could you repeat?", "x = 3; y = x ** 2 + 1", "Ok", "I",
]


class Reference:
    """BERT's forward pass over the safetensors, in float64."""

    def __init__(self, model_dir: pathlib.Path):
        self.config = json.loads((model_dir / "config.json").read_text())
        raw = bert_to_gguf.safetensors(model_dir / "model.safetensors")
        self.w = {k.removeprefix("bert."): v.astype(np.float64) for k, v in raw.items() if v.dtype != np.int64}
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.pooling = bert_to_gguf.pooling(model_dir)

    def norm(self, x, name):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        eps = self.config["layer_norm_eps"]
        return (x - mean) / np.sqrt(var + eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def dense(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def layer(self, x, i):
        p, heads = f"encoder.layer.{i}.", self.config["num_attention_heads"]
        n, d = x.shape
        split = lambda t: t.reshape(n, heads, d // heads).transpose(1, 0, 2)
        q, k, v = (split(self.dense(x, p + f"attention.self.{m}")) for m in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d // heads)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attended = (scores / scores.sum(-1, keepdims=True)) @ v
        x = self.norm(x + self.dense(attended.transpose(1, 0, 2).reshape(n, d), p + "attention.output.dense"),
                      p + "attention.output.LayerNorm")
        h = self.dense(x, p + "intermediate.dense")
        h = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))  # exact GELU
        return self.norm(x + self.dense(h, p + "output.dense"), p + "output.LayerNorm")

    def states(self, encoding) -> np.ndarray:
        ids, types = encoding.ids, encoding.type_ids
        x = (self.w["embeddings.word_embeddings.weight"][ids]
             + self.w["embeddings.position_embeddings.weight"][: len(ids)]
             + self.w["embeddings.token_type_embeddings.weight"][types])
        x = self.norm(x, "embeddings.LayerNorm")
        for i in range(self.config["num_hidden_layers"]):
            x = self.layer(x, i)
        return x

    def embed(self, text: str) -> np.ndarray:
        x = self.states(self.tokenizer.encode(text))
        pooled = x.mean(0) if self.pooling == 1 else x[0]
        return pooled / np.linalg.norm(pooled)

    def score(self, query: str, document: str) -> float:
        """A cross-encoder's relevance: [CLS] through the pooler (dense, tanh) and the
        classifier, as a sigmoid (what rillm and vLLM send)."""
        cls = self.states(self.tokenizer.encode(query, document))[0]
        logit = self.dense(np.tanh(self.dense(cls, "pooler.dense")), "classifier")[0]
        return 1 / (1 + math.exp(-logit))


def served(url: str, texts: list[str]) -> list[np.ndarray]:
    """The server's vectors for `texts`, in one request, each scaled to unit length."""
    body = json.dumps({"input": texts}).encode()
    request = urllib.request.Request(url, body, {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        data = sorted(json.loads(response.read())["data"], key=lambda d: d["index"])
    vectors = [np.array(d["embedding"], dtype=np.float64) for d in data]
    return [v / np.linalg.norm(v) for v in vectors]


QUERIES = ["What is the capital of France?", "How do I reset my password?", "rust borrow checker",
           "weather this afternoon", "Which fruit is a berry?"]


def rerank(url: str, query: str, documents: list[str]) -> dict[int, float]:
    """The server's relevance score of each document, by its index."""
    body = json.dumps({"query": query, "documents": documents, "return_documents": False}).encode()
    request = urllib.request.Request(url, body, {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        results = json.loads(response.read())["results"]
    assert [r["relevance_score"] for r in results] == sorted((r["relevance_score"] for r in results), reverse=True)
    return {r["index"]: r["relevance_score"] for r in results}


def compare_rerank(reference: Reference, url: str, documents: list[str], tolerance: float) -> None:
    """Each query against every document: scores within `tolerance` of the reference's, and
    the server's order the reference's wherever the reference's scores are apart."""
    worst, misordered = 0.0, 0
    for query in QUERIES:
        served_scores = rerank(url, query, documents)
        expected = [reference.score(query, d) for d in documents]
        worst = max(worst, max(abs(served_scores[i] - e) for i, e in enumerate(expected)))
        order = sorted(range(len(documents)), key=lambda i: -served_scores[i])
        misordered += sum(1 for a, b in zip(order, order[1:]) if expected[a] < expected[b] - 2 * tolerance)
        print(f"{query[:40]!r}: best {order[0]} ({served_scores[order[0]]:.4f}; reference {expected[order[0]]:.4f})")
    pairs = len(QUERIES) * len(documents)
    print(f"{pairs} pairs: score max abs difference {worst:.2e}, {misordered} adjacent pairs out of order")
    sys.exit(0 if worst <= tolerance and misordered == 0 else 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=pathlib.Path)
    parser.add_argument("--compare", help="an OpenAI /v1/embeddings URL")
    parser.add_argument("--rerank", help="a /v1/rerank URL: MODEL_DIR is a cross-encoder, scored by pair")
    # ggml computes GELU through an fp16 table: scores of a random model that amplifies it
    # differ in the third decimal.
    parser.add_argument("--score-tolerance", type=float, default=5e-3)
    parser.add_argument("--sentences", type=pathlib.Path)
    parser.add_argument("--min-cosine", type=float, default=0.999)
    parser.add_argument("--batch", action="store_true",
                        help="post every sentence in one request (a batching server packs them together)")
    args = parser.parse_args()
    sentences = args.sentences.read_text().splitlines() if args.sentences else SENTENCES
    reference = Reference(args.model_dir)
    if args.rerank:
        return compare_rerank(reference, args.rerank, sentences, args.score_tolerance)
    if args.batch:
        vectors = served(args.compare, sentences)
    else:
        vectors = [served(args.compare, [text])[0] for text in sentences]
    cosines = []
    for text, vector in zip(sentences, vectors, strict=True):
        cosine = float(reference.embed(text) @ vector)
        cosines.append(cosine)
        print(f"{cosine:.6f}  {text[:60]!r}")
    worst = min(cosines)
    print(f"{len(cosines)} sentences: cosine min {worst:.6f}, mean {sum(cosines) / len(cosines):.6f}")
    sys.exit(0 if worst >= args.min_cosine else 1)


if __name__ == "__main__":
    main()
