#!/usr/bin/env python3
"""Start-up cost and memory of gpulet: `gpulet list` wall time, and the
agent's peak and current resident memory (VmHWM, VmRSS) once running, per simulated preset (or on
the real NVML with --real). Prints a Markdown table for docs/benchmarks.md.

usage: bench/startup.py [--gpulet build/gpulet] [--runs 50] [--real]"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time


def run_list(gpulet, args, runs):
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([gpulet, "list", "-o", "json", *args], stdout=subprocess.DEVNULL,
                       check=True)
        walls.append((time.perf_counter() - t0) * 1000)
    walls.sort()
    return statistics.median(walls), walls[int(0.99 * (len(walls) - 1))]


def agent_rss(gpulet, args):
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, GPULET_SIM_CONTROL=os.path.join(tmp, "sim.sock"))
        log = open(os.path.join(tmp, "agent.log"), "w+")
        p = subprocess.Popen([gpulet, "agent", *args], stdout=log, stderr=subprocess.STDOUT, env=env)
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
    print("| node | list p50 ms | list p99 ms | agent peak RSS MiB | agent RSS MiB | agent start-up |")
    print("|---|---|---|---|---|---|")
    for name, args in cases:
        p50, p99 = run_list(opts.gpulet, args, opts.runs)
        hwm, rss, startup = agent_rss(opts.gpulet, args)
        print(f"| {name} | {p50:.1f} | {p99:.1f} | {hwm / 1024:.1f} | {rss / 1024:.1f} | {startup} |")


if __name__ == "__main__":
    main()
