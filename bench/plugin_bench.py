#!/usr/bin/python3
"""Device plugin benchmarks against a grpcio fake kubelet (tests/integration/kubelet.py).

Measures, for each preset:
  - start -> registered: from spawning `gpulet agent` to the kubelet receiving Register;
  - Allocate latency p50/p99 over N calls on one channel (as the kubelet holds one);
  - health propagation p50/p99: XID injected on the simulator's control socket ->
    the Unhealthy list arriving on ListAndWatch (cleared by the operator command between);
  - agent RSS after start and after churn (many Allocates and kubelet restarts).
Latencies include the Python client's own per-call cost, so they bound gpulet's from above.

usage: bench/plugin_bench.py [--gpulet build/gpulet] [--allocs 10000] [--injections 100]
                             [--churn-allocs 100000] [--restarts 1000] [--presets dgx-h100,scale-64]
                             [--no-metrics]"""
import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from kubelet import FakeKubelet, load_stubs  # noqa: E402


def rss_kib(pid):
    status = open(f"/proc/{pid}/status").read()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def unix_request(path, line):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(line.encode())
    reply = s.recv(4096).decode()
    s.close()
    return reply


def bench(preset, opts, pb, pbg, tmp):
    k = FakeKubelet(Path(tmp) / preset, pb, pbg)
    k.start()
    control, status = f"{tmp}/{preset}-sim.sock", f"{tmp}/{preset}-status.sock"
    env = dict(os.environ, GPULET_SIM_CONTROL=control)
    t0 = time.monotonic()
    argv = [opts.gpulet, "agent", "--simulate", preset, "--kubelet-root", str(k.root),
            "--status-socket", status, "--xid-recovery-seconds", "0", "--log-level", "warn"]
    if opts.no_metrics:
        argv.append("--no-metrics")
    agent = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
    t_reg, _ = k.wait_registrations(1)
    start_ms = (t_reg - t0) * 1000
    time.sleep(0.2)
    rss_start = rss_kib(agent.pid)
    channel, stub = k.plugin()
    stream = stub.ListAndWatch(pb.Empty())
    devices = [d.ID for d in next(stream).devices]

    lat = []
    for i in range(opts.allocs):
        req = pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[devices[i % len(devices)]])])
        t = time.perf_counter()
        stub.Allocate(req)
        lat.append((time.perf_counter() - t) * 1e6)

    prop = []
    for i in range(opts.injections):
        gpu = i % len(devices)
        t = time.perf_counter()
        assert unix_request(control, f"xid {gpu} 94\n").startswith("ok")
        for update in stream:
            if update.devices[gpu].health == "Unhealthy":
                break
        prop.append((time.perf_counter() - t) * 1e3)
        assert unix_request(status, f"clear {gpu}\n").startswith("ok")
        for update in stream:
            if update.devices[gpu].health == "Healthy":
                break

    req = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[devices[0]])])
    for _ in range(opts.churn_allocs):
        stub.Allocate(req)
    stream.cancel()
    channel.close()
    for n in range(opts.restarts):
        k.restart()
        k.wait_registrations(n + 2, timeout=10)
    time.sleep(0.5)
    rss_end = rss_kib(agent.pid)
    agent.terminate()
    agent.wait()
    k.stop()
    print(f"| {preset} ({len(devices)} GPUs) | {start_ms:.1f} | {pct(lat, 50):.0f} / {pct(lat, 99):.0f} "
          f"| {pct(prop, 50):.2f} / {pct(prop, 99):.2f} | {rss_start / 1024:.2f} | {rss_end / 1024:.2f} |",
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpulet", default="build/gpulet")
    ap.add_argument("--allocs", type=int, default=10000)
    ap.add_argument("--injections", type=int, default=100)
    ap.add_argument("--churn-allocs", type=int, default=100000)
    ap.add_argument("--restarts", type=int, default=1000)
    ap.add_argument("--presets", default="dgx-h100,scale-64")
    ap.add_argument("--no-metrics", action="store_true", help="run the device plugin alone")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pb, pbg = load_stubs(Path(tmp) / "stubs")
        print(f"allocs={opts.allocs} injections={opts.injections} churn: "
              f"{opts.churn_allocs} Allocates + {opts.restarts} kubelet restarts")
        print("| node | start -> registered ms | Allocate p50 / p99 µs | health propagation "
              "p50 / p99 ms | RSS after start MiB | RSS after churn MiB |")
        print("|---|---|---|---|---|---|")
        for preset in opts.presets.split(","):
            bench(preset, opts, pb, pbg, tmp)


if __name__ == "__main__":
    main()
