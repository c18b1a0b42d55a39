"""Read bandwidth vs contiguous run length per row (hypothesis test for qmm's memory pattern).

Each Triton program reads a [ROWS, K] slab of a large int32 matrix in steps of RUN bytes per
row (ROWS x RUN bytes = 8 KiB per step, so only the run length changes), xor-reducing the
values so nothing is optimised away. Prints GB/s per run length next to torch's copy_.
Usage: python3 tools/gpu/row_run_bandwidth.py
"""
import torch
import triton
import triton.language as tl


@triton.jit
def read_runs(w, out, k_words: tl.constexpr, rows: tl.constexpr, run_words: tl.constexpr):
    pid = tl.program_id(0)
    r = pid * rows + tl.arange(0, rows)[:, None]
    acc = tl.zeros((rows, run_words), tl.int32)
    for k in range(0, k_words, run_words):
        c = k + tl.arange(0, run_words)[None, :]
        acc ^= tl.load(w + r * k_words + c)
    tl.store(out + pid * rows + tl.arange(0, rows), tl.reduce(acc, 1, _xor))


@triton.jit
def _xor(a, b):
    return a ^ b


def bench(fn, iters=50):
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    print(torch.cuda.get_device_name())
    k_bytes = 10240  # one F16 row of 5120, also ~ a Q4_K row of 17408
    n_rows = 1 << 16  # 640 MiB
    w = torch.randint(0, 1 << 30, (n_rows, k_bytes // 4), dtype=torch.int32, device="cuda")
    out = torch.empty(n_rows, dtype=torch.int32, device="cuda")
    nbytes = w.numel() * 4
    dst = torch.empty_like(w)
    t = bench(lambda: dst.copy_(w))
    print(f"torch copy_: {2 * nbytes / t / 1e9:.0f} GB/s (read+write)")
    for warps in (4, 8):
        for stages in (2, 3, 4):
            for run in (64, 128, 256, 512, 1024, 2048):
                rows = 8192 // run
                grid = (n_rows // rows,)
                f = lambda: read_runs[grid](w, out, k_bytes // 4, rows, run // 4, num_warps=warps, num_stages=stages)
                t = bench(f)
                print(f"warps={warps} stages={stages} run={run:5d} B rows/program={rows:4d}: {nbytes / t / 1e9:7.0f} GB/s")


if __name__ == "__main__":
    main()
