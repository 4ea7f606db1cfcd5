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
usage: bench/dra_cluster_bench.py [--pods 20] [--kit ../shared/k8s-v1] [--gpulet build/gpulet]"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=20)
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
