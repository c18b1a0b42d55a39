"""Stage 2: DFlash drafts for the frozen stage-1 target, trained with the anchored single-step
masked-block objective (docs/dflash-draft.md §5.1), on two kinds of data with the same steps:

* `corpus`: random windows of the training corpus;
* `self`: the target's own greedy continuations of corpus prompts (loss on the continuation only).

Both are scored on held-out prompts by the teacher-forced chain acceptance: along the target's
greedy continuation, for every anchor p, τ(p) = 1 + the number of leading slots whose argmax
equals the target's token — the acceptance length a DFlash chain round anchored at p gets.
Writes OUT/draft-<kind>/ (config.json, model.safetensors in BF16) and OUT/drafts.json.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

import common
import data
import draft_model
import tokenizer as tokmod

LAYER_IDS = [1, 4, 7]  # of the 8 target layers: early, middle, last (set by --layer-ids)
BLOCK = 16
GAMMA = 7.0


class Target:
    """The frozen target: features of LAYER_IDS (forward hooks on decoder-layer outputs)."""

    def __init__(self, path, dev):
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
        cfg = Qwen3_5TextConfig.from_json_file(os.path.join(path, "config.json"))
        self.model = Qwen3_5ForCausalLM(cfg)
        sd = load_file(os.path.join(path, "model.safetensors"))
        missing, unexpected = self.model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
        assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
        self.model.tie_weights()
        self.model.to(dev).eval().requires_grad_(False)
        self.cfg, self.dev = cfg, dev
        self.captured = {}
        for l in LAYER_IDS:
            self.model.model.layers[l].register_forward_hook(self._hook(l))
        self.embed = self.model.model.embed_tokens.weight
        self.lm_head = self.model.lm_head.weight

    def _hook(self, l):
        def f(_m, _i, out):
            self.captured[l] = out[0] if isinstance(out, tuple) else out
        return f

    @torch.no_grad()
    def features(self, x):
        with torch.autocast(self.dev.type, dtype=torch.bfloat16):
            self.model(input_ids=x, use_cache=False)
        return torch.cat([self.captured[l].to(torch.bfloat16) for l in LAYER_IDS], -1)

    @torch.no_grad()
    def greedy(self, prompt, n_new):
        """prompt [b, P] → [b, P + n_new], greedy, with the cache (EOS is just a token here)."""
        with torch.autocast(self.dev.type, dtype=torch.bfloat16):
            o = self.model(input_ids=prompt, use_cache=True)
            cache, nxt = o.past_key_values, o.logits[:, -1].argmax(-1)
            out = [prompt, nxt[:, None]]
            for _ in range(n_new - 1):
                o = self.model(input_ids=nxt[:, None], past_key_values=cache, use_cache=True)
                cache, nxt = o.past_key_values, o.logits[:, -1].argmax(-1)
                out.append(nxt[:, None])
        return torch.cat(out, 1)


def sample_anchors(b, lo, hi, n, gen, dev):
    """[b, n] distinct sorted anchors in [lo, hi] per row."""
    r = torch.rand(b, hi - lo + 1, generator=gen).argsort(1)[:, :n] + lo
    return r.sort(1).values.to(dev)


def block_logits(draft, tgt, feats, tokens, anchors):
    slot_tok, pos, mask = draft_model.block_inputs(tokens, anchors, BLOCK, draft.c["dflash_config"]["mask_token_id"],
                                                    tokens.shape[1])
    emb = F.embedding(slot_tok, tgt.embed).to(torch.bfloat16)
    with torch.autocast(tgt.dev.type, dtype=torch.bfloat16):
        h = draft(feats, emb, pos, mask)
    b, n = anchors.shape
    h = h.view(b, n, BLOCK, -1)[:, :, 1:]
    with torch.autocast(tgt.dev.type, dtype=torch.bfloat16):
        logits = F.linear(h, tgt.lm_head)
    labels = torch.gather(tokens, 1, (anchors[:, :, None] + torch.arange(1, BLOCK, device=tokens.device)).view(b, -1))
    return logits.float(), labels.view(b, n, BLOCK - 1)


def train_one(kind, tgt, batches, lo, steps, a, log, gen):
    """batches(gen) → [batch, S] token sequences; anchors in [lo, S − BLOCK]."""
    cfg = draft_model.zlab_config(tgt.cfg.hidden_size, tgt.cfg.vocab_size, tgt.cfg.num_hidden_layers, LAYER_IDS,
                                  a.mask_id, BLOCK, layers=a.layers, ff=a.ff)
    common.seed_all(a.seed)
    draft = draft_model.DFlashDraft(cfg).to(tgt.dev)
    n_params = sum(p.numel() for p in draft.parameters())
    opt = torch.optim.AdamW(draft.parameters(), lr=a.lr, weight_decay=0.0, fused=tgt.dev.type == "cuda")
    w = torch.exp(-torch.arange(BLOCK - 1, device=tgt.dev) / GAMMA)
    seq_len = a.seq
    t0 = time.time()
    for step in range(steps):
        lr = common.cosine_lr(step, steps, a.lr, max(1, steps // 25), floor=0.05)
        for g in opt.param_groups:
            g["lr"] = lr
        x = batches(gen).to(tgt.dev)
        feats = tgt.features(x)
        anchors = sample_anchors(a.batch, lo, seq_len - BLOCK, a.anchors, gen, tgt.dev)
        logits, labels = block_logits(draft, tgt, feats, x, anchors)
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
        loss = (ce.view(labels.shape) * w).sum() / (w.sum() * labels.shape[0] * labels.shape[1])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        if (step + 1) % 50 == 0 or step + 1 == steps:
            acc1 = (logits[:, :, 0].argmax(-1) == labels[:, :, 0]).float().mean().item()
            log(f"draft-{kind} step {step + 1}/{steps} loss {loss.item():.4f} slot-1 acc {acc1:.3f} lr {lr:.2e}")
    log(f"draft-{kind}: {n_params / 1e6:.2f} M parameters, {steps} steps in {time.time() - t0:.0f} s")
    return draft, cfg, n_params


@torch.no_grad()
def chain_acceptance(draft, tgt, evalseqs, prompt_len, batch):
    """Mean τ over every anchor of the greedy continuations (see the module doc) and slot-1 accuracy."""
    taus, acc1 = [], []
    seq_len = evalseqs.shape[1]
    for i in range(0, evalseqs.shape[0], batch):
        x = evalseqs[i:i + batch].to(tgt.dev)
        b = x.shape[0]
        feats = tgt.features(x)
        anchors = torch.arange(prompt_len, seq_len - BLOCK + 1, device=tgt.dev)[None].expand(b, -1).contiguous()
        logits, labels = block_logits(draft, tgt, feats, x, anchors)
        hit = (logits.argmax(-1) == labels).int()
        taus.append(1 + hit.cumprod(-1).sum(-1).float().flatten())
        acc1.append(hit[:, :, 0].float().flatten())
    return torch.cat(taus).mean().item(), torch.cat(acc1).mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--target", required=True, help="stage-1 output folder (OUT/target)")
    ap.add_argument("--kinds", default="corpus,self")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--seconds", type=float, default=100, help="per draft, when --steps is not given")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens of the self-distillation sequences")
    ap.add_argument("--n-self", type=int, default=65536, help="self-distillation sequences (at most)")
    ap.add_argument("--self-seconds", type=float, default=70, help="time limit of the generation (0: none)")
    ap.add_argument("--gen-batch", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--anchors", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--ff", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--layer-ids", default=",".join(map(str, LAYER_IDS)))
    ap.add_argument("--n-eval", type=int, default=64)
    ap.add_argument("--max-bytes", type=int, help="corpus cap (smoke tests)")
    a = ap.parse_args()
    LAYER_IDS[:] = [int(x) for x in a.layer_ids.split(",")]
    common.check_versions()
    common.seed_all(a.seed)
    log = common.Log(os.path.join(a.out, "log.txt"))
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tok, train, heldout = common.build_data(a.out, log, tokenizer_dir=a.target, max_bytes=a.max_bytes)
    a.mask_id = tok.token_to_id(tokmod.MASK)
    tgt = Target(a.target, dev)
    gen = torch.Generator().manual_seed(a.seed)

    # held-out evaluation sequences: prompt from held-out files + the target's greedy continuation
    ev_prompts = data.random_windows(heldout, a.n_eval, a.prompt, gen).to(dev)
    evalseqs = tgt.greedy(ev_prompts, a.seq - a.prompt).cpu()
    log(f"eval: {a.n_eval} held-out prompts × {a.seq - a.prompt} greedy tokens")
    kinds = a.kinds.split(",")
    sets = {}
    if "corpus" in kinds:
        # fresh random windows of the training stream every step
        sets["corpus"] = (lambda g: data.random_windows(train, a.batch, a.seq, g), 1)
    if "self" in kinds:
        # batches of gen_batch sequences until n_self, or until self_seconds have passed
        t0, parts = time.time(), []
        while sum(p.shape[0] for p in parts) < a.n_self and (not a.self_seconds or time.time() - t0 < a.self_seconds):
            prompts = data.random_windows(train, a.gen_batch, a.prompt, gen).to(dev)
            parts.append(tgt.greedy(prompts, a.seq - a.prompt).cpu())
        seqs = torch.cat(parts)
        log(f"self-distillation data: {seqs.shape[0]} × {a.seq - a.prompt} greedy tokens in {time.time() - t0:.0f} s "
            f"(--n-self {seqs.shape[0]} --self-seconds 0 reproduces)")
        sets["self"] = (lambda g, s=seqs: s[torch.randint(0, s.shape[0], (a.batch,), generator=g)], a.prompt)
    steps = a.steps
    results = {}
    for kind, (seqs, lo) in sets.items():
        if steps is None:
            # time 10 steps after 3 warm-up steps (throw-away drafts), then fix the count for every kind
            quiet = lambda *x: None  # noqa: E731
            train_one(kind, tgt, seqs, lo, 3, a, quiet, torch.Generator().manual_seed(0))
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.time()
            train_one(kind, tgt, seqs, lo, 10, a, quiet, torch.Generator().manual_seed(0))
            if dev.type == "cuda":
                torch.cuda.synchronize()
            steps = max(20, int(a.seconds / ((time.time() - t0) / 10)))
            log(f"draft steps: {steps} (--steps {steps} reproduces)")
        draft, cfg, n_params = train_one(kind, tgt, seqs, lo, steps, a, log, gen)
        tau, acc1 = chain_acceptance(draft, tgt, evalseqs, a.prompt, 8)
        log(f"draft-{kind}: held-out teacher-forced chain acceptance {tau:.3f}, slot-1 accuracy {acc1:.3f}")
        results[kind] = {"tau_chain_tf": tau, "slot1_acc": acc1, "steps": steps, "params": n_params}
        d = os.path.join(a.out, f"draft-{kind}")
        os.makedirs(d, exist_ok=True)
        save_file({k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in draft.state_dict().items()},
                  os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
    with open(os.path.join(a.out, "drafts.json"), "w") as f:
        json.dump({"args": {k: v for k, v in vars(a).items()}, "layer_ids": LAYER_IDS, "block": BLOCK,
                   "gamma": GAMMA, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
