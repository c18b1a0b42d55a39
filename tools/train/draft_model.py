"""The DFlash draft in PyTorch, z-lab tensor names (docs/dflash-draft.md §2, §3.1), with the
anchored multi-block training forward of §5.1.

Per context token j: c_j = RMSNorm(W_fc · concat_l h_l(j)) (h_l = output of target layer l).
Per block (anchor p): slots [x_p, MASK×(B−1)] at positions p..p+B−1, target embedding; each layer is
a pre-norm Qwen3 block whose attention keys/values are [k_norm(W_k c_j), W_v c_j] for context j < p
plus the block's own slots (bidirectional), RoPE (NeoX, full head dim) at absolute positions. Slot k
(1..B−1) predicts the token at p+k through the target's LM head after the final norm.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """Qwen3 RMSNorm: x · rsqrt(mean(x²) + eps) · w (plain w, not 1 + w), computed in f32."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)


def rope(x, pos, theta):
    """x [b, n, heads, d], pos [b, n]; rotate-half over the whole head dim."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    ang = (pos.to(torch.float64)[..., None] * inv).float()
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, :, None, :].to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, :, None, :].to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Attention(nn.Module):
    def __init__(self, h, nh, nkv, hd, eps):
        super().__init__()
        self.nh, self.nkv, self.hd = nh, nkv, hd
        self.q_proj = nn.Linear(h, nh * hd, bias=False)
        self.k_proj = nn.Linear(h, nkv * hd, bias=False)
        self.v_proj = nn.Linear(h, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, h, bias=False)
        self.q_norm = RMSNorm(hd, eps)
        self.k_norm = RMSNorm(hd, eps)


class Mlp(nn.Module):
    def __init__(self, h, ff):
        super().__init__()
        self.gate_proj = nn.Linear(h, ff, bias=False)
        self.up_proj = nn.Linear(h, ff, bias=False)
        self.down_proj = nn.Linear(ff, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, eps = c["hidden_size"], c["rms_norm_eps"]
        self.input_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.self_attn = Attention(h, c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], eps)
        self.mlp = Mlp(h, c["intermediate_size"])


class DFlashDraft(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        h, k = c["hidden_size"], len(c["dflash_config"]["target_layer_ids"])
        self.fc = nn.Linear(k * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, c["rms_norm_eps"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(h, c["rms_norm_eps"])

    def forward(self, feats, block_emb, block_pos, mask):
        """feats [b, S, k·H] (target features of context positions 0..S−1); block_emb [b, Q, H]
        (all blocks' slot embeddings, Q = N·B); block_pos [b, Q]; mask [b, Q, S + Q] bool (True =
        may attend). Returns the final-normed hidden states [b, Q, H]."""
        c = self.c
        theta = c["rope_theta"]
        ctx = self.hidden_norm(self.fc(feats))
        b, s = ctx.shape[:2]
        q_len = block_emb.shape[1]
        cpos = torch.arange(s, device=feats.device)[None].expand(b, s)
        e = block_emb
        m = mask[:, None]
        for layer in self.layers:
            at = layer.self_attn
            a = layer.input_layernorm(e)
            q = rope(at.q_norm(at.q_proj(a).view(b, q_len, at.nh, at.hd)), block_pos, theta)
            kb = rope(at.k_norm(at.k_proj(a).view(b, q_len, at.nkv, at.hd)), block_pos, theta)
            vb = at.v_proj(a).view(b, q_len, at.nkv, at.hd)
            kc = rope(at.k_norm(at.k_proj(ctx).view(b, s, at.nkv, at.hd)), cpos, theta)
            vc = at.v_proj(ctx).view(b, s, at.nkv, at.hd)
            k = torch.cat([kc, kb], 1).transpose(1, 2)
            v = torch.cat([vc, vb], 1).transpose(1, 2)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=m, enable_gqa=True,
                                               scale=1.0 / math.sqrt(at.hd))
            e = e + at.o_proj(o.transpose(1, 2).reshape(b, q_len, at.nh * at.hd))
            e = e + layer.mlp(layer.post_attention_layernorm(e))
        return self.norm(e)


def block_inputs(tokens, anchors, block, mask_id, seq_len):
    """Slot tokens [b, N·B], positions [b, N·B] and the attention mask [b, N·B, S + N·B] of the
    blocks anchored at `anchors` [b, N] (§2.2 / §5.1: context j < p, own block only)."""
    b, n = anchors.shape
    dev = tokens.device
    off = torch.arange(block, device=dev)
    pos = (anchors[:, :, None] + off).reshape(b, n * block)
    slot_tok = torch.full((b, n, block), mask_id, dtype=torch.long, device=dev)
    slot_tok[:, :, 0] = torch.gather(tokens, 1, anchors)
    ctx_ok = torch.arange(seq_len, device=dev)[None, None, :] < anchors.repeat_interleave(block, 1)[:, :, None]
    blk_id = torch.arange(n, device=dev).repeat_interleave(block)
    own = (blk_id[:, None] == blk_id[None, :])[None].expand(b, -1, -1)
    return slot_tok.reshape(b, n * block), pos, torch.cat([ctx_ok, own], -1)


def zlab_config(hidden, vocab, n_target_layers, layer_ids, mask_id, block, layers=2, ff=1024, heads=8, kv_heads=2,
                head_dim=64, rope_theta=1.0e7, max_positions=2048):
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "head_dim": head_dim, "intermediate_size": ff, "rms_norm_eps": 1e-6, "rope_theta": rope_theta,
        "vocab_size": vocab, "max_position_embeddings": max_positions, "num_target_layers": n_target_layers,
        "block_size": block, "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False,
        "dflash_config": {"mask_token_id": mask_id, "target_layer_ids": layer_ids},
        "layer_types": ["full_attention"] * layers,
    }
