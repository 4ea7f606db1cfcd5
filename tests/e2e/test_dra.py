"""gpulet as a DRA driver on a real Kubernetes: 1.36 (../shared/k8s-v1,
resource.k8s.io/v1) by default, 1.32 (../shared/k8s-next, v1beta1) for the
older path, the same tests with the claims in each version's shape: its
ResourceSlice lists the simulated GPUs with NVIDIA's attributes, a pod
whose claim selects a GPU by productName runs and sees its device through
gpulet's CDI spec, a claim that matches nothing stays Pending with the
scheduler's reason, a GPU fault taints the device (takes it out of the
slice on 1.32), a
restarted gpulet keeps the running pod and unprepares its claim later, the
device plugin serves the GPUs DRA does not (--dra-gpus), each GPU through
one API only (and through cdi-cri, which needs a kubelet of 1.28 or later), and two pods sharing one claim with NVIDIA's GpuConfig for
MPS both run on its GPU through the claim's own MPS daemon, with their pod
labels in metrics.

scripts/test.sh runs the DRA files in a pytest run of their own (the main
end-to-end run's gpulet serves the node's nvidia.com/gpu), on each kit."""
import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import GPULET
import drakit
from drakit import attributes, driver_fixture, request, slice_devices, wait_devices

VERSION = "580.159.04"
H100 = "NVIDIA H100 80GB HBM3"
DRA_GPUS = "0,1,2,3,4,5"                             # the device plugin serves GPUs 6 and 7


@pytest.fixture(scope="module")
def driver(cluster):
    # The device plugin's GPUs through the CRI's CDI field, which only a
    # kubelet of 1.28 or later fills in.
    yield from driver_fixture(cluster, "dra", "dgx-h100", "--dra-gpus", DRA_GPUS,
                              "--device-list-strategy", "cdi-cri")


def claim_pod(cluster, driver, name, expression, command):
    """A pod whose one container asks for one GPU through a claim template."""
    drakit.claim_pod(cluster, driver.version, name,
                     request(driver.version, "gpu", "gpu.nvidia.com", [expression]), command)


def test_slice_lists_the_gpus(cluster, driver):
    devs = wait_devices(cluster, 6)
    names = sorted(d["name"] for d in devs)
    assert names == [f"gpu-{i}" for i in range(6)]
    attrs = attributes(devs[0])
    assert attrs["productName"] == {"string": H100}
    assert attrs["type"] == {"string": "gpu"}
    assert attrs["architecture"] == {"string": "Hopper"}
    assert attrs["cudaComputeCapability"] == {"version": "9.0.0"}
    assert attrs["driverVersion"] == {"version": "580.159.4"}
    assert attrs["uuid"]["string"].startswith("GPU-")
    assert attrs["brand"] == {"string": "Nvidia"} and attrs["index"] == {"int": 0}
    assert attrs["resource.kubernetes.io/pciBusID"]["string"].startswith("0000:")
    assert devs[0].get("basic", devs[0])["capacity"]["memory"]["value"] == "81559Mi"
    s = next(s for s in cluster.get("resourceslices")["items"] if s["spec"]["driver"] == "gpu.nvidia.com")
    assert s["apiVersion"] == f"resource.k8s.io/{driver.version}"
    # Owned by the Node, so it goes with it.
    assert s["metadata"]["ownerReferences"][0]["kind"] == "Node"


def test_device_plugin_serves_the_rest(cluster, driver):
    """GPUs 6 and 7 through the device plugin, the other six through DRA;
    the device plugin's through cdi-cri: the kubelet hands the CDI device
    to containerd, which edits the container from gpulet's spec."""
    cluster.wait_gpus("2")
    assert "DRA serves 6 of 8 GPUs" in driver.log()
    cluster.pod("dp-gpu", 1, command="ls /dev; env; echo done")
    cluster.wait_phase("dp-gpu", "Succeeded")
    out = cluster.kubectl("logs", "dp-gpu")
    assert ("nvidia6" in out.split()) != ("nvidia7" in out.split()), out
    assert "nvidiactl" in out.split() and "NVIDIA_VISIBLE_DEVICES=void" in out, out  # the spec's edits
    cluster.kubectl("delete", "pod", "dp-gpu", "--wait=false")


def test_claim_by_product_runs(cluster, driver):
    wait_devices(cluster, 6)
    claim_pod(cluster, driver, "dra-h100", f"device.attributes['gpu.nvidia.com'].productName == '{H100}'",
              "ls /dev; env; echo done")
    cluster.wait_phase("dra-h100", "Succeeded")
    out = cluster.kubectl("logs", "dra-h100")
    nodes = [w for w in out.split() if w.startswith("nvidia") and w[6:].isdigit()]
    assert len(nodes) == 1 and "nvidiactl" in out, out
    assert nodes[0] not in ("nvidia6", "nvidia7"), out  # the device plugin's
    assert "NVIDIA_VISIBLE_DEVICES=void" in out and "done" in out, out
    # The claim generated for the pod goes with it; gpulet's log names it.
    driver.wait_log("DRA: prepared claim default/dra-h100-gpu")
    assert "): 1 device(s)" in driver.log()
    cluster.kubectl("delete", "pod", "dra-h100", "--wait=true", "--timeout=60s")
    driver.wait_log("DRA: unprepared claim default/")
    # The kubelet's grpc-go closes its connections with a GOAWAY: no warning.
    assert "invalid frame" not in driver.log(), driver.log()[-3000:]


def test_claim_matching_nothing_stays_pending(cluster, driver):
    claim_pod(cluster, driver, "dra-none", "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B300'",
              "true")
    deadline = time.monotonic() + 60
    while True:
        events = cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=dra-none",
                                 "-o", "json")
        reasons = [(e["reason"], e["message"]) for e in json.loads(events)["items"]]
        if any(r == "FailedScheduling" for r, _ in reasons):
            break
        assert time.monotonic() < deadline, reasons
        time.sleep(1)
    assert cluster.get("pod", "dra-none")["status"]["phase"] == "Pending"
    msg = next(m for r, m in reasons if r == "FailedScheduling")
    assert "cannot allocate all claims" in msg or "claim" in msg, msg
    cluster.kubectl("delete", "pod", "dra-none", "--wait=false")


def test_fault_updates_the_slice(cluster, driver):
    """A fault taints the device where the API has device taints (1.34+,
    test_dra_health.py has the rest), and takes it out of the slice on 1.32."""
    wait_devices(cluster, 6)
    p = subprocess.run([GPULET, "sim", "xid", "5", "79"], capture_output=True, text=True,
                       env=driver.env, timeout=10)
    assert p.returncode == 0, p.stderr
    if driver.version == "v1beta1":
        devs = wait_devices(cluster, 5)
        assert "gpu-5" not in [d["name"] for d in devs]
        return
    deadline = time.monotonic() + 30
    while not next(d for d in slice_devices(cluster) if d["name"] == "gpu-5").get("taints"):
        assert time.monotonic() < deadline, slice_devices(cluster)
        time.sleep(0.2)
    assert len(slice_devices(cluster)) == 6


def test_restart_keeps_the_pod(cluster, driver):
    """A pod keeps running across a gpulet restart; the restarted gpulet,
    from its checkpoint, unprepares the claim when the pod goes."""
    claim_pod(cluster, driver, "dra-long", "device.driver == 'gpu.nvidia.com'", "sleep 3600")
    cluster.wait_phase("dra-long", "Running")
    driver.wait_log("DRA: prepared claim default/dra-long")
    driver.stop()
    driver.start()
    driver.wait_log("prepared claim(s) from", timeout=60)
    time.sleep(2)
    assert cluster.get("pod", "dra-long")["status"]["phase"] == "Running"
    # The kubelet wipes the driver's slice when the old socket goes, maybe
    # after the new gpulet applied it: gpulet watches it and applies it again.
    wait_devices(cluster, 6)
    cluster.kubectl("delete", "pod", "dra-long", "--wait=true", "--timeout=60s")
    driver.wait_log("DRA: unprepared claim default/dra-long")


def test_shared_claim_with_mps(cluster, driver):
    """One ResourceClaim, asked for with NVIDIA's GpuConfig (MPS), held by
    two pods: both run on its one GPU through the claim's MPS daemon, and
    metrics name each pod's container as a sharer of that GPU."""
    deadline = time.monotonic() + 60
    while not slice_devices(cluster):  # GPU 5 is back or not: the restart above reset the simulator
        assert time.monotonic() < deadline, (cluster.get("resourceslices"), driver.log()[-3000:])
        time.sleep(0.5)
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": f"resource.k8s.io/{driver.version}", "kind": "ResourceClaim",
        "metadata": {"name": "shared-mps"},
        "spec": {"devices": {
            "requests": [request(driver.version, "gpu", "gpu.nvidia.com")],
            "config": [{"requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50,
                                                             "defaultPinnedDeviceMemoryLimit": "10Gi"}}}}}]}}}))
    for name in ("mps-a", "mps-b"):
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared-mps"}],
                     "containers": [{"name": "work", "image": cluster.env["K8S_BUSYBOX_IMAGE"],
                                     "command": ["sh", "-c", "ls /dev /tmp/nvidia-mps; env; echo done; sleep 3600"],
                                     "resources": {"claims": [{"name": "gpu"}]}}]}}))
    try:
        outs = []
        for name in ("mps-a", "mps-b"):
            cluster.wait_phase(name, "Running")
            deadline = time.monotonic() + 30
            while "done" not in (out := cluster.kubectl("logs", name)):
                assert time.monotonic() < deadline, out
                time.sleep(0.5)
            outs.append(out)
        nodes = [sorted(w for w in o.split() if w.startswith("nvidia") and w[6:].isdigit()) for o in outs]
        assert len(nodes[0]) == 1 and nodes[0] == nodes[1], outs  # one GPU, the same
        for out in outs:
            assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in out, out
            assert "nvidia-cuda-mps-control.pid" in out, out  # the claim's daemon's pipe directory
        driver.wait_log("DRA: prepared claim default/shared-mps")
        assert "1 device(s), MPS" in driver.log()
        uid = cluster.get("resourceclaim", "shared-mps")["metadata"]["uid"]
        commands = (Path(cluster.base) / "mps" / f"claim-{uid}" / "log" / "commands.log").read_text()
        assert "set_default_active_thread_percentage 50" in commands, commands
        assert "set_default_device_pinned_mem_limit 0 10240M" in commands, commands
        deadline = time.monotonic() + 60
        while True:
            text = urllib.request.urlopen(f"http://{driver.metrics}/metrics", timeout=10).read().decode()
            sharers = sorted(line.split('pod="')[1].split('"')[0] for line in text.splitlines()
                             if line.startswith("gpulet_gpu_allocation{") and 'container="work"' in line)
            if sharers == ["mps-a", "mps-b"]:
                break
            assert time.monotonic() < deadline, text[-3000:]
            time.sleep(1)
    finally:
        cluster.kubectl("delete", "pod", "mps-a", "mps-b", "--wait=true", "--timeout=60s")
        cluster.kubectl("delete", "resourceclaim", "shared-mps", "--wait=true", "--timeout=60s")
    driver.wait_log("DRA: unprepared claim default/shared-mps")
    deadline = time.monotonic() + 30
    while (Path(cluster.base) / "mps" / f"claim-{uid}").exists():
        assert time.monotonic() < deadline, "the claim's MPS directory stays"
        time.sleep(0.5)
