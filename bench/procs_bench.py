#!/usr/bin/python3
"""The cost of per-container numbers on the simulator: 100 processes spread
over 8 GPUs (dgx-h100), each in its own pod container (a /proc tree of
cgroup files and a log directory of container links, as on a node),
sampled every second. The simulator's NVML calls cost next to nothing, so
this measures gpulet's own share: cgroups read once per process, names
looked up, rows built and rendered. The NVML calls' cost on a real GPU is in
docs/benchmarks.md (tests/realgpu/share_check.py).

Reports, with process metrics on and off: the process part of a sample
(gpulet_process_sample_duration_seconds, first and steady), the whole sample,
the agent's CPU time per wall second, its peak RSS, and the /metrics size.

usage: bench/procs_bench.py [--gpulet build/gpulet] [--processes 100] [--seconds 20]"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

GPUS = 8


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def node(tmp, n):
    """n pods, one process each: cgroup files and container links."""
    proc, logs = Path(tmp) / "proc", Path(tmp) / "containers"
    logs.mkdir(parents=True)
    placed = []
    for i in range(n):
        pid, uid, cid = 100000 + i, str(uuid.uuid4()), uuid.uuid4().hex * 2
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
            f"{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n")
        (logs / f"job-{i:03d}_bench_main-{cid}.log").symlink_to("/nonexistent")
        placed.append(pid)
    return proc, logs, placed


def scrape(url):
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return None, {}
    vals = {}
    for name in ("gpulet_process_sample_duration_seconds", "gpulet_sample_duration_seconds"):
        m = re.search(rf"^{name} (\S+)$", text, re.M)
        if m:
            vals[name] = float(m.group(1))
    return text, vals


def cpu_seconds(pid):
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def run(opts, tmp, on):
    proc, logs, pids = node(tmp, opts.processes) if not (Path(tmp) / "proc").exists() else \
        (Path(tmp) / "proc", Path(tmp) / "containers", [100000 + i for i in range(opts.processes)])
    port = free_port()
    control = f"{tmp}/sim-{on}.sock"
    env = dict(os.environ, GPULET_SIM_CONTROL=control)
    agent = subprocess.Popen(
        [opts.gpulet, "agent", "--simulate", "dgx-h100", "--kubelet-root", f"{tmp}/kubelet",
         "--status-socket", f"{tmp}/status-{on}.sock", "--labels", "none", "--log-level", "warn",
         "--metrics-listen", f"127.0.0.1:{port}", "--proc-root", str(proc),
         "--container-log-dir", str(logs), "--process-metrics", "true" if on else "false"],
        env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 20
        while scrape(url)[0] is None:
            assert time.monotonic() < deadline, "agent did not serve /metrics"
            time.sleep(0.1)
        for i, pid in enumerate(pids):
            subprocess.run([opts.gpulet, "sim", "proc", str(i % GPUS), "add", str(pid),
                            str(256 + i), str(i % 50)], env=env, check=True, capture_output=True)
        time.sleep(1.5)
        first = scrape(url)[1].get("gpulet_process_sample_duration_seconds", 0)
        cpu0, t0 = cpu_seconds(agent.pid), time.monotonic()
        procs, whole = [], []
        text = ""
        while time.monotonic() - t0 < opts.seconds:
            time.sleep(1)
            text, vals = scrape(url)
            procs.append(vals.get("gpulet_process_sample_duration_seconds", 0))
            whole.append(vals.get("gpulet_sample_duration_seconds", 0))
        cpu = (cpu_seconds(agent.pid) - cpu0) / (time.monotonic() - t0)
        named = len(re.findall(r'^gpulet_container_gpu_memory_used_bytes\{.*pod="', text, re.M))
        return {"first": first, "procs": statistics.median(procs), "whole": statistics.median(whole),
                "cpu": cpu, "rss": peak_rss_kib(agent.pid), "bytes": len(text), "named": named}
    finally:
        agent.terminate()
        agent.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpulet", default="build/gpulet")
    ap.add_argument("--processes", type=int, default=100)
    ap.add_argument("--seconds", type=int, default=20)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        off = run(opts, tmp, False)
        on = run(opts, tmp, True)
    print(f"{opts.processes} processes on {GPUS} simulated GPUs, sampled every 1 s for {opts.seconds} s")
    print(f"  containers named: {on['named']} of {opts.processes}")
    print(f"  process part of a sample: while they arrive {on['first'] * 1e3:.3f} ms (cgroups and names read), "
          f"steady median {on['procs'] * 1e3:.3f} ms")
    print(f"  whole sample, median: on {on['whole'] * 1e3:.3f} ms, off {off['whole'] * 1e3:.3f} ms")
    print(f"  agent CPU: on {on['cpu'] * 100:.2f}% of a core, off {off['cpu'] * 100:.2f}%")
    print(f"  peak RSS: on {on['rss'] / 1024:.1f} MiB, off {off['rss'] / 1024:.1f} MiB")
    print(f"  /metrics: on {on['bytes'] / 1024:.1f} KiB, off {off['bytes'] / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
