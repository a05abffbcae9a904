#!/usr/bin/env python3
# Usage: make-tiny-qwen2.py SOURCE.gguf OUT.gguf [qwen3 TEMPLATE.jinja]
#        (needs: python3 -m pip install gguf numpy)
# A tiny random-weight qwen2-architecture GGUF that borrows SmolLM2's tokenizer, to check
# that rillm loads and runs the qwen2 family end to end (the text is noise by design).
# With `qwen3 TEMPLATE`: Qwen3's architecture (no q/k/v biases, q/k norms), `<think>` and
# `</think>` added to the vocabulary as single tokens as Qwen3's tokenizer has them, and
# TEMPLATE (Qwen3's own) as its chat template: a reasoning model's shape, for the thinking
# machinery on single-token markers.
import sys, numpy as np, gguf
src = gguf.GGUFReader(sys.argv[1])
arch = sys.argv[3] if len(sys.argv) > 3 else "qwen2"
assert arch in ("qwen2", "qwen3"), arch
out = gguf.GGUFWriter(sys.argv[2], arch)
def copy_str(key):
    f = src.fields[key]; return bytes(f.parts[f.data[0]]).decode()
def copy_arr_str(key):
    f = src.fields[key]; return [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
def copy_arr_num(key):
    f = src.fields[key]; return [f.parts[i][0].item() for i in f.data]
tokens = copy_arr_str("tokenizer.ggml.tokens")
token_types = copy_arr_num("tokenizer.ggml.token_type")
if arch == "qwen3":
    # Qwen3's `<think>` and `</think>` are added tokens, not special ones (USER_DEFINED).
    tokens += ["<think>", "</think>"]; token_types += [4, 4]
n_vocab = len(tokens)
d, ff, layers, heads, kv = 64, 128, 2, 4, 2
out.add_name(f"tiny-{arch}-test")
out.add_context_length(512); out.add_embedding_length(d); out.add_block_count(layers)
out.add_feed_forward_length(ff); out.add_head_count(heads); out.add_head_count_kv(kv)
out.add_rope_freq_base(10000.0); out.add_layer_norm_rms_eps(1e-6)
out.add_tokenizer_model(copy_str("tokenizer.ggml.model"))
out.add_tokenizer_pre(copy_str("tokenizer.ggml.pre") if "tokenizer.ggml.pre" in src.fields else "default")
out.add_token_list(tokens)
out.add_token_types(token_types)
out.add_token_merges(copy_arr_str("tokenizer.ggml.merges"))
out.add_bos_token_id(src.fields["tokenizer.ggml.bos_token_id"].parts[-1][0].item())
out.add_eos_token_id(src.fields["tokenizer.ggml.eos_token_id"].parts[-1][0].item())
if arch == "qwen3":
    out.add_chat_template(open(sys.argv[4]).read())
else:
    out.add_chat_template("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n'}}{% endfor %}{% if add_generation_prompt %}{{'<|im_start|>assistant\n'}}{% endif %}")
rng = np.random.default_rng(0)
def t(name, *shape):
    out.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))
t("token_embd.weight", n_vocab, d)
for i in range(layers):
    out.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(d, np.float32))
    t(f"blk.{i}.attn_q.weight", d, d)
    t(f"blk.{i}.attn_k.weight", kv * d // heads, d)
    t(f"blk.{i}.attn_v.weight", kv * d // heads, d)
    if arch == "qwen2":
        t(f"blk.{i}.attn_q.bias", d); t(f"blk.{i}.attn_k.bias", kv * d // heads); t(f"blk.{i}.attn_v.bias", kv * d // heads)
    else:
        out.add_tensor(f"blk.{i}.attn_q_norm.weight", np.ones(d // heads, np.float32))
        out.add_tensor(f"blk.{i}.attn_k_norm.weight", np.ones(d // heads, np.float32))
    t(f"blk.{i}.attn_output.weight", d, d)
    out.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(d, np.float32))
    t(f"blk.{i}.ffn_gate.weight", ff, d); t(f"blk.{i}.ffn_up.weight", ff, d); t(f"blk.{i}.ffn_down.weight", d, ff)
out.add_tensor("output_norm.weight", np.ones(d, np.float32))
t("output.weight", n_vocab, d)
out.write_header_to_file(); out.write_kv_data_to_file(); out.write_tensors_to_file(); out.close()
