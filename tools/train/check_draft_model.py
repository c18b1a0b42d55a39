"""Checks draft_model.py (the training-side DFlash draft, all blocks in one pass) against the
independent one-block PyTorch draft of tools/fixtures/hf/gen_qwen35.py, whose outputs flashtree's
reference matches (tests/tests/cpu/model_fixtures.rs): same random weights and features, three anchors,
f64. Run: python tools/train/check_draft_model.py (CPU, the pinned fixture environment)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf"))
import draft_model as dm  # noqa: E402
import gen_qwen35 as g  # noqa: E402

torch.manual_seed(0)
torch.set_grad_enabled(False)
H, V, B = 64, 300, 8
c = dm.zlab_config(H, V, 4, [0, 2], V - 1, B, layers=2, ff=96, heads=4, kv_heads=2, head_dim=16, rope_theta=1e6)
d = dm.DFlashDraft(c).double()
for p in d.parameters():
    p.normal_(0, 0.2)
embed = torch.randn(V, H, dtype=torch.float64)
lm_head = torch.randn(V, H, dtype=torch.float64)
S = 40
feats = torch.randn(1, S, 2 * H, dtype=torch.float64)
toks = torch.randint(0, V - 1, (1, S))
anchors = torch.tensor([[5, 20, 31]])
slot, pos, mask = dm.block_inputs(toks, anchors, B, V - 1, S)
h = d(feats, embed[slot], pos, mask).view(1, anchors.shape[1], B, H)
w = dict(d.state_dict())
worst = 0.0
for n, p in enumerate(anchors[0].tolist()):
    ref = g.draft_forward(w, c, embed, lm_head, feats[0, :p], [int(toks[0, p])] + [V - 1] * (B - 1), p)
    got = h[0, n, 1:] @ lm_head.T
    worst = max(worst, ((got - ref).norm() / ref.norm()).item())
# draft_model keeps norms and RoPE angles in f32 (as in training), so ~1e-7, not f64 rounding
assert worst < 1e-5, worst
print(f"draft_model matches gen_qwen35.draft_forward: worst relative error {worst:.2e}")
