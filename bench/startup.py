#!/usr/bin/env python3
"""Start-up cost and memory of gpulet, per simulated preset (or on the real
NVML with --real): `gpulet list` wall time; start -> registered, from
spawning `gpulet agent` to a grpcio kubelet stand-in receiving its Register;
and the agent's peak and current resident memory (VmHWM, VmRSS) once running.
Prints a Markdown table for docs/benchmarks.md.

usage: bench/startup.py [--gpulet build/gpulet] [--runs 50] [--real]"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))


def run_list(gpulet, args, runs):
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([gpulet, "list", "-o", "json", *args], stdout=subprocess.DEVNULL,
                       check=True)
        walls.append((time.perf_counter() - t0) * 1000)
    walls.sort()
    return statistics.median(walls), walls[int(0.99 * (len(walls) - 1))]


def start_to_registered(gpulet, args, runs):
    """Median and p90 ms from spawning the agent to its Register arriving."""
    from kubelet import FakeKubelet, load_stubs
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        stubs = load_stubs(Path(tmp) / "stubs")
        for i in range(runs):
            k = FakeKubelet(Path(tmp) / f"kubelet{i}", *stubs)
            k.start()
            env = dict(os.environ, GPULET_SIM_CONTROL=os.path.join(tmp, "sim.sock"))
            t0 = time.monotonic()
            p = subprocess.Popen([gpulet, "agent", *args, "--kubelet-root", str(k.root),
                                  "--status-socket", os.path.join(tmp, "status.sock"),
                                  "--metrics-listen", "127.0.0.1:0"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            try:
                t_reg, _ = k.wait_registrations(1, timeout=30)
                times.append((t_reg - t0) * 1000)
            finally:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=10)
                k.stop()
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))]


def agent_rss(gpulet, args):
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, GPULET_SIM_CONTROL=os.path.join(tmp, "sim.sock"))
        log = open(os.path.join(tmp, "agent.log"), "w+")
        # The node's paths stay untouched: kubelet root and status socket are ours.
        p = subprocess.Popen([gpulet, "agent", *args, "--kubelet-root", os.path.join(tmp, "kubelet"),
                              "--status-socket", os.path.join(tmp, "status.sock"),
                              "--metrics-listen", "127.0.0.1:0"],
                             stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                log.seek(0)
                text = log.read()
                if "agent running" in text:
                    break
                time.sleep(0.01)
            time.sleep(0.2)
            status = open(f"/proc/{p.pid}/status").read()
            hwm, rss = (int(re.search(rf"{k}:\s+(\d+) kB", status).group(1)) for k in ("VmHWM", "VmRSS"))
            startup = re.search(r"start-up: (.*)", text)
            return hwm, rss, startup.group(1) if startup else "?"
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpulet", default="build/gpulet")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--real", action="store_true", help="real NVML instead of the presets")
    opts = ap.parse_args()
    cases = [("real NVML", [])] if opts.real else [
        (p, ["--simulate", p]) for p in ("t4", "dgx-h100", "scale-64")]
    print("| node | list p50 ms | list p99 ms | start -> registered p50 / p90 ms "
          "| agent peak RSS MiB | agent RSS MiB | agent start-up |")
    print("|---|---|---|---|---|---|---|")
    for name, args in cases:
        p50, p99 = run_list(opts.gpulet, args, opts.runs)
        r50, r90 = start_to_registered(opts.gpulet, args, max(5, opts.runs // 2))
        hwm, rss, startup = agent_rss(opts.gpulet, args)
        print(f"| {name} | {p50:.1f} | {p99:.1f} | {r50:.1f} / {r90:.1f} | {hwm / 1024:.1f} "
              f"| {rss / 1024:.1f} | {startup} |", flush=True)


if __name__ == "__main__":
    main()
