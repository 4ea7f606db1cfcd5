#!/usr/bin/python3
"""Claim to container start on a real Kubernetes 1.36 (../shared/k8s-v1,
resource.k8s.io/v1; or --kit DIR, such as ../shared/k8s-next for 1.32 and
v1beta1): gpulet serves GPUs 0-5 through DRA and 6-7 through the
device plugin (as tests/e2e/test_dra.py runs it), and N pods of each kind
are started one after another, each a busybox container:
- DRA: a ResourceClaimTemplate selecting the H100 by productName, and a
  pod naming it;
- the device plugin: a pod with nvidia.com/gpu: 1.
Each is timed from just before `kubectl create` to the watch's first
phase Running (the kubectl start, about 0.1 s, is in both). gpulet's own
part of a DRA start is its prepare time, from its log ("prepared claim ...
in X ms": the claim read from the API server and mapped). Start to slice
is from starting gpulet to its log's "ResourceSlice published" (the API
server's answer to the apply). Needs root.

With --faults N (1.34+: device taints), instead: every GPU DRA's,
--fault-report auto, one pod holding gpu-3 through a claim, and N times an
XID 79 on GPU 3 (`gpulet sim`, its start included) then a reset (`gpulet
sim recover 3`) and `gpulet health clear 3`, each timed to the moment the API server's watch shows the
device's taint (and its lifting), and to the moment the pod's watch shows
its allocatedResourcesStatus Unhealthy (and Healthy); requests per fault
from gpulet's status socket (`api`), the slice, the condition and the
Event together.
usage: bench/dra_cluster_bench.py [--pods 20 | --faults 100] [--kit ../shared/k8s-v1] [--gpulet build/gpulet]"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
H100 = "NVIDIA H100 80GB HBM3"


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def time_to_running(cluster, name, objects):
    """Seconds from creating objects (the pod last) to the pod's phase Running."""
    watch = subprocess.Popen(["kubectl", "get", "pods", "-w", "--field-selector", f"metadata.name={name}",
                              "-o", "jsonpath={.status.phase}{\"\\n\"}"],
                             stdout=subprocess.PIPE, text=True, env=cluster.env)
    time.sleep(0.5)  # the watch is open
    begun = time.monotonic()
    cluster.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    try:
        for line in watch.stdout:
            if line.strip() == "Running":
                return time.monotonic() - begun
            if line.strip() in ("Failed", "Succeeded"):
                raise SystemExit(f"pod {name}: {line.strip()}: {cluster.kubectl('describe', 'pod', name)}")
        raise SystemExit(f"the watch on {name} ended")
    finally:
        watch.kill()
        watch.wait()


def pod(cluster, name, claim=None):
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": cluster.env["K8S_BUSYBOX_IMAGE"], "command": ["sleep", "3600"],
                            "resources": {"claims": [{"name": "gpu"}]} if claim else
                            {"limits": {"nvidia.com/gpu": 1}}}]}
    if claim:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": claim}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def template(version, name):
    import drakit
    return {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [drakit.request(
                version, "gpu", "gpu.nvidia.com", [f"device.attributes['gpu.nvidia.com'].productName == '{H100}'"])]}}}}


class Watch:
    """A watch of one object through `kubectl get --raw`: each event's
    object, as fn reads it, with the time it came. A LIST first, then the
    watch from its version (this kit's etcd, 3.4, cannot tell the API
    server's watch cache it is fresh, so a watch without a version can fail
    with "Too large resource version"), again whenever the API server ends
    the stream."""

    def __init__(self, cluster, path, fn):
        self.cluster, self.path, self.fn, self.seen = cluster, path, fn, []
        self.proc, self.stopped = None, False
        self.cond = threading.Condition()
        rv = self.list()
        threading.Thread(target=self.read, args=(rv,), daemon=True).start()

    def list(self):
        listed = json.loads(self.cluster.kubectl("get", "--raw", self.path))
        with self.cond:
            self.seen.append((time.monotonic(), self.fn(listed["items"][0])))
            self.cond.notify_all()
        return listed["metadata"]["resourceVersion"]

    def read(self, rv):
        while not self.stopped:
            self.proc = subprocess.Popen(["kubectl", "get", "--raw", f"{self.path}&watch=1&resourceVersion={rv}"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                         env=self.cluster.env)
            for line in self.proc.stdout:
                event = json.loads(line)
                if event.get("type") not in ("ADDED", "MODIFIED"):
                    continue
                rv = event["object"]["metadata"]["resourceVersion"]
                with self.cond:
                    self.seen.append((time.monotonic(), self.fn(event["object"])))
                    self.cond.notify_all()
            self.proc.wait()
            if not self.stopped:
                rv = self.list()

    def until(self, value, after, timeout=60):
        """The first time after `after` the object read as value."""
        with self.cond:
            deadline = time.monotonic() + timeout
            while True:
                hit = next((t for t, v in self.seen if t >= after and v == value), None)
                if hit is not None:
                    return hit
                if not self.cond.wait(deadline - time.monotonic()):
                    raise SystemExit(f"not {value!r} within {timeout} s: {self.seen[-3:]}")

    def stop(self):
        self.stopped = True
        if self.proc:
            self.proc.kill()


def api_requests(driver):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(f"{driver.cluster.base}/gpulet-{driver.name}.sock")
        s.sendall(b"api\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(re.search(r"requests (\d+)", data.decode()).group(1))


def faults(cluster, drakit, n):
    """Fault to taint and to the pod's status, n times (the docstring)."""
    fixture = drakit.driver_fixture(cluster, "bench", "dgx-h100", "--fault-report", "auto")
    try:
        driver = next(fixture)
        drakit.wait_devices(cluster, 8)
        name = "bench-fault"
        objects = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
                    "spec": {"spec": {"devices": {"requests": [drakit.request(
                        "v1", "gpu", "gpu.nvidia.com", ["device.attributes['gpu.nvidia.com'].index == 3"])]}}}},
                   pod(cluster, name, name)]
        time_to_running(cluster, name, objects)
        slice_name = f"{cluster.node}-gpu.nvidia.com"
        tainted = lambda s: bool(next((d for d in s.get("spec", {}).get("devices", []) if d["name"] == "gpu-3"),
                                      {}).get("taints"))
        health = lambda p: [r.get("health") for st in p.get("status", {}).get("containerStatuses", [])
                            for a in st.get("allocatedResourcesStatus", []) for r in a["resources"]]
        slices = Watch(cluster, f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=metadata.name={slice_name}",
                       tainted)
        pods = Watch(cluster, f"/api/v1/namespaces/default/pods?fieldSelector=metadata.name={name}", health)
        pods.until(["Healthy"], 0)
        sock = f"{cluster.base}/gpulet-{driver.name}.sock"
        taint, lift, unhealthy, healthy = [], [], [], []
        before = api_requests(driver)
        for _ in range(n):
            t0 = time.monotonic()
            subprocess.run([drakit.GPULET, "sim", "xid", "3", "79"], check=True, env=driver.env, timeout=10)
            taint.append(slices.until(True, t0) - t0)
            unhealthy.append(pods.until(["Unhealthy"], t0) - t0)
            # A reset (the simulator's XID 79 loses the GPU), then the clear.
            subprocess.run([drakit.GPULET, "sim", "recover", "3"], check=True, env=driver.env, timeout=10)
            t0 = time.monotonic()
            subprocess.run([drakit.GPULET, "health", "clear", "3", "--status-socket", sock], check=True, timeout=10)
            lift.append(slices.until(False, t0) - t0)
            healthy.append(pods.until(["Healthy"], t0) - t0)
        per = (api_requests(driver) - before) / (2 * n)
        slices.stop()
        pods.stop()
        print(f"faults: {n} (XID 79 on a claimed GPU, then a clear); resource.k8s.io/{driver.version}")
        for what, v in (("fault to taint in the API server", taint), ("clear to taint lifted", lift),
                        ("fault to the pod's status Unhealthy", unhealthy),
                        ("clear to the pod's status Healthy", healthy)):
            print(f"{what}: p50 {statistics.median(v) * 1000:.0f} ms, p99 {pct(v, 99) * 1000:.0f} ms, "
                  f"max {max(v) * 1000:.0f} ms")
        print(f"API requests per change (fault or recovery: slice, condition, Event): {per:.2f}")
        cluster.kubectl("delete", "pod", name, "--wait=true", "--timeout=60s")
    finally:
        fixture.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--faults", type=int, default=0)
    ap.add_argument("--kit", default=str(ROOT.parent / "shared" / "k8s-v1"))
    ap.add_argument("--gpulet", default=str(ROOT / "build" / "gpulet"))
    args = ap.parse_args()
    build = Path(args.gpulet).resolve().parent
    os.environ.update(GPULET_K8S=str(Path(args.kit).resolve()), GPULET_BUILD=str(build),
                      GPULET_BIN=str(Path(args.gpulet).resolve()))
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    import conftest  # noqa: E402
    import drakit  # noqa: E402
    import test_dra  # noqa: E402
    reason = conftest.why_not()
    if reason:
        raise SystemExit(f"cannot run: {reason}")
    up = subprocess.run([str(conftest.K8S / "cluster.sh"), "up", "--gpus", "8"], capture_output=True,
                        text=True, timeout=300)
    if up.returncode != 0:
        raise SystemExit(f"cluster.sh up failed:\n{up.stderr[-3000:]}")
    env = dict(os.environ)
    for line in up.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    cluster = conftest.Cluster(env)
    if args.faults:
        try:
            faults(cluster, drakit, args.faults)
        finally:
            subprocess.run([str(conftest.K8S / "cluster.sh"), "down", cluster.base], capture_output=True,
                           timeout=300)
        return
    fixture = drakit.driver_fixture(cluster, "bench", "dgx-h100", "--dra-gpus", test_dra.DRA_GPUS,
                                    "--device-list-strategy", "cdi-cri")
    begun = time.monotonic()
    try:
        driver = next(fixture)
        while "DRA: ResourceSlice published" not in driver.log():
            if time.monotonic() - begun > 60:
                raise SystemExit(f"no slice in 60 s:\n{driver.log()[-3000:]}")
            time.sleep(0.005)
        to_slice = time.monotonic() - begun
        drakit.wait_devices(cluster, 6)
        cluster.wait_gpus("2")
        dra, plugin = [], []
        for i in range(args.pods):
            dra.append(time_to_running(cluster, f"bench-dra-{i}", [template(driver.version, f"bench-dra-{i}"),
                                                                   pod(cluster, f"bench-dra-{i}", f"bench-dra-{i}")]))
            plugin.append(time_to_running(cluster, f"bench-dp-{i}", [pod(cluster, f"bench-dp-{i}")]))
            cluster.kubectl("delete", "pod", f"bench-dra-{i}", f"bench-dp-{i}", "--wait=true", "--timeout=60s")
            cluster.kubectl("delete", "resourceclaimtemplate", f"bench-dra-{i}")
        prepares = [float(m) for m in re.findall(r"prepared claim default/bench-dra-\S+ \(\S+\): 1 device\(s\), in "
                                                 r"([0-9.]+) ms", driver.log())]
        rss = next(int(line.split()[1]) for line in open(f"/proc/{driver.proc.pid}/status")
                   if line.startswith("VmRSS:"))
        print(f"resource.k8s.io/{driver.version}; start to slice published: {to_slice * 1000:.0f} ms")
        print(f"pods of each kind: {args.pods}")
        for what, v in (("DRA claim to Running", dra), ("device plugin to Running", plugin)):
            print(f"{what}: p50 {statistics.median(v) * 1000:.0f} ms, p99 {pct(v, 99) * 1000:.0f} ms, "
                  f"min {min(v) * 1000:.0f} ms")
        print(f"gpulet prepare ({len(prepares)} claims): p50 {statistics.median(prepares):.1f} ms, "
              f"p99 {pct(prepares, 99):.1f} ms")
        print(f"gpulet RSS (DRA and device plugin, metrics on): {rss / 1024:.1f} MiB")
    finally:
        fixture.close()  # stops gpulet, removes its CDI specs
        subprocess.run([str(conftest.K8S / "cluster.sh"), "down", cluster.base], capture_output=True, timeout=300)


if __name__ == "__main__":
    main()
