"""Token streams: every document encoded (no specials inside), followed by `<|endoftext|>`,
concatenated in corpus order; train and held-out streams kept apart (split by file)."""
import numpy as np
import torch


def encode_stream(tok, texts, eos_id):
    ids = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(eos_id)
    return torch.tensor(np.asarray(ids, dtype=np.int32), dtype=torch.int32)


def random_windows(stream, n, length, gen):
    """`n` windows of `length` tokens at uniform random starts ([n, length], int64)."""
    starts = torch.randint(0, stream.numel() - length, (n,), generator=gen)
    idx = starts[:, None] + torch.arange(length)[None, :]
    return stream[idx].long()


def fixed_windows(stream, length, max_windows):
    """Consecutive non-overlapping windows from the start ([k, length], int64)."""
    k = min(max_windows, stream.numel() // length)
    return stream[: k * length].view(k, length).long()
