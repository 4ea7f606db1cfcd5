#!/usr/bin/python3
"""Metrics benchmarks (docs/benchmarks.md): for 1, 8 and 64 simulated GPUs,
scrape latency p50/p99 over N scrapes on one HTTP connection, the agent's
CPU use per second while only sampling (1 s interval, nobody scraping: an
upper bound for the sampler), the last sample's duration, RSS and body size;
then wrk with many connections against the 8-GPU node.

usage: bench/metrics_bench.py [--gpulet build/gpulet] [--scrapes 2000] [--cpu-seconds 20]
                              [--wrk-connections 500] [--wrk-seconds 60]"""
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
    p = s.getsockname()[1]
    s.close()
    return p


def proc_cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    return int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{pid}/status").read()).group(1)) / 1024


def start(gpulet, preset, tmp, port):
    log = open(f"{tmp}/{preset}.log", "w+")
    p = subprocess.Popen([gpulet, "agent", "--simulate", preset, "--kubelet-root", f"{tmp}/k-{preset}",
                          "--status-socket", f"{tmp}/{preset}.sock", "--metrics-listen",
                          f"127.0.0.1:{port}", "--log-level", "warn"],
                         stdout=log, stderr=subprocess.STDOUT,
                         env=dict(os.environ, GPULET_SIM_CONTROL=f"{tmp}/{preset}-sim.sock"))
    for _ in range(200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                return p
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{preset}: agent never became ready")


def scrape_latency(port, n):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    lat, size = [], 0
    for _ in range(n):
        t = time.perf_counter()
        c.request("GET", "/metrics")
        r = c.getresponse()
        body = r.read()
        lat.append((time.perf_counter() - t) * 1000)
        size = len(body)
    lat.sort()
    return statistics.median(lat), lat[int(0.99 * (len(lat) - 1))], size, body.decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpulet", default="build/gpulet")
    ap.add_argument("--scrapes", type=int, default=2000)
    ap.add_argument("--cpu-seconds", type=float, default=20)
    ap.add_argument("--wrk-connections", type=int, default=500)
    ap.add_argument("--wrk-seconds", type=int, default=60)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print("| GPUs | scrape p50 ms | scrape p99 ms | body KiB | sample duration ms | agent CPU % of a core (1 s interval, idle) | RSS MiB |")
        print("|---|---|---|---|---|---|---|")
        for preset, n in (("t4", 1), ("dgx-h100", 8), ("scale-64", 64)):
            port = free_port()
            p = start(opts.gpulet, preset, tmp, port)
            time.sleep(1.5)
            c0, t0 = proc_cpu(p.pid), time.monotonic()
            time.sleep(opts.cpu_seconds)
            cpu = (proc_cpu(p.pid) - c0) / (time.monotonic() - t0) * 100
            p50, p99, size, body = scrape_latency(port, opts.scrapes)
            sample = float(re.search(r"^gpulet_sample_duration_seconds (\S+)$", body, re.M).group(1)) * 1000
            print(f"| {n} | {p50:.3f} | {p99:.3f} | {size / 1024:.1f} | {sample:.3f} | {cpu:.2f} | "
                  f"{rss_mib(p.pid):.2f} |", flush=True)
            p.terminate()
            p.wait()
        port = free_port()
        p = start(opts.gpulet, "dgx-h100", tmp, port)
        before = rss_mib(p.pid)
        w = subprocess.run(["wrk", "-t2", f"-c{opts.wrk_connections}", f"-d{opts.wrk_seconds}s",
                            "--latency", f"http://127.0.0.1:{port}/metrics"], capture_output=True, text=True)
        after = rss_mib(p.pid)
        p.terminate()
        p.wait()
        print(f"\nwrk -t2 -c{opts.wrk_connections} -d{opts.wrk_seconds}s on 8 GPUs: RSS {before:.2f} -> {after:.2f} MiB")
        print("\n".join("    " + l for l in w.stdout.strip().splitlines()))


if __name__ == "__main__":
    main()
