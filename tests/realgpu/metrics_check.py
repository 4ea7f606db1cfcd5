"""Issue 4 on a real GPU: /metrics against nvidia-smi, idle and under a torch
load, and the GPM ratios moving. usage: metrics_check.py GPULET OUTDIR"""
import csv
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

GPULET, OUT = sys.argv[1], Path(sys.argv[2])
ok = True
LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$')


def check(what, cond, detail=""):
    global ok
    ok &= bool(cond)
    print(f"{'PASS' if cond else 'FAIL'}  {what}  {detail}", flush=True)


text = ""


def scrape(url):
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m and 'gpu="0"' in (m.group(2) or ""):
            out[m.group(1)] = float(m.group(3))
    return text, out


SMI = "memory.used,memory.free,memory.reserved,temperature.gpu,power.draw,clocks.sm,clocks.mem,utilization.gpu,utilization.memory"


def smi():
    row = next(csv.reader(subprocess.run(["nvidia-smi", f"--query-gpu={SMI}", "--format=csv,noheader,nounits", "-i", "0"],
                                         capture_output=True, text=True).stdout.splitlines()))
    return dict(zip(SMI.split(","), (float(x) for x in row)))


def compare(tag, m, s):
    rows = [("FB_USED MiB", m["DCGM_FI_DEV_FB_USED"], s["memory.used"], 2),
            ("FB_FREE MiB", m["DCGM_FI_DEV_FB_FREE"], s["memory.free"], 2),
            ("FB_RESERVED MiB", m["DCGM_FI_DEV_FB_RESERVED"], s["memory.reserved"], 0),
            ("GPU_TEMP C", m["DCGM_FI_DEV_GPU_TEMP"], s["temperature.gpu"], 2),
            ("POWER_USAGE W", m["DCGM_FI_DEV_POWER_USAGE"], s["power.draw"], max(15, 0.15 * s["power.draw"])),
            ("SM_CLOCK MHz", m["DCGM_FI_DEV_SM_CLOCK"], s["clocks.sm"], 60),
            ("MEM_CLOCK MHz", m["DCGM_FI_DEV_MEM_CLOCK"], s["clocks.mem"], 0),
            ("GPU_UTIL %", m["DCGM_FI_DEV_GPU_UTIL"], s["utilization.gpu"], 15),
            ("MEM_COPY_UTIL %", m["DCGM_FI_DEV_MEM_COPY_UTIL"], s["utilization.memory"], 15)]
    print(f"--- {tag}: gpulet /metrics vs nvidia-smi (read right after)")
    for name, ours, theirs, tol in rows:
        check(f"{tag} {name}", abs(ours - theirs) <= tol, f"gpulet {ours:g}, nvidia-smi {theirs:g} (±{tol:g})")


LOAD = r'''
import sys, time, torch
mode, secs = sys.argv[1], float(sys.argv[2])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
host = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
dev = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
end = time.time() + secs
while time.time() < end:
    if mode == "matmul":
        for _ in range(20):
            c = a @ b
    else:
        dev.copy_(host, non_blocking=True); host.copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
'''

with tempfile.TemporaryDirectory() as tmp:
    port = 19400
    # libmicrohttpd for the agent alone (carried where the machine lacks it).
    env = dict(os.environ, LD_LIBRARY_PATH=os.environ.get("GPULET_LIB_DIR", ""))
    agent = subprocess.Popen([GPULET, "agent", "--kubelet-root", f"{tmp}/k", "--status-socket", f"{tmp}/s.sock",
                              "--metrics-listen", f"127.0.0.1:{port}"], stderr=open(OUT / "agent.log", "w"), env=env)
    url = f"http://127.0.0.1:{port}/metrics"
    for _ in range(100):
        try:
            text, m = scrape(url)
            if "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in m:
                break
        except OSError:
            pass
        time.sleep(0.2)
    (OUT / "metrics-idle.txt").write_text(text)
    check("all default DCGM fields present", all(n in m for n in (
        "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES")), sorted(m)[:40])
    absent = [n for n in ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                          "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS") if n not in m]
    print("absent on this GPU (NVML NOT_SUPPORTED):", absent)
    compare("idle", m, smi())
    idle = m
    load = subprocess.Popen([sys.executable, "-c", LOAD, "matmul", "25"])
    # torch takes seconds to start: wait until the GPU is really busy, then
    # two sampler intervals so the sample (and GPM's window) is all load.
    for _ in range(60):
        if smi()["utilization.gpu"] > 80:
            break
        time.sleep(0.5)
    time.sleep(2.5)
    text, m = scrape(url)
    s = smi()
    (OUT / "metrics-matmul.txt").write_text(text)
    compare("matmul", m, s)
    print(f"GPM under matmul: GR_ENGINE_ACTIVE {m['DCGM_FI_PROF_GR_ENGINE_ACTIVE']:.3f} "
          f"(idle {idle['DCGM_FI_PROF_GR_ENGINE_ACTIVE']:.3f}), TENSOR {m['DCGM_FI_PROF_PIPE_TENSOR_ACTIVE']:.3f}, "
          f"DRAM {m['DCGM_FI_PROF_DRAM_ACTIVE']:.3f}")
    check("GR_ENGINE_ACTIVE high under matmul", m["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] > 0.5)
    check("PIPE_TENSOR_ACTIVE moves under matmul", m["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] > 0.1)
    check("power rises under load", m["DCGM_FI_DEV_POWER_USAGE"] > idle["DCGM_FI_DEV_POWER_USAGE"] + 50)
    e1 = m["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    load.wait()
    load = subprocess.Popen([sys.executable, "-c", LOAD, "copy", "15"])
    for _ in range(60):
        if smi()["memory.used"] > 1000:
            break
        time.sleep(0.5)
    time.sleep(3)
    text, m = scrape(url)
    (OUT / "metrics-copy.txt").write_text(text)
    tx, rx = m["DCGM_FI_PROF_PCIE_TX_BYTES"], m["DCGM_FI_PROF_PCIE_RX_BYTES"]
    print(f"GPM under host<->device copies: PCIE_TX {tx / 1e9:.1f} GB/s, PCIE_RX {rx / 1e9:.1f} GB/s")
    check("PCIe bytes move under copies", tx > 1e9 and rx > 1e9)
    check("energy counter grows", m["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] > e1)
    load.wait()
    sample = re.search(r"^gpulet_sample_duration_seconds (\S+)$", text, re.M).group(1)
    print(f"sample duration (1 GPU, real NVML): {float(sample) * 1000:.2f} ms")
    status = open(f"/proc/{agent.pid}/status").read()
    print("agent RSS:", re.search(r"VmRSS:\s+(\d+ kB)", status).group(1))
    t0 = time.perf_counter()
    for _ in range(200):
        urllib.request.urlopen(url, timeout=5).read()
    print(f"200 scrapes: {(time.perf_counter() - t0) / 200 * 1000:.3f} ms each (new connection per scrape)")
    agent.terminate()
    agent.wait()
print("ALL PASS" if ok else "SOME CHECKS FAILED")
