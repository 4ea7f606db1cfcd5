#!/usr/bin/python3
"""Each kind of work on its own executor (issue 51): Allocate, /metrics
(the right password, remembered) and a DRA prepare of a plain claim, p50
and p99, with the agent idle; while wrong passwords hit /metrics 100 times
a second (bcrypt, cost 10, on the password thread, 32 waiting at most); and while nvidia-smi
hangs on every GPU that sets a time slice (the stand-in driver's holds:
each run ends at gpulet's 10 s limit, and is asked again at once).

One agent: DRA on GPUs 0-4 (--dra-gpus; claims on 0-3 set a Long time
slice, GPU 4's plain claim is prepared and unprepared in a loop, each
writing the checkpoint), the device plugin on GPUs 5-7, metrics every
200 ms behind basic auth; the kubelet's and the API server's stand-ins
(tests/integration/).
usage: bench/executors.py [--seconds 20] [--gpulet build-release/gpulet]"""
import argparse
import crypt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from base64 import b64encode
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from dra_bench import AGENTS, DRA, dra_pb, pct  # noqa: E402 (its atexit stops AGENTS)
from fakeapi import FakeAPI  # noqa: E402
from kubelet import FakeKubelet, load_stubs  # noqa: E402

import grpc  # noqa: E402

HELD = [0, 1, 2, 3]


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def claim(uid, gpu, interval=None):
    c = {"kind": "ResourceClaim", "metadata": {"name": f"c-{uid}", "namespace": "ns", "uid": uid},
         "status": {"allocation": {"devices": {"results": [
             {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": f"gpu-{gpu}"}]}}}}
    if interval:
        c["status"]["allocation"]["devices"]["config"] = [{
            "source": "FromClaim", "opaque": {"driver": "gpu.nvidia.com", "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}}}}}]
    return c


def uuids_of(listed):
    return [g["uuid"] for g in json.loads(listed)["gpus"]]


def auth(password):
    return "Basic " + b64encode(f"prom:{password}".encode()).decode()


def run(gpulet, tmp, load, seconds, kpb):
    """One agent under one load; returns {what: [ms, ...]}."""
    api = FakeAPI("n1")
    pb = dra_pb(tmp / "stubs")
    kubelet = FakeKubelet(tmp / "kubelet", *kpb)
    kubelet.start()
    port = free_port()
    env = dict(os.environ, GPULET_SIM_CONTROL=str(tmp / "sim.sock"), GPULET_CDI_SPEC_DIR=str(tmp / "cdi"),
               GPULET_SIM_LIB=str(Path(gpulet).parent / "libgpulet-nvml-sim.so"))
    root = tmp / "driver"
    subprocess.run([gpulet, "sim", "driver-root", str(root)], check=True, env=env, capture_output=True)
    ts = root / "var" / "lib" / "gpulet-sim" / "timeslice"
    ts.mkdir(parents=True, exist_ok=True)
    (tmp / "web.yml").write_text("basic_auth_users:\n  prom: " +
                                 crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=2 ** 10)) + "\n")
    for g in HELD:
        api.claims[("ns", f"c-long{g}")] = claim(f"long{g}", g, "Long")
    api.claims[("ns", "c-plain")] = claim("plain", 4)
    log = open(tmp / "agent.log", "w")
    AGENTS.append(subprocess.Popen(
        [gpulet, "agent", "--simulate", "dgx-h100", "--dra", "all", "--dra-gpus", "0,1,2,3,4",
         "--kubelet-root", str(tmp / "kubelet"), "--status-socket", str(tmp / "status.sock"),
         "--kubeconfig", str(api.kubeconfig(tmp / "kc")), "--node-name", "n1", "--labels", "none",
         "--fault-report", "none", "--metrics-listen", f"127.0.0.1:{port}", "--metrics-interval-ms", "200",
         "--web-config-file", str(tmp / "web.yml"), "--nvidia-driver-root", str(root),
         "--hang-seconds", "60"],
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
    url = f"http://127.0.0.1:{port}/metrics"
    urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": auth("s3cret")}),
                           timeout=30).read()  # remembered from here on
    times = {"Allocate": [], "/metrics": [], "NodePrepareResources": []}
    lag = []  # the loop's own lag, ms: the worst of each 10 s window, as /metrics says it
    counts = {"wrong password: 401": 0, "wrong password: 503": 0, "time slices that ran out": 0}
    stop = time.monotonic() + seconds

    def plain():
        c = [pb.Claim(namespace="ns", uid="plain", name="c-plain")]
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            r = prepare(pb.NodePrepareResourcesRequest(claims=c), timeout=60)
            times["NodePrepareResources"].append((time.perf_counter() - t0) * 1e3)
            assert not r.claims["plain"].error, r.claims["plain"].error
            unprepare(pb.NodeUnprepareResourcesRequest(claims=c), timeout=60)

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
        req = urllib.request.Request(url, headers={"Authorization": auth("s3cret")})
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            body = urllib.request.urlopen(req, timeout=30).read().decode()
            times["/metrics"].append((time.perf_counter() - t0) * 1e3)
            for line in body.splitlines():
                if line.startswith("gpulet_loop_lag_seconds "):
                    lag.append(float(line.split()[1]) * 1e3)
            time.sleep(0.05)

    def wrong():  # forty of these, each at most 10 a second: about 100 a second in all
                  # (32 wait for the password thread; the rest are answered 503 at once)
        req = urllib.request.Request(url, headers={"Authorization": auth("guess")})
        while time.monotonic() < stop:
            t0 = time.monotonic()
            try:
                urllib.request.urlopen(req, timeout=30).read()
            except urllib.error.HTTPError as e:
                counts[f"wrong password: {e.code}"] = counts.get(f"wrong password: {e.code}", 0) + 1
            time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))

    def held(g):
        c = [pb.Claim(namespace="ns", uid=f"long{g}", name=f"c-long{g}")]
        while time.monotonic() < stop:
            r = prepare(pb.NodePrepareResourcesRequest(claims=c), timeout=60)
            counts["time slices that ran out"] += "did not finish" in r.claims[f"long{g}"].error

    work = [plain, allocates, scrapes]
    if load == "wrong passwords":
        work += [wrong] * 40
    if load == "nvidia-smi hangs":
        listed = subprocess.run([gpulet, "list", "--simulate", "dgx-h100", "-o", "json"], env=env,
                                capture_output=True, text=True, check=True).stdout
        uuids = uuids_of(listed)
        for g in HELD:
            (ts / f"hold-{uuids[g]}").touch()  # the stand-in nvidia-smi waits while it exists
        work += [lambda g=g: held(g) for g in HELD]
    threads = [threading.Thread(target=f) for f in work]
    for t in threads:
        t.start()
    for t in threads[:3]:
        t.join()
    for f in ts.glob("hold-*"):
        f.unlink()
    for t in threads[3:]:
        t.join()
    channel.close()
    dch.close()
    AGENTS[-1].terminate()
    AGENTS[-1].wait(timeout=30)
    kubelet.stop()
    api.stop()
    if lag:
        counts["the loop's lag at worst (ms)"] = round(max(lag), 2)
    return times, {k: v for k, v in counts.items() if v}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--gpulet", default=str(ROOT / "build-release" / "gpulet"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        kpb = load_stubs(tmp / "kstubs")
        print(f"{a.gpulet}, {a.seconds:.0f} s each")
        print("| load | what | n | p50 ms | p99 ms |")
        print("|---|---|---|---|---|")
        for load in ("idle", "wrong passwords", "nvidia-smi hangs"):
            d = tmp / load.replace(" ", "-")
            d.mkdir()
            times, counts = run(a.gpulet, d, load, a.seconds, kpb)
            for what, v in times.items():
                if v:
                    print(f"| {load} | {what} | {len(v)} | {statistics.median(v):.2f} | {pct(v, 0.99):.2f} |",
                          flush=True)
            if counts:
                print(f"| {load} | {', '.join(f'{k} {v}' for k, v in counts.items())} | | | |", flush=True)


if __name__ == "__main__":
    main()
