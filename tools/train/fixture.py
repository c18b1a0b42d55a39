"""Golden logits of the shipped demo target (run on the CPU, pinned venv: see README.md).

The shipped GGUF stores every matrix as Q8_0, so the reference weights are the trained BF16
values after a Q8_0 round trip (gguf-py's quantizer = ggml's = flashtree's): this script applies
that round trip to every 2-D tensor of the HF checkpoint (norms, `A_log`, `dt_bias` and the conv
stay as they are, as in the GGUF), runs HF transformers on the result, and writes

* `prompts.json`: per prompt its text and HF `tokenizers` ids;
* `expected.safetensors`: `tokens.<i>` (I32 [T]), `logits.<i>` (F32 [T, V], teacher forced, HF
  in f32) and `logits_f64.<i>` (HF's modeling code run in f64, as tools/fixtures/hf does).

Usage: fixture.py HF_TARGET_DIR OUT_DIR
"""
import json
import os
import sys

import gguf
import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf"))
import gen_qwen35  # noqa: E402  (f64 modeling module)

assert transformers.__version__ == "5.23.0", transformers.__version__
assert gguf.__version__ if hasattr(gguf, "__version__") else True

PROMPTS = [
    "def fibonacci(n):",
    'def read_config(path):\n    """Read a JSON configuration file and return it as a dict."""\n',
    "import os\nimport sys\n\n\nclass Cache:\n    def __init__(self, size):\n        self.",
]


def q8_0_round_trip(t):
    a = t.float().numpy().astype(np.float32)
    q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
    return torch.from_numpy(gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).reshape(a.shape).copy())


def main():
    src, out = sys.argv[1], sys.argv[2]
    torch.set_grad_enabled(False)
    cfg = Qwen3_5TextConfig.from_json_file(os.path.join(src, "config.json"))
    sd = {k: v.float() for k, v in load_file(os.path.join(src, "model.safetensors")).items()}
    sd = {k: (q8_0_round_trip(v) if v.dim() == 2 else v) for k, v in sd.items()}
    model = Qwen3_5ForCausalLM(cfg).float().eval()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()
    m64 = gen_qwen35.f64_modeling_module().Qwen3_5ForCausalLM(cfg).double().eval()
    m64.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    tok = Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
    os.makedirs(out, exist_ok=True)
    expected, prompts = {}, []
    for i, text in enumerate(PROMPTS):
        ids = tok.encode(text, add_special_tokens=False).ids
        x = torch.tensor([ids])
        expected[f"tokens.{i}"] = torch.tensor(ids, dtype=torch.int32)
        expected[f"logits.{i}"] = model(input_ids=x, use_cache=False).logits[0].contiguous()
        expected[f"logits_f64.{i}"] = m64(input_ids=x, use_cache=False).logits[0].float().contiguous()
        prompts.append({"text": text, "tokens": ids})
        print(f"prompt {i}: {len(ids)} tokens")
    save_file(expected, os.path.join(out, "expected.safetensors"))
    with open(os.path.join(out, "prompts.json"), "w") as f:
        json.dump(prompts, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
