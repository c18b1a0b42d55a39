"""Independent copy-bandwidth check with PyTorch (run on the GPU machine next to our own figure).

Copies 4 GiB -> 4 GiB with `dst.copy_(src)`, 10 timed runs after 3 warm-ups, CUDA events;
prints GB/s counting bytes read + written, like `flashtree info --bench`.
"""
import torch

n = 4 << 30
src = torch.full((n,), 0x5A, dtype=torch.uint8, device="cuda")
dst = torch.empty_like(src)
for _ in range(3):
    dst.copy_(src)
start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(10):
    dst.copy_(src)
stop.record()
torch.cuda.synchronize()
ms = start.elapsed_time(stop) / 10
print(f"torch copy_: {2 * n / (ms * 1e-3) / 1e9:.1f} GB/s ({torch.cuda.get_device_name()})")
