#!/usr/bin/env python3
"""A BERT sentence encoder (sentence-transformers' layout: config.json, model.safetensors,
tokenizer.json, 1_Pooling/config.json) to a GGUF llama.cpp runs as `bert`, without torch.

llama.cpp's own converter does the same but imports torch and transformers, and PyPI's Linux
torch is the CUDA build (a 4.9 GB venv). BERT's tensors map one to one (the `gguf` package's
own name map), the WordPiece vocabulary comes from tokenizer.json, written as llama.cpp's
converter writes it (`conversion/bert.py`: "phantom space" pieces, control tokens kept),
pre-tokenizer `jina-v2-en`, pooling from 1_Pooling; a cross-encoder
(BertForSequenceClassification) is pooled by `rank`, its pooler and classifier kept. 2-D weights are F16 unless --outtype f32;
1-D ones and the position and token-type embeddings stay F32, as llama.cpp's converter keeps
them.

    scripts/bert-to-gguf.py MODEL_DIR OUT.gguf [--outtype f16|f32]

Needs `gguf` and `numpy` (the test venv has both). Checked by scripts/bert-reference.py:
vectors from the GGUF against a numpy forward pass of the safetensors.
"""

import argparse
import json
import pathlib
import struct

import gguf
import numpy as np

SKIPPED = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")
# A cross-encoder (BertForSequenceClassification) scores [CLS] through BERT's pooler (a dense
# layer and tanh) and its classifier: llama.cpp's rank pooling runs `cls` (with tanh) then
# `cls.output`, so the pooler is kept as the one and the classifier written as the other.
CROSS_ENCODER_TENSORS = {
    "pooler.dense.weight": "cls.weight", "pooler.dense.bias": "cls.bias",
    "classifier.weight": "cls.output.weight", "classifier.bias": "cls.output.bias",
}
# Added to activations, not multiplied: llama.cpp wants them F32 (as its converter keeps them).
ALWAYS_F32 = ("position_embd.weight", "token_types.weight")
POOLING = {"pooling_mode_mean_tokens": gguf.PoolingType.MEAN, "pooling_mode_cls_token": gguf.PoolingType.CLS}
DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def safetensors(path: pathlib.Path) -> dict:
    """Every tensor of a .safetensors file, as numpy arrays (the format is a JSON header and
    raw little-endian data)."""
    data = path.read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    body = memoryview(data)[8 + size:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=DTYPES[info["dtype"]])
        tensors[name] = array.reshape(info["shape"])
    return tensors


def is_cross_encoder(model_dir: pathlib.Path) -> bool:
    config = json.loads((model_dir / "config.json").read_text())
    return "BertForSequenceClassification" in config.get("architectures", [])


def pooling(model_dir: pathlib.Path) -> int:
    if is_cross_encoder(model_dir):
        return gguf.PoolingType.RANK
    config = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    for key, kind in POOLING.items():
        if config.get(key):
            return kind
    raise SystemExit(f"unsupported pooling in 1_Pooling/config.json: {config}")


def vocabulary(model_dir: pathlib.Path) -> tuple[list[str], list[int]]:
    """tokenizer.json's WordPiece vocabulary in id order, as llama.cpp's converter lays it
    out: a control token as it is, a `##` continuation without its marks, any other piece
    after a phantom space (U+2581)."""
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    if tokenizer["model"]["type"] != "WordPiece":
        raise SystemExit("tokenizer.json is not a WordPiece tokenizer")
    vocab = tokenizer["model"]["vocab"]
    special = {t["id"] for t in tokenizer["added_tokens"] if t.get("special")}
    tokens, types = [""] * len(vocab), [gguf.TokenType.NORMAL] * len(vocab)
    for piece, i in vocab.items():
        if i in special:
            tokens[i], types[i] = piece, gguf.TokenType.CONTROL
        elif piece.startswith("##"):
            tokens[i] = piece[2:]
        else:
            tokens[i] = "\u2581" + piece
    return tokens, types


def write_header(writer: gguf.GGUFWriter, model_dir: pathlib.Path, config: dict, f32: bool) -> None:
    writer.add_name(model_dir.name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_causal_attention(False)
    writer.add_pooling_type(pooling(model_dir))
    if is_cross_encoder(model_dir):
        labels = config.get("id2label", {"0": "LABEL_0"})
        writer.add_classifier_output_labels([labels[k] for k in sorted(labels, key=int)])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if f32 else gguf.LlamaFileType.MOSTLY_F16)
    tokens, types = vocabulary(model_dir)
    writer.add_token_type_count(config.get("type_vocab_size", 1))
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("jina-v2-en")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(model_dir, n_vocab=len(tokens)).add_to_gguf(writer)
    # Older `gguf` packages have no handler for the class token; llama.cpp reads it here.
    cls = json.loads((model_dir / "tokenizer_config.json").read_text()).get("cls_token")
    ids = json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    if cls in ids and not hasattr(writer, "add_cls_token_id"):
        writer.add_uint32("tokenizer.ggml.cls_token_id", ids[cls])


def write_tensors(writer: gguf.GGUFWriter, model_dir: pathlib.Path, config: dict, f32: bool) -> None:
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, config["num_hidden_layers"])
    cross_encoder = is_cross_encoder(model_dir)
    for name, array in safetensors(model_dir / "model.safetensors").items():
        name = name.removeprefix("bert.")
        if cross_encoder and name in CROSS_ENCODER_TENSORS:
            new_name = CROSS_ENCODER_TENSORS[name]
        elif name in SKIPPED:
            continue
        else:
            new_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new_name is None:
            raise SystemExit(f"no GGUF name for tensor {name}")
        keep_f32 = f32 or array.ndim < 2 or new_name in ALWAYS_F32
        array = array.astype(np.float32 if keep_f32 else np.float16)
        writer.add_tensor(new_name, array)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=pathlib.Path)
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--outtype", choices=["f16", "f32"], default="f16")
    args = parser.parse_args()
    f32 = args.outtype == "f32"
    writer = gguf.GGUFWriter(str(args.out), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    config = json.loads((args.model_dir / "config.json").read_text())
    write_header(writer, args.model_dir, config, f32)
    write_tensors(writer, args.model_dir, config, f32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
