"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/, not committed).

draft_config: small valid draft configs, each followed by a NUL byte and a matching BF16
model.safetensors (a few KiB, so mutations stay fast), plus the committed HF/draft configs alone.
chat_template: the built-in Qwen3.5 template and a few small ChatML-style templates.
Run from fuzz/: python3 seeds.py
"""
import json
import os
import struct

ROOT = os.path.dirname(os.path.abspath(__file__))


def safetensors(tensors):
    header, off, data = {}, 0, b""
    for name, shape in tensors:
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        data += bytes((i * 37 + 11) % 251 for i in range(n))
        off += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def draft(h=8, layers=1, heads=2, kv=1, hd=4, ff=8, ids=(0,), extra=None):
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "hidden_size": h,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": hd,
        "intermediate_size": ff,
        "vocab_size": 64,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1e7,
        "block_size": 4,
        "dflash_config": {"mask_token_id": 63, "target_layer_ids": list(ids)},
    }
    cfg.update(extra or {})
    t = [("fc.weight", [h, len(ids) * h]), ("hidden_norm.weight", [h]), ("norm.weight", [h])]
    for i in range(layers):
        p = f"layers.{i}."
        t += [
            (p + "input_layernorm.weight", [h]),
            (p + "post_attention_layernorm.weight", [h]),
            (p + "self_attn.q_proj.weight", [heads * hd, h]),
            (p + "self_attn.k_proj.weight", [kv * hd, h]),
            (p + "self_attn.v_proj.weight", [kv * hd, h]),
            (p + "self_attn.o_proj.weight", [h, heads * hd]),
            (p + "self_attn.q_norm.weight", [hd]),
            (p + "self_attn.k_norm.weight", [hd]),
            (p + "mlp.gate_proj.weight", [ff, h]),
            (p + "mlp.up_proj.weight", [ff, h]),
            (p + "mlp.down_proj.weight", [h, ff]),
        ]
    return json.dumps(cfg, indent=1).encode() + b"\0" + safetensors(t)


def main():
    d = os.path.join(ROOT, "corpus", "draft_config")
    os.makedirs(d, exist_ok=True)
    seeds = {
        "tiny": draft(),
        "two_layers": draft(layers=2, ids=(0, 2), extra={"num_target_layers": 4}),
        "swa": draft(
            layers=2,
            extra={"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 5,
                   "use_sliding_window": True, "is_causal": False},
        ),
    }
    for name in ["a", "b", "draft-full", "draft-swa"]:
        with open(os.path.join(ROOT, "..", "tests", "fixtures", "hf", name, "config.json"), "rb") as f:
            seeds[f"config_{name}"] = f.read()
    for k, v in seeds.items():
        with open(os.path.join(d, k), "wb") as f:
            f.write(v)
    d = os.path.join(ROOT, "corpus", "chat_template")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(ROOT, "..", "host", "src", "chat", "qwen35.jinja"), "rb") as f:
        qwen = f.read()
    templates = {
        "qwen35": qwen,
        "chatml": b"{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        b"{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        "loops": b"{% set ns = namespace(n=0) %}{% for m in messages %}{% for c in m.content %}"
        b"{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}{{ ns.n }}",
        "macro": b"{% macro f(x) %}{% if x > 0 %}{{ f(x - 1) }}{% endif %}{{ x }}{% endmacro %}{{ f(3) }}",
        "methods": b"{{ messages[0].content.split(' ') | join('-') }}{{ messages[1].content.startswith('Hi') }}"
        b"{{ messages | tojson }}{% if not enable_thinking %}{{ raise_exception('no') }}{% endif %}",
    }
    for k, v in templates.items():
        with open(os.path.join(d, k), "wb") as f:
            f.write(v)
    print("seeds written")


if __name__ == "__main__":
    main()
