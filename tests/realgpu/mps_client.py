"""An MPS client as a container would run it: allocates device memory in
1 GiB steps until CUDA refuses (the pinned limit), then multiplies matrices
for SECONDS. Prints one line per phase. usage: mps_client.py NAME SECONDS"""
import os
import sys
import time

import torch

name, seconds = sys.argv[1], float(sys.argv[2])
print(f"{name}: pid {os.getpid()} CUDA_MPS_PIPE_DIRECTORY={os.environ.get('CUDA_MPS_PIPE_DIRECTORY')} "
      f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={os.environ.get('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT')} "
      f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={os.environ.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE')}",
      flush=True)
blocks = []
try:
    while True:
        blocks.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
except RuntimeError as e:
    print(f"{name}: allocated {len(blocks)} GiB, then refused: {str(e).splitlines()[0][:120]}",
          flush=True)
free, total = torch.cuda.mem_get_info()
print(f"{name}: cudaMemGetInfo free {free / 2**30:.1f} GiB of total {total / 2**30:.1f} GiB",
      flush=True)
blocks.clear()
torch.cuda.empty_cache()
a = torch.randn(8192, 8192, device="cuda")
torch.cuda.synchronize()
t0, n = time.time(), 0
while time.time() - t0 < seconds:
    a @ a
    n += 1
    if n % 8 == 0:
        torch.cuda.synchronize()  # the clock measures the GPU, not the queue
torch.cuda.synchronize()
print(f"{name}: {n} 8192^3 matmuls in {time.time() - t0:.1f} s", flush=True)
