#!/usr/bin/python3
"""The loop under a slow disk (issue 40): Allocate and /metrics latency,
p50 and p99, while DRA claims are prepared and unprepared in a loop (each
writing the checkpoint), first on the machine's disk as it is, then with
every fsync of gpulet 500 ms slower (tests/shim/slow_fsync.c, preloaded),
as on a node pulling a large image. One agent serves both: DRA on GPUs 0-3
(--dra-gpus), the device plugin on 4-7, metrics sampling every 200 ms;
the kubelet's stand-ins (tests/integration/kubelet.py) and the API
server's (tests/integration/fakeapi.py).
usage: bench/slow_disk.py [--seconds 20] [--fsync-ms 500] [--gpulet build-release/gpulet]"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from dra_bench import AGENTS, DRA, dra_pb, pct  # noqa: E402 (its atexit stops AGENTS)
from fakeapi import FakeAPI  # noqa: E402
from kubelet import FakeKubelet, load_stubs  # noqa: E402

import grpc  # noqa: E402

def shim(tmp):
    lib = tmp / "slow_fsync.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(ROOT / "tests/shim/slow_fsync.c"), "-ldl"],
                   check=True)
    return lib


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(gpulet, tmp, fsync_ms, seconds, lib, kpb):
    """One agent's run; returns {what: [ms, ...]} and the prepares done."""
    api = FakeAPI("n1")
    pb = dra_pb(tmp / "stubs")
    kubelet = FakeKubelet(tmp / "kubelet", *kpb)
    kubelet.start()
    port = free_port()
    env = dict(os.environ, GPULET_SIM_CONTROL=str(tmp / "sim.sock"), GPULET_CDI_SPEC_DIR=str(tmp / "cdi"),
               GPULET_SIM_LIB=str(Path(gpulet).parent / "libgpulet-nvml-sim.so"))
    if fsync_ms:
        env.update(LD_PRELOAD=str(lib), GPULET_SLOW_FSYNC_MS=str(fsync_ms))
    for i in range(4):
        api.claims[("ns", f"c{i}")] = {
            "kind": "ResourceClaim", "metadata": {"name": f"c{i}", "namespace": "ns", "uid": f"u{i}"},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": f"gpu-{i}"}]}}}}
    log = open(tmp / "agent.log", "w")
    AGENTS.append(subprocess.Popen(
        [gpulet, "agent", "--simulate", "dgx-h100", "--dra", "all", "--dra-gpus", "0,1,2,3",
         "--kubelet-root", str(tmp / "kubelet"), "--status-socket", str(tmp / "status.sock"),
         "--kubeconfig", str(api.kubeconfig(tmp / "kc")), "--node-name", "n1", "--labels", "none",
         "--fault-report", "none", "--metrics-listen", f"127.0.0.1:{port}", "--metrics-interval-ms", "200"],
        stdout=log, stderr=subprocess.STDOUT, env=env))
    kubelet.wait_registrations(1, timeout=30)
    sock = tmp / "kubelet" / "plugins" / "gpu.nvidia.com" / "dra.sock"
    deadline = time.monotonic() + 30
    while not sock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    channel, stub = kubelet.plugin()
    ids = [d.ID for d in next(stub.ListAndWatch(kubelet.pb.Empty(), timeout=30)).devices]
    dch = grpc.insecure_channel(f"unix://{sock}")
    prepare = dch.unary_unary(DRA + "NodePrepareResources", request_serializer=lambda m: m.SerializeToString(),
                              response_deserializer=pb.NodePrepareResourcesResponse.FromString)
    unprepare = dch.unary_unary(DRA + "NodeUnprepareResources", request_serializer=lambda m: m.SerializeToString(),
                                response_deserializer=pb.NodeUnprepareResourcesResponse.FromString)
    times = {"Allocate": [], "/metrics": [], "NodePrepareResources": []}
    stop = time.monotonic() + seconds

    def claims():
        i = 0
        while time.monotonic() < stop:
            c = [pb.Claim(namespace="ns", uid=f"u{i % 4}", name=f"c{i % 4}")]
            t0 = time.perf_counter()
            r = prepare(pb.NodePrepareResourcesRequest(claims=c), timeout=60)
            times["NodePrepareResources"].append((time.perf_counter() - t0) * 1e3)
            assert not r.claims[f"u{i % 4}"].error, r.claims[f"u{i % 4}"].error
            unprepare(pb.NodeUnprepareResourcesRequest(claims=c), timeout=60)
            i += 1

    def allocates():
        k = 0
        while time.monotonic() < stop:
            req = kubelet.pb.AllocateRequest(container_requests=[
                kubelet.pb.ContainerAllocateRequest(devices_ids=[ids[k % len(ids)]])])
            t0 = time.perf_counter()
            stub.Allocate(req, timeout=30)
            times["Allocate"].append((time.perf_counter() - t0) * 1e3)
            k += 1
            time.sleep(0.01)

    def scrapes():
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
            times["/metrics"].append((time.perf_counter() - t0) * 1e3)
            time.sleep(0.05)
    threads = [threading.Thread(target=f) for f in (claims, allocates, scrapes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    channel.close()
    dch.close()
    AGENTS[-1].terminate()
    AGENTS[-1].wait(timeout=30)
    kubelet.stop()
    api.stop()
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--fsync-ms", type=int, default=500)
    ap.add_argument("--gpulet", default=str(ROOT / "build-release" / "gpulet"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        lib = shim(tmp)
        kpb = load_stubs(tmp / "kstubs")
        print(f"{a.gpulet}, {a.seconds:.0f} s each")
        print("| disk | what | n | p50 ms | p99 ms |")
        print("|---|---|---|---|---|")
        for name, ms in (("as it is", 0), (f"fsync +{a.fsync_ms} ms", a.fsync_ms)):
            d = tmp / f"run-{ms}"
            d.mkdir()
            times = run(a.gpulet, d, ms, a.seconds, lib, kpb)
            for what, v in times.items():
                if v:
                    print(f"| {name} | {what} | {len(v)} | {statistics.median(v):.2f} | {pct(v, 0.99):.2f} |",
                          flush=True)


if __name__ == "__main__":
    main()
