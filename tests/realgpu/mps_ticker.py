"""An MPS client that works without pause, as a training or inference job
does: every 200 ms it allocates 64 MiB, launches kernels on it and waits
for them. The first CUDA error ends it (exit 1, the error printed); SIGTERM
ends it cleanly with its count. usage: mps_ticker.py NAME"""
import signal
import sys
import time

import torch

name = sys.argv[1]
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
ticks = 0
t0 = time.monotonic()
try:
    while not stop:
        x = torch.ones(16 << 20, device="cuda")
        x.mul_(2).add_(1)
        assert float(x.sum()) == 3.0 * (16 << 20)
        torch.cuda.synchronize()
        ticks += 1
        if ticks % 25 == 0:
            print(f"{name}: {ticks} ticks in {time.monotonic() - t0:.1f} s", flush=True)
        time.sleep(0.2)
except Exception as e:  # the job's death, as a workload would see it
    print(f"{name}: FAILED after {ticks} ticks ({time.monotonic() - t0:.1f} s): "
          f"{str(e).splitlines()[0][:200]}", flush=True)
    sys.exit(1)
print(f"{name}: stopped cleanly after {ticks} ticks in {time.monotonic() - t0:.1f} s, no error",
      flush=True)
