"""Stage 1: corpus, tokenizer, and the qwen35 target (HF Qwen3_5ForCausalLM) trained from scratch.

Writes OUT/target/ (config.json, model.safetensors in BF16, tokenizer files, corpus.json,
heldout.jsonl) and OUT/log.txt. The step count is `--steps`, or (with `--seconds`) what fits in
that time at the throughput of the first steps — the log prints the count, and `--steps N`
reproduces the run.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

import common
import data
import target_model


def heldout_loss(model, heldout, seq, batch, max_windows, dev):
    w = data.fixed_windows(heldout, seq + 1, max_windows)
    tot, n = 0.0, 0
    model.eval()
    with torch.no_grad(), torch.autocast("cuda" if dev.type == "cuda" else "cpu", dtype=torch.bfloat16):
        for i in range(0, w.shape[0], batch):
            x = w[i:i + batch].to(dev)
            logits = model(input_ids=x[:, :-1], use_cache=False).logits.float()
            tot += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum").item()
            n += x[:, 1:].numel()
    model.train()
    return tot / max(1, n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--seconds", type=float, default=240)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--max-bytes", type=int, help="corpus cap (smoke tests)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model (CPU smoke test)")
    a = ap.parse_args()
    common.check_versions()
    common.seed_all(a.seed)
    out = os.path.join(a.out, "target")
    os.makedirs(out, exist_ok=True)
    log = common.Log(os.path.join(a.out, "log.txt"))
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    log("device", dev, torch.cuda.get_device_name() if dev.type == "cuda" else "", "torch", torch.__version__)
    tok, train, heldout = common.build_data(out, log, max_bytes=a.max_bytes)
    eos = tok.token_to_id("<|endoftext|>")

    from transformers import Qwen3_5ForCausalLM
    cfg = target_model.config(tok.get_vocab_size(), eos)
    if a.tiny:
        cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers = 64, 128, 4
        cfg.layer_types = cfg.layer_types[:4]
    model = Qwen3_5ForCausalLM(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"target: {n_params / 1e6:.2f} M parameters, layers {cfg.layer_types}")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
    gen = torch.Generator().manual_seed(a.seed)
    total = a.steps or 10**9
    warmup = 60
    t_start, step, tokens = time.time(), 0, 0
    while step < total:
        lr = common.cosine_lr(step, total, a.lr, warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        x = data.random_windows(train, a.batch, a.seq + 1, gen).to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(input_ids=x[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += x[:, 1:].numel()
        if step == 10 and a.steps is None:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t_10 = time.time()
        if step == 30 and a.steps is None:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            per = (time.time() - t_10) / 20  # steps 10..30, after warm-up
            total = max(warmup + 10, int(a.seconds / per))
            log(f"throughput: {per * 1e3:.0f} ms/step, {a.batch * a.seq / per / 1e3:.0f} K tok/s -> --steps {total}")
        if step % 50 == 0 or step == total:
            log(f"step {step}/{total} loss {loss.item():.4f} lr {lr:.2e} tokens {tokens / 1e6:.1f} M")
    if dev.type == "cuda":
        torch.cuda.synchronize()
    train_s = time.time() - t_start
    hl = heldout_loss(model, heldout, a.seq, a.batch, 64, dev)
    log(f"trained {step} steps, {tokens / 1e6:.1f} M tokens in {train_s:.0f} s; held-out loss {hl:.4f} "
        f"(ppl {math.exp(hl):.2f})")
    sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in model.state_dict().items()
          if not (cfg.tie_word_embeddings and k == "lm_head.weight")}
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cj = json.loads(cfg.to_json_string())
    cj["architectures"] = ["Qwen3_5ForCausalLM"]
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cj, f, indent=2, sort_keys=True)
    with open(os.path.join(out, "train_stats.json"), "w") as f:
        json.dump({"steps": step, "batch": a.batch, "seq": a.seq, "lr": a.lr, "seed": a.seed, "tokens": tokens,
                   "train_seconds": train_s, "heldout_loss": hl, "params": n_params,
                   "train_tokens_available": train.numel(), "heldout_tokens": heldout.numel()}, f, indent=1)


if __name__ == "__main__":
    main()
