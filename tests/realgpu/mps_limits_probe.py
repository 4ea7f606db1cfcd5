"""What MPS enforces of a client's own limits, on a real GPU (issue 29): one
control daemon with no default limit and two clients whose environment
asks for 8 GiB and 16 GiB of pinned memory (as a share's CDI edits set
them) allocate 1 GiB blocks until CUDA refuses; then a daemon whose
default is 4 GiB and a client that asks for 8 GiB (can a client raise the
daemon's default?). The daemons this starts, it quits, whatever happens.
usage: mps_limits_probe.py WORKDIR"""
import os
import subprocess
import sys
import time
from pathlib import Path

CLIENT = str(Path(__file__).resolve().parent / "mps_client.py")
work = Path(sys.argv[1])
pipe, log = work / "pipe", work / "log"
pipe.mkdir(parents=True, exist_ok=True)
log.mkdir(parents=True, exist_ok=True)
env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(pipe), CUDA_MPS_LOG_DIRECTORY=str(log))


def control(cmd=None):
    if cmd is None:
        return subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, check=True)
    return subprocess.run(["nvidia-cuda-mps-control"], input=cmd + "\n", env=env, text=True,
                          capture_output=True, timeout=30)


def clients(*limits):
    procs = [subprocess.Popen([sys.executable, CLIENT, f"client-{lim}", "2"],
                              env=dict(env, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=f"0={lim}"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for lim in limits]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        print(out.strip(), flush=True)


def mps_processes():
    return subprocess.run(["pgrep", "-a", "nvidia-cuda-mps"], capture_output=True, text=True).stdout.strip()


print("before:", mps_processes() or "no MPS process", flush=True)
try:
    control()
    time.sleep(1)
    print("== a daemon without a default limit; clients asking 8G and 16G, at once", flush=True)
    clients("8G", "16G")
    control("quit")
    time.sleep(2)
    control()
    time.sleep(1)
    print(control("set_default_device_pinned_mem_limit 0 4G").stdout.strip(), flush=True)
    print("== a daemon whose default is 4G; a client asking 8G", flush=True)
    clients("8G")
finally:
    control("quit")
    time.sleep(2)
    print("after:", mps_processes() or "no MPS process", flush=True)
    print(subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,compute_mode",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip())
    for f in sorted(log.glob("*.log")):
        text = f.read_text()
        print(f"--- {f.name} (last lines)\n" + "\n".join(text.splitlines()[-12:]))
