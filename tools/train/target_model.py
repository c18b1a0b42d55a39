"""The demo target: HF `Qwen3_5ForCausalLM` (Gated DeltaNet + gated attention, 3:1 as in the
real Qwen3.5 models), sized for a few minutes of H200 training and interactive CPU decoding.

Shapes also fit flashtree's GPU kernels: head dims 64, GQA group 4, DeltaNet d_k = d_v = 64,
every matmul input a multiple of 32 (Q8_0 blocks).
"""
from transformers import Qwen3_5TextConfig

HIDDEN = 512
LAYERS = 8


def config(vocab_size, eos_id, max_positions=2048):
    return Qwen3_5TextConfig(
        vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=1024, num_hidden_layers=LAYERS,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64,
        linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64,
        linear_conv_kernel_dim=4, full_attention_interval=4,
        rope_parameters=dict(rope_type="default", rope_theta=1.0e7, partial_rotary_factor=0.25,
                             mrope_section=[3, 3, 2], mrope_interleaved=True),
        rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=max_positions,
        eos_token_id=eos_id, pad_token_id=eos_id, bos_token_id=None,
    )
