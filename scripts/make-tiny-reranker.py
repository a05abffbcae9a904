#!/usr/bin/env python3
"""A tiny random-weight BERT cross-encoder (BertForSequenceClassification: pooler and a
one-label classifier) in the sentence-transformers layout, borrowing all-MiniLM-L6-v2's
WordPiece tokenizer: what the rerank API is tested with, as no cross-encoder ships on PyPI.
Its scores are noise by design; they are checked against scripts/bert-reference.py's
forward pass of these same weights.

    scripts/make-tiny-reranker.py TOKENIZER_DIR OUT_DIR

TOKENIZER_DIR holds tokenizer.json, tokenizer_config.json and special_tokens_map.json
(the MiniLM folder `rillm model fetch all-minilm-l6-v2` keeps). Needs numpy.

The two token-type rows are equal: llama.cpp adds type 0 to every token (it takes no type
ids), so a model whose rows differ scores the document half differently there than in
transformers; equal rows make this check measure everything else.
"""

import json
import pathlib
import shutil
import struct
import sys

import numpy as np

HIDDEN, LAYERS, HEADS, FFN, POSITIONS = 32, 2, 2, 64, 512


def main() -> None:
    source, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(source / name, out / name)
    vocab = len(json.loads((source / "tokenizer.json").read_text())["model"]["vocab"])
    config = {
        "architectures": ["BertForSequenceClassification"], "model_type": "bert", "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": FFN,
        "max_position_embeddings": POSITIONS, "type_vocab_size": 2, "vocab_size": vocab,
        "layer_norm_eps": 1e-12, "hidden_act": "gelu", "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0},
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))
    write_safetensors(out / "model.safetensors", weights(vocab))


def weights(vocab: int) -> dict:
    rng = np.random.default_rng(49)
    w = {}
    def dense(name, rows, cols, scale=0.2):
        w[name + ".weight"] = rng.standard_normal((rows, cols)) * scale
        w[name + ".bias"] = rng.standard_normal(rows) * 0.02
    def norm(name):
        w[name + ".weight"] = 1 + rng.standard_normal(HIDDEN) * 0.05
        w[name + ".bias"] = rng.standard_normal(HIDDEN) * 0.02
    w["bert.embeddings.word_embeddings.weight"] = rng.standard_normal((vocab, HIDDEN)) * 0.5
    w["bert.embeddings.position_embeddings.weight"] = rng.standard_normal((POSITIONS, HIDDEN)) * 0.1
    w["bert.embeddings.token_type_embeddings.weight"] = np.repeat(rng.standard_normal((1, HIDDEN)) * 0.1, 2, axis=0)
    norm("bert.embeddings.LayerNorm")
    for i in range(LAYERS):
        p = f"bert.encoder.layer.{i}."
        for m in ("query", "key", "value"):
            dense(p + f"attention.self.{m}", HIDDEN, HIDDEN)
        dense(p + "attention.output.dense", HIDDEN, HIDDEN)
        norm(p + "attention.output.LayerNorm")
        dense(p + "intermediate.dense", FFN, HIDDEN)
        dense(p + "output.dense", HIDDEN, FFN)
        norm(p + "output.LayerNorm")
    dense("bert.pooler.dense", HIDDEN, HIDDEN, scale=0.4)
    dense("classifier", 1, HIDDEN, scale=0.5)
    return {k: v.astype(np.float32) for k, v in w.items()}


def write_safetensors(path: pathlib.Path, tensors: dict) -> None:
    header, offset = {}, 0
    for name, array in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for array in tensors.values():
            f.write(np.ascontiguousarray(array, dtype="<f4").tobytes())


if __name__ == "__main__":
    main()
