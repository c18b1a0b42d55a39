"""Shared set-up of the training stages: versions, seeds, corpus → tokenizer → token streams."""
import json
import os
import random
import sys
import time

import numpy as np
import torch

import corpus
import data
import tokenizer

TORCH = "2.11"
TRANSFORMERS = "5.23.0"
VOCAB = 8192
TOKENIZER_SAMPLE_BYTES = 24_000_000


def check_versions():
    import transformers
    assert transformers.__version__ == TRANSFORMERS, f"transformers {transformers.__version__}, expected {TRANSFORMERS}"
    if torch.cuda.is_available():
        assert torch.__version__.startswith(TORCH), f"torch {torch.__version__}, expected {TORCH}.x"


def seed_all(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


class Log:
    """Prints and appends to OUT/log.txt with elapsed seconds."""

    def __init__(self, path):
        self.t0 = time.time()
        self.f = open(path, "a")

    def __call__(self, *a):
        line = f"[{time.time() - self.t0:7.1f}s] " + " ".join(str(x) for x in a)
        print(line, flush=True)
        self.f.write(line + "\n")
        self.f.flush()


def build_data(out_dir, log, tokenizer_dir=None, max_bytes=None):
    """Corpus, tokenizer (trained, or loaded from `tokenizer_dir`), train/held-out streams.
    Writes corpus.json (sources + licences, held-out file names) and the tokenizer into out_dir."""
    from tokenizers import Tokenizer
    if max_bytes:
        corpus.TOTAL_BYTES = max_bytes
    docs, sources = corpus.collect()
    train_texts = [t for _, t, h in docs if not h]
    held = [(n, t) for n, t, h in docs if h]
    log(f"corpus: {len(docs)} files, {sum(len(t) for _, t, _ in docs) / 1e6:.1f} M chars, {len(held)} held out")
    with open(os.path.join(out_dir, "corpus.json"), "w") as f:
        json.dump({"python": sys.version, "sources": sources, "heldout_files": [n for n, _ in held]}, f, indent=1)
    if tokenizer_dir:
        tok = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    else:
        # every third training file (fixed order) up to TOKENIZER_SAMPLE_BYTES
        sample, n = [], 0
        for t in train_texts[::3]:
            if n >= TOKENIZER_SAMPLE_BYTES:
                break
            sample.append(t)
            n += len(t)
        tok = tokenizer.train(iter(sample), VOCAB)
        log(f"tokenizer: {tok.get_vocab_size()} ids trained on {n / 1e6:.1f} M chars")
    tokenizer.save(tok, out_dir, 2048)
    eos = tok.token_to_id(tokenizer.EOS)
    train = data.encode_stream(tok, train_texts, eos)
    heldout = data.encode_stream(tok, [t for _, t in held], eos)
    log(f"tokens: train {train.numel() / 1e6:.2f} M, held-out {heldout.numel() / 1e6:.3f} M "
        f"({sum(len(t) for t in train_texts) / train.numel():.2f} chars/token)")
    with open(os.path.join(out_dir, "heldout.jsonl"), "w") as f:
        for n, t in held:
            f.write(json.dumps({"name": n, "text": t}) + "\n")
    return tok, train, heldout


def cosine_lr(step, total, peak, warmup, floor=0.1):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = (step - warmup) / max(1, total - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + np.cos(np.pi * min(1.0, p))))
