"""NVIDIA's DRA quickstart (k8s-dra-driver-gpu v25.12.0,
demo/specs/quickstart/{v1,v1beta1}/gpu-test1 to gpu-test6 and gpu-test-mps)
against gpulet as the DRA driver: the same namespaces, claim templates,
claims, selectors, constraints, opaque GpuConfigs, pods and Deployments,
in the shape of the version of resource.k8s.io the cluster serves, with
the kit's busybox in place of NVIDIA's CUDA images and `ls /dev; env` in
place of `nvidia-smi -L`. Written here from what those specs ask for.

The simulated node holds what the specs need at once: eight A100 40GB,
GPUs 0, 2, 4 and 6 whole (gpu-test6 selects A100s at those indexes) and
1, 3, 5 and 7 each in MIG as 3g.20gb, 2g.10gb and two 1g.5gb (gpu-test4's
four replicas each take one such set on one parent)."""
import json
import os
import time
from pathlib import Path

import pytest

from drakit import driver_fixture, request

SCENARIO = """name: quickstart
driver_version: "580.159.04"
cuda_version: "13.0"
gpus:
""" + "".join("  - {product: a100-40gb}\n" if i % 2 == 0 else
              "  - {product: a100-40gb, mig: true, mig_devices: [3g.20gb, 2g.10gb, 1g.5gb, 1g.5gb]}\n"
              for i in range(8))
WHOLE, MIG = (0, 2, 4, 6), (1, 3, 5, 7)
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
SHOW = "ls /dev; env; echo done; trap 'exit 0' TERM; sleep 9999 & wait"


def cap_minor(gpu, gi, ci=None):
    """The driver's numbering of /dev/nvidia-caps minors (no mig-minors file here)."""
    base = 3 + gpu * 135 + gi * 9
    return base if ci is None else base + 1 + ci


@pytest.fixture(scope="module")
def quick(cluster):
    base = Path(cluster.base)
    (base / "quickstart.yaml").write_text(SCENARIO)
    caps = Path(cluster.env["K8S_DEV_ROOT"]) / "dev" / "nvidia-caps"
    caps.mkdir(exist_ok=True)
    for gpu in MIG:
        for gi in range(1, 9):
            for minor in (cap_minor(gpu, gi), cap_minor(gpu, gi, 0)):
                if not (caps / f"nvidia-cap{minor}").exists():
                    os.mknod(caps / f"nvidia-cap{minor}", 0o20444, os.makedev(238, minor))
    yield from driver_fixture(cluster, "quickstart", str(base / "quickstart.yaml"),
                              "--proc-root", str(base / "quickstart-proc"))


def spec(quick, namespace, *objects):
    """The namespace and the objects, applied; the namespace goes after the test."""
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    for o in objects:
        o.setdefault("metadata", {})["namespace"] = namespace
        docs.append(o)
    quick.cluster.kubectl("apply", "-f", "-", stdin="\n".join(json.dumps(d) for d in docs))


def template(quick, name, requests, config=None, constraints=None):
    devices = {"requests": requests}
    if config:
        devices["config"] = config
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": f"resource.k8s.io/{quick.version}", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name}, "spec": {"spec": {"devices": devices}}}


def ctr(quick, name, claim, req=None):
    use = {"name": claim, **({"request": req} if req else {})}
    return {"name": name, "image": quick.cluster.env["K8S_BUSYBOX_IMAGE"], "command": ["sh", "-c"],
            "args": [SHOW], "resources": {"claims": [use]}}


def pod_spec(containers, claims):
    return {"containers": containers, "resourceClaims": claims, "tolerations": TOLERATE}


def pod(name, containers, claims):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "pod"}},
            "spec": pod_spec(containers, claims)}


def deployment(name, containers, claims):
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "pod", "labels": {"app": name}},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "pod"}},
                     "template": {"metadata": {"labels": {"app": "pod"}}, "spec": pod_spec(containers, claims)}}}


def gpuconfig(requests, sharing):
    return {"requests": requests, "opaque": {"driver": "gpu.nvidia.com", "parameters": {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing}}}


LONG = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}
MPS = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50,
                                        "defaultPinnedDeviceMemoryLimit": "10Gi"}}


def running(quick, namespace, pods, timeout=120):
    """Waits until the namespace has `pods` pods, all Running with every
    container's `done`; returns {pod: {container: [its /dev/nvidia* nodes]}}."""
    c = quick.cluster
    deadline = time.monotonic() + timeout
    while True:
        items = c.get("pods", "-n", namespace)["items"]
        if len(items) == pods and all(p["status"].get("phase") == "Running" for p in items):
            break
        if time.monotonic() > deadline:  # the whole describe: its events say why
            pytest.fail(f"{namespace}: not Running:\n" + c.kubectl("describe", "pods", "-n", namespace)[-4000:] +
                        "\n" + quick.log()[-3000:], pytrace=False)
        time.sleep(1)
    seen = {}
    for p in items:
        name = p["metadata"]["name"]
        for ct in p["spec"]["containers"]:
            while "done" not in (out := c.kubectl("logs", "-n", namespace, name, "-c", ct["name"])):
                assert time.monotonic() < deadline, out
                time.sleep(0.5)
            seen.setdefault(name, {})[ct["name"]] = sorted(
                w for w in out.split() if w.startswith("nvidia") and w[6:].isdigit())
    return seen


def cleanup(quick, namespace):
    quick.cluster.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=120s")


def uuids(quick, gpus):
    listed = json.loads(quick.cluster.kubectl("get", "resourceslices", "-o", "json"))["items"]
    devs = [d for s in listed if s["spec"]["driver"] == "gpu.nvidia.com" for d in s["spec"]["devices"]]
    by_name = {d["name"]: d.get("basic", d)["attributes"]["uuid"]["string"] for d in devs}
    return [by_name[f"gpu-{g}"] for g in gpus]


def test_gpu_test1_two_pods_two_gpus(cluster, quick):
    """Two pods, each with a claim of its own from one template: two GPUs."""
    req = [request(quick.version, "gpu", "gpu.nvidia.com")]
    claims = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    spec(quick, "gpu-test1", template(quick, "single-gpu", req),
         pod("pod1", [ctr(quick, "ctr", "gpu")], claims), pod("pod2", [ctr(quick, "ctr", "gpu")], claims))
    try:
        seen = running(quick, "gpu-test1", 2)
        got = [seen["pod1"]["ctr"], seen["pod2"]["ctr"]]
        assert all(len(g) == 1 for g in got) and got[0] != got[1], got
        assert all(int(g[0][6:]) in WHOLE for g in got), got  # gpu.nvidia.com: whole GPUs only
    finally:
        cleanup(quick, "gpu-test1")


def test_gpu_test2_two_containers_one_gpu(cluster, quick):
    """One pod, two containers sharing its one claim: the same GPU."""
    req = [request(quick.version, "gpu", "gpu.nvidia.com")]
    spec(quick, "gpu-test2", template(quick, "single-gpu", req),
         pod("pod", [ctr(quick, "ctr0", "shared-gpu"), ctr(quick, "ctr1", "shared-gpu")],
             [{"name": "shared-gpu", "resourceClaimTemplateName": "single-gpu"}]))
    try:
        seen = running(quick, "gpu-test2", 1)["pod"]
        assert len(seen["ctr0"]) == 1 and seen["ctr0"] == seen["ctr1"], seen
    finally:
        cleanup(quick, "gpu-test2")


def test_gpu_test3_two_pods_one_claim(cluster, quick):
    """One ResourceClaim, two pods: the same GPU."""
    claim = {"apiVersion": f"resource.k8s.io/{quick.version}", "kind": "ResourceClaim",
             "metadata": {"name": "single-gpu"},
             "spec": {"devices": {"requests": [request(quick.version, "gpu", "gpu.nvidia.com")]}}}
    claims = [{"name": "shared-gpu", "resourceClaimName": "single-gpu"}]
    spec(quick, "gpu-test3", claim, pod("pod1", [ctr(quick, "ctr", "shared-gpu")], claims),
         pod("pod2", [ctr(quick, "ctr", "shared-gpu")], claims))
    try:
        seen = running(quick, "gpu-test3", 2)
        assert len(seen["pod1"]["ctr"]) == 1 and seen["pod1"]["ctr"] == seen["pod2"]["ctr"], seen
    finally:
        cleanup(quick, "gpu-test3")


def test_gpu_test4_mig_devices_of_one_parent(cluster, quick):
    """Four replicas, each claiming 1g.5gb twice, 2g.10gb and 3g.20gb through
    mig.nvidia.com, all on one parent (matchAttribute parentUUID): each
    pod's four containers get four MIG devices of one GPU."""
    profile = "device.attributes['gpu.nvidia.com'].profile == '{}'"
    reqs = [request(quick.version, n, "mig.nvidia.com", [profile.format(p)])
            for n, p in (("mig-1g-5gb-0", "1g.5gb"), ("mig-1g-5gb-1", "1g.5gb"),
                         ("mig-2g-10gb", "2g.10gb"), ("mig-3g-20gb", "3g.20gb"))]
    containers = [ctr(quick, f"ctr{i}", "mig-devices", r["name"]) for i, r in enumerate(reqs)]
    spec(quick, "gpu-test4",
         template(quick, "mig-devices", reqs,
                  constraints=[{"requests": [], "matchAttribute": "gpu.nvidia.com/parentUUID"}]),
         deployment("gpu-test4-pod", containers, [{"name": "mig-devices", "resourceClaimTemplateName": "mig-devices"}]))
    try:
        seen = running(quick, "gpu-test4", 4)
        parents = sorted({tuple(c["ctr0"]) for c in seen.values()})
        assert [p[0] for p in parents] == [f"nvidia{g}" for g in MIG], seen  # each pod its own parent
        for containers in seen.values():
            assert len({tuple(v) for v in containers.values()}) == 1, containers  # one parent a pod
        claims = quick.cluster.get("resourceclaims", "-n", "gpu-test4")["items"]
        devices = sorted(r["device"] for c in claims for r in c["status"]["allocation"]["devices"]["results"])
        assert len(devices) == 16 and all("-mig-" in d for d in devices), devices
    finally:
        cleanup(quick, "gpu-test4")


def test_gpu_test5_long_time_slice_and_mps(cluster, quick):
    """One claim of two GPUs: one with the Long time slice (set for the
    claim's life, Default again after), one shared through the claim's MPS
    daemon at 50% and 10Gi; four containers, two on each."""
    reqs = [request(quick.version, "ts-gpu", "gpu.nvidia.com"),
            request(quick.version, "mps-gpu", "gpu.nvidia.com")]
    config = [gpuconfig(["ts-gpu"], LONG), gpuconfig(["mps-gpu"], MPS)]
    containers = [ctr(quick, n, "shared-gpus", r) for n, r in (
        ("ts-ctr0", "ts-gpu"), ("ts-ctr1", "ts-gpu"), ("mps-ctr0", "mps-gpu"), ("mps-ctr1", "mps-gpu"))]
    spec(quick, "gpu-test5", template(quick, "multiple-gpus", reqs, config),
         pod("pod0", containers, [{"name": "shared-gpus", "resourceClaimTemplateName": "multiple-gpus"}]))
    try:
        seen = running(quick, "gpu-test5", 1)["pod0"]
        assert seen["ts-ctr0"] == seen["ts-ctr1"] and seen["mps-ctr0"] == seen["mps-ctr1"], seen
        assert seen["ts-ctr0"] != seen["mps-ctr0"], seen
        ts = int(seen["ts-ctr0"][0][6:])
        assert quick.timeslice(uuids(quick, [ts])[0]) == 3  # Long
        uid = quick.cluster.get("resourceclaims", "-n", "gpu-test5")["items"][0]["metadata"]["uid"]
        commands = (Path(cluster.base) / "mps" / f"claim-{uid}" / "log" / "commands.log").read_text()
        assert "set_default_active_thread_percentage 50" in commands, commands
        assert "set_default_device_pinned_mem_limit 0 10240M" in commands, commands
    finally:
        cleanup(quick, "gpu-test5")
    quick.wait_log("DRA: unprepared claim gpu-test5/")
    deadline = time.monotonic() + 30
    while quick.timeslice(uuids(quick, [ts])[0]) != 0:
        assert time.monotonic() < deadline, "the time slice stays Long after the claim"
        time.sleep(0.5)


def test_gpu_test6_a100_by_index_with_long_time_slices(cluster, quick):
    """Four replicas, each claiming an A100 at index 0, 2, 4 or 6 (the
    `index` attribute NVIDIA's driver dropped but its quickstart selects
    on) with the Long time slice: the four whole A100s, each set Long."""
    expr = ("device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$') && "
            "(device.attributes['gpu.nvidia.com'].index == 0 || device.attributes['gpu.nvidia.com'].index == 2 || "
            "device.attributes['gpu.nvidia.com'].index == 4 || device.attributes['gpu.nvidia.com'].index == 6)")
    spec(quick, "gpu-test6",
         template(quick, "a100", [request(quick.version, "gpu", "gpu.nvidia.com", [expr])],
                  [gpuconfig(["gpu"], LONG)]),
         deployment("gpu-test6-pod", [ctr(quick, "ctr", "a100")], [{"name": "a100", "resourceClaimTemplateName": "a100"}]))
    try:
        seen = running(quick, "gpu-test6", 4)
        assert sorted(c["ctr"][0] for c in seen.values()) == [f"nvidia{g}" for g in WHOLE], seen
        assert [quick.timeslice(u) for u in uuids(quick, WHOLE)] == [3, 3, 3, 3]
    finally:
        cleanup(quick, "gpu-test6")


def test_gpu_test_mps(cluster, quick):
    """Two containers of one pod on one GPU through the claim's MPS daemon."""
    spec(quick, "gpu-test-mps",
         template(quick, "shared-gpu", [request(quick.version, "mps-gpu", "gpu.nvidia.com")],
                  [gpuconfig(["mps-gpu"], MPS)]),
         pod("test-pod", [ctr(quick, "mps-ctr0", "shared-gpu", "mps-gpu"),
                          ctr(quick, "mps-ctr1", "shared-gpu", "mps-gpu")],
             [{"name": "shared-gpu", "resourceClaimTemplateName": "shared-gpu"}]))
    try:
        seen = running(quick, "gpu-test-mps", 1)["test-pod"]
        assert len(seen["mps-ctr0"]) == 1 and seen["mps-ctr0"] == seen["mps-ctr1"], seen
        out = quick.cluster.kubectl("logs", "-n", "gpu-test-mps", "test-pod", "-c", "mps-ctr0")
        assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in out, out
    finally:
        cleanup(quick, "gpu-test-mps")
