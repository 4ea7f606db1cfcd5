#!/usr/bin/python3
"""What a GPU lane per GPU costs a healthy node (docs/benchmarks.md,
"Sampling on lanes"): the agent's CPU time per second while it samples
every GPU each second and nobody scrapes, its threads and RSS, and the
last round's duration, for 8 and 64 simulated GPUs. CPU time is the sum of
every thread's run time (/proc/PID/task/*/schedstat, nanoseconds). Give
two binaries to compare them in one run (e.g. the commit before lanes).

usage: bench/lanes_bench.py [--seconds 30] [--runs 3] BINARY [BINARY...]"""
import argparse
import http.client
import os
import re
import socket
import statistics
import subprocess
import tempfile
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_ns(pid):
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
        except OSError:
            pass
    return total


def scrape(port, path="/metrics"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", path)
    r = c.getresponse()
    return r.status, r.read().decode()


def one(binary, preset, seconds, tmp):
    port = free_port()
    p = subprocess.Popen([binary, "agent", "--simulate", preset, "--kubelet-root", f"{tmp}/k",
                          "--status-socket", f"{tmp}/s.sock", "--metrics-listen",
                          f"127.0.0.1:{port}", "--log-level", "warn"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=dict(os.environ, GPULET_SIM_CONTROL="off"))
    try:
        for _ in range(200):
            try:
                if scrape(port, "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        time.sleep(2)
        c0, t0 = cpu_ns(p.pid), time.monotonic()
        time.sleep(seconds)
        cpu = (cpu_ns(p.pid) - c0) / 1e9 / (time.monotonic() - t0) * 100
        body = scrape(port)[1]
        sample = float(re.search(r"^gpulet_sample_duration_seconds (\S+)$", body, re.M).group(1))
        status = open(f"/proc/{p.pid}/status").read()
        rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024
        threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
        return cpu, sample * 1000, rss, threads
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("binaries", nargs="+")
    o = ap.parse_args()
    print("| binary | GPUs | agent CPU % of a core (median of runs) | last round ms | RSS MiB | threads |")
    print("|---|---|---|---|---|---|")
    for preset, n in (("dgx-h100", 8), ("scale-64", 64)):
        for binary in o.binaries:
            rows = []
            with tempfile.TemporaryDirectory() as tmp:
                for _ in range(o.runs):
                    rows.append(one(binary, preset, o.seconds, tmp))
            cpu = statistics.median(r[0] for r in rows)
            ms = statistics.median(r[1] for r in rows)
            print(f"| {binary} | {n} | {cpu:.3f} | {ms:.3f} | {rows[-1][2]:.2f} | {rows[-1][3]} |",
                  flush=True)


if __name__ == "__main__":
    main()
