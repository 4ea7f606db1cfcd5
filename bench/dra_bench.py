#!/usr/bin/python3
"""DRA driver costs, against the stand-in API server of the integration
tests (tests/integration/fakeapi.py) on the simulated dgx-h100:
- NodePrepareResources latency, p50 and p99 over N claims, each new (one
  GET of the claim from the API server, the checkpoint written) and each
  repeated (answered from the checkpoint);
- a share's NodePrepareResources (--dra-shares, its client's limits in its
  CDI spec), p50 and p99 over N shares of the 8 GPUs, kept prepared: the
  first share of each GPU starts its MPS daemon (the integration tests'
  stand-in nvidia-cuda-mps-control), the others use it;
- a MIG claim's NodePrepareResources (--dra-mig on an h100-mig-empty
  node: the MIG device made on the GPU's lane, the CDI spec rewritten),
  p50 and p99 over N claims, each unprepared (its device destroyed) before
  the next; and the pool's slices for that 8-GPU node: bytes and devices;
- ResourceSlice publish time after a change: from just before `gpulet sim
  xid` starts to the apply request's arrival at the API server;
- the agent's RSS with --dra all, and with --dra off (the device plugin),
  both talking to the API server (libcurl loaded): labels and the fault
  report for the device plugin's run, as a DaemonSet has them.
usage: bench/dra_bench.py [--claims 200] [--gpulet build-release/gpulet]"""
import argparse
import atexit
import importlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from fakeapi import FakeAPI  # noqa: E402
from kubelet import FakeKubelet, load_stubs  # noqa: E402

import grpc  # noqa: E402

DRA = "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/"


def dra_pb(out):
    out.mkdir(exist_ok=True)
    shutil.copy(ROOT / "proto" / "dra" / "v1beta1" / "api.proto", out / "dra.proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{out}", f"--python_out={out}",
                    "dra.proto"], check=True)
    sys.path.insert(0, str(out))
    return importlib.import_module("dra_pb2")


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


AGENTS = []


@atexit.register
def stop_agents():
    """A bench that fails halfway leaves no agent behind."""
    for p in AGENTS:
        if p.poll() is None:
            p.kill()
            p.wait()


def start(gpulet, tmp, env, *args, simulate="dgx-h100"):
    log = open(tmp / f"agent-{len(list(tmp.glob('agent-*')))}.log", "w")
    AGENTS.append(subprocess.Popen([gpulet, "agent", "--simulate", simulate, "--no-metrics",
                                    "--kubelet-root", str(tmp / "kubelet"),
                                    "--status-socket", str(tmp / "status.sock"), *args],
                                   stdout=log, stderr=subprocess.STDOUT, env=env))
    return AGENTS[-1]


def wait(pred, timeout=30):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.01)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claims", type=int, default=200)
    ap.add_argument("--gpulet", default=str(ROOT / "build-release" / "gpulet"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        pb = dra_pb(tmp / "stubs")
        api = FakeAPI("n1")
        env = dict(os.environ, GPULET_SIM_CONTROL=str(tmp / "sim.sock"),
                   GPULET_CDI_SPEC_DIR=str(tmp / "cdi"), GPULET_SIM_LIB=str(Path(a.gpulet).parent / "libgpulet-nvml-sim.so"))
        root = tmp / "driver"
        subprocess.run([a.gpulet, "sim", "driver-root", str(root)], check=True, env=env)
        kubeconfig = str(api.kubeconfig(tmp / "kubeconfig"))
        fake_mps = str(ROOT / "tests" / "integration" / "fake_mps_control.py")
        proc = start(a.gpulet, tmp, env, "--dra", "all", "--node-name", "n1", "--nvidia-driver-root", str(root),
                     "--kubeconfig", kubeconfig, "--labels", "none", "--fault-report", "none",
                     "--dra-shares", "*", "--mps-root", str(tmp / "mps"), "--mps-control", fake_mps)
        wait(lambda: "n1-gpu.nvidia.com" in api.slices)
        sock = f"unix://{tmp}/kubelet/plugins/gpu.nvidia.com/dra.sock"
        ch = grpc.insecure_channel(sock)
        prepare = ch.unary_unary(DRA + "NodePrepareResources", request_serializer=lambda m: m.SerializeToString(),
                                 response_deserializer=pb.NodePrepareResourcesResponse.FromString)
        unprepare = ch.unary_unary(DRA + "NodeUnprepareResources",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=pb.NodeUnprepareResourcesResponse.FromString)
        new, again = [], []
        for i in range(a.claims):
            uid = f"u{i}"
            api.claims[("ns", f"c{i}")] = {
                "kind": "ResourceClaim", "metadata": {"name": f"c{i}", "namespace": "ns", "uid": uid},
                "status": {"allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": f"gpu-{i % 8}"}]}}}}
            req = pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid=uid, name=f"c{i}")])
            t0 = time.perf_counter()
            r = prepare(req, timeout=10)
            new.append((time.perf_counter() - t0) * 1e3)
            assert not r.claims[uid].error, r.claims[uid].error
            t0 = time.perf_counter()
            prepare(req, timeout=10)
            again.append((time.perf_counter() - t0) * 1e3)
            unprepare(pb.NodeUnprepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid=uid, name=f"c{i}")]),
                      timeout=10)
        print(f"NodePrepareResources, {a.claims} new claims: p50 {statistics.median(new):.2f} ms, "
              f"p99 {pct(new, 0.99):.2f} ms")
        print(f"NodePrepareResources, the same again (checkpoint): p50 {statistics.median(again):.2f} ms, "
              f"p99 {pct(again, 0.99):.2f} ms")
        first, later = [], []
        for i in range(a.claims):
            uid = f"s{i}"
            api.claims[("ns", f"cs{i}")] = {
                "kind": "ResourceClaim", "metadata": {"name": f"cs{i}", "namespace": "ns", "uid": uid},
                "status": {"allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": f"gpu-{i % 8}",
                     "shareID": f"share-{i}", "consumedCapacity": {"memory": "1Gi", "compute": "1"}}]}}}}
            t0 = time.perf_counter()
            r = prepare(pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid=uid, name=f"cs{i}")]),
                        timeout=30)
            (first if i < 8 else later).append((time.perf_counter() - t0) * 1e3)
            assert not r.claims[uid].error, r.claims[uid].error
        print(f"NodePrepareResources of a share, the first of each GPU (its MPS daemon started, the stand-in): "
              f"p50 {statistics.median(first):.2f} ms, max {max(first):.2f} ms")
        print(f"NodePrepareResources of a share, {len(later)} more (the GPU's daemon up; the client's CDI spec): "
              f"p50 {statistics.median(later):.2f} ms, p99 {pct(later, 0.99):.2f} ms")
        for i in range(a.claims):
            unprepare(pb.NodeUnprepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid=f"s{i}", name=f"cs{i}")]),
                      timeout=10)
        rounds = []
        for gpu in range(8):
            seen = len(api.requests)
            t0 = time.perf_counter()
            subprocess.run([a.gpulet, "sim", "xid", str(gpu), "79"], check=True, env=env, capture_output=True)
            wait(lambda: any(m == "PATCH" and "resourceslices" in p for m, p, _ in api.requests[seen:]))
            rounds.append((time.perf_counter() - t0) * 1e3)
        print(f"ResourceSlice publish after an XID (incl. the gpulet sim process), 8 faults: "
              f"median {statistics.median(rounds):.1f} ms, max {max(rounds):.1f} ms")
        print(f"agent RSS with --dra all: {rss_kib(proc.pid) / 1024:.1f} MiB")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        mig_claims(a, api, pb, tmp, env, root, kubeconfig)
        # The same node served by the device plugin instead.
        kb = load_stubs(tmp / "dp-stubs")
        k = FakeKubelet(tmp / "kubelet", *kb)
        k.start()
        proc = start(a.gpulet, tmp, env, "--node-name", "n1", "--kubeconfig", kubeconfig, "--labels", "api")
        k.wait_registrations(1, timeout=30)
        time.sleep(1)
        wait(lambda: api.labels().get("nvidia.com/gpu.count") == "8")
        print(f"agent RSS with --dra off (device plugin, labels and fault report on the API): "
              f"{rss_kib(proc.pid) / 1024:.1f} MiB")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        k.stop()
        api.stop()


def mig_claims(a, api, pb, tmp, env, root, kubeconfig):
    """--dra-mig on every GPU of an 8-GPU node in MIG mode: the pool's
    slices, then MIG claims made and destroyed one after another."""
    api.slices.clear()
    proc = start(a.gpulet, tmp, env, "--dra", "all", "--dra-mig", "*", "--node-name", "n1",
                 "--nvidia-driver-root", str(root), "--kubeconfig", kubeconfig, "--labels", "none",
                 "--fault-report", "none", simulate="h100-mig-empty")
    wait(lambda: len(api.slices) == 10)
    sizes = {n: len(json.dumps(s, separators=(",", ":"))) for n, s in api.slices.items()}
    devices = sum(len(s["spec"].get("devices", [])) for s in api.slices.values())
    largest = max(sizes, key=sizes.get)
    print(f"ResourceSlices of an 8-GPU MIG node (--dra-mig '*'): {len(sizes)} slices, {devices} devices, "
          f"{sum(sizes.values())} bytes in all (JSON as applied); the largest {largest}: {sizes[largest]} bytes, "
          f"{len(api.slices[largest]['spec'].get('devices', []))} devices")
    sock = f"unix://{tmp}/kubelet/plugins/gpu.nvidia.com/dra.sock"
    # Its own subchannel: the first agent's connection to this path is gone.
    with grpc.insecure_channel(sock, options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
        prepare = ch.unary_unary(DRA + "NodePrepareResources", request_serializer=lambda m: m.SerializeToString(),
                                 response_deserializer=pb.NodePrepareResourcesResponse.FromString)
        unprepare = ch.unary_unary(DRA + "NodeUnprepareResources",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=pb.NodeUnprepareResourcesResponse.FromString)
        made = []
        for i in range(a.claims):
            uid = f"m{i}"
            api.claims[("ns", f"cm{i}")] = {
                "kind": "ResourceClaim", "metadata": {"name": f"cm{i}", "namespace": "ns", "uid": uid},
                "status": {"allocation": {"devices": {"results": [
                    {"request": "mig", "driver": "gpu.nvidia.com", "pool": "n1",
                     "device": f"gpu-{i % 8}-mig-1g10gb-19-{i // 8 % 7}"}]}}}}
            req = pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid=uid, name=f"cm{i}")])
            t0 = time.perf_counter()
            r = prepare(req, timeout=30)
            made.append((time.perf_counter() - t0) * 1e3)
            assert not r.claims[uid].error, r.claims[uid].error
            unprepare(pb.NodeUnprepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid=uid, name=f"cm{i}")]),
                      timeout=10)
    print(f"NodePrepareResources of a MIG claim, {a.claims} claims (its 1g.10gb made on the GPU's lane, the CDI "
          f"spec rewritten; each destroyed at its unprepare): p50 {statistics.median(made):.2f} ms, "
          f"p99 {pct(made, 0.99):.2f} ms")
    print(f"agent RSS with --dra-mig '*': {rss_kib(proc.pid) / 1024:.1f} MiB")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


if __name__ == "__main__":
    main()
