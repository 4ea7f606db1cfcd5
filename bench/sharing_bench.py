#!/usr/bin/python3
"""Time-slicing at scale against the grpcio kubelet stand-in: 8 GPUs x 48
replicas (dgx-h100, 384 devices) beside the same node unshared.

Measures: the ListAndWatch message size; Allocate latency p50/p99 for one
replica and for four; GetPreferredAllocation p50/p99 choosing 4 of all
replicas; health propagation (an XID to the list with all 48 replicas
Unhealthy). Latencies include the Python client's own cost.

usage: bench/sharing_bench.py [--gpulet build/gpulet] [--calls 2000] [--replicas 48]"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from kubelet import FakeKubelet, load_stubs  # noqa: E402


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def timed(fn, n):
    lat = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        lat.append((time.perf_counter() - t) * 1e6)
    return statistics.median(lat), pct(lat, 99)


def run(opts, pb, pbg, tmp, replicas):
    name = f"r{replicas}"
    k = FakeKubelet(Path(tmp) / name, pb, pbg)
    k.start()
    argv = [opts.gpulet, "agent", "--simulate", "dgx-h100", "--kubelet-root", str(k.root),
            "--status-socket", f"{tmp}/{name}.sock", "--no-metrics", "--log-level", "warn",
            "--labels", "none", "--xid-recovery-seconds", "0"]
    if replicas > 1:
        cfg = Path(tmp) / f"{name}.yaml"
        cfg.write_text("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                       f"    - {{name: nvidia.com/gpu, replicas: {replicas}}}\n")
        argv += ["--config-file", str(cfg)]
    control = f"{tmp}/{name}-sim.sock"
    agent = subprocess.Popen(argv, env=dict(os.environ, GPULET_SIM_CONTROL=control),
                             stderr=subprocess.DEVNULL)
    k.wait_registrations(1)
    channel, stub = k.plugin()
    stream = stub.ListAndWatch(pb.Empty())
    first = next(stream)
    ids = [d.ID for d in first.devices]
    size = first.ByteSize()

    def alloc(n):
        return lambda i: stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[ids[(i * n + j) % len(ids)] for j in range(n)])]))

    a1 = timed(alloc(1), opts.calls)
    a4 = timed(alloc(4), opts.calls)
    pref = timed(lambda i: stub.GetPreferredAllocation(pb.PreferredAllocationRequest(
        container_requests=[pb.ContainerPreferredAllocationRequest(
            available_deviceIDs=ids, allocation_size=4)])), opts.calls // 4)
    t = time.perf_counter()
    subprocess.run([opts.gpulet, "sim", "xid", "3", "79"], env=dict(os.environ,
                   GPULET_SIM_CONTROL=control), check=True, capture_output=True)
    for update in stream:
        if sum(d.health == "Unhealthy" for d in update.devices) == replicas:
            break
    health_ms = (time.perf_counter() - t) * 1000
    stream.cancel()
    channel.close()
    agent.terminate()
    agent.wait()
    k.stop()
    print(f"| {replicas} | {len(ids)} | {size} | {a1[0]:.0f} / {a1[1]:.0f} | {a4[0]:.0f} / {a4[1]:.0f} "
          f"| {pref[0]:.0f} / {pref[1]:.0f} | {health_ms:.1f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpulet", default=str(Path(__file__).resolve().parents[1] / "build" / "gpulet"))
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--replicas", type=int, default=48)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpulet-bench-") as tmp:
        pb, pbg = load_stubs(Path(tmp) / "stubs")
        print("| replicas per GPU | devices | ListAndWatch bytes | Allocate 1 p50 / p99 us | "
              "Allocate 4 p50 / p99 us | Preferred 4 p50 / p99 us | XID to all replicas Unhealthy ms |")
        print("|---|---|---|---|---|---|---|")
        for r in (1, opts.replicas):
            run(opts, pb, pbg, tmp, r)


if __name__ == "__main__":
    main()
