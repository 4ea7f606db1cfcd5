"""GPU faults through DRA on Kubernetes 1.36 (../shared/k8s-v1): a fault
taints the device in gpulet's ResourceSlice (KEP-5055) as it happens; a
claim that does not tolerate the taint stays Pending with the scheduler's
reason, one that tolerates it runs; a fault that --dra-evict-on lists is
NoExecute and evicts the pod using the device; the kubelet shows the
device's health in the pod's allocatedResourcesStatus through gpulet's
NodeWatchResources stream (KEP-4680); recovery lifts the taint; the Node's
condition tells the same fault at the same time. And a pod that asks for
`nvidia.com/gpu: 1` runs through DRA (KEP-5004), on a node whose GPUs DRA
serves whole.

Needs device taints and extended resources through DRA: skipped on 1.32."""
import json
import subprocess
import time

import pytest

from conftest import GPULET
import drakit
from drakit import driver_fixture_v1, request, scheduling_failure, slice_devices, wait, wait_devices

TOLERATE = [{"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "gpu.nvidia.com/gpu-lost", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture(scope="module")
def driver(cluster):
    yield from driver_fixture_v1(cluster, "health", "dgx-h100", "--dra-evict-on", "94",
                                 "--fault-report", "auto", needs="device taints and DRA extended resources")


def device(cluster, name):
    return next(d for d in slice_devices(cluster) or [] if d["name"] == name)


def taints(cluster, name):
    return [(t["key"], t.get("value"), t["effect"]) for t in device(cluster, name).get("taints", [])]


def claim_pod(cluster, name, index, tolerations=None, command="echo done; sleep 3600"):
    """A pod on GPU index (by its index attribute) through a claim template."""
    req = request("v1", "gpu", "gpu.nvidia.com", [f"device.attributes['gpu.nvidia.com'].index == {index}"],
                  **({"tolerations": tolerations} if tolerations else {}))
    drakit.claim_pod(cluster, "v1", name, req, command)


def device_health(cluster, pod):
    """{resourceID: health} of the pod's first container's allocated devices."""
    st = cluster.get("pod", pod)["status"].get("containerStatuses", [{}])[0]
    return {r["resourceID"]: r.get("health") for s in st.get("allocatedResourcesStatus", [])
            for r in s.get("resources", [])}


def delete(cluster, *pods):
    cluster.kubectl("delete", "pod", *pods, "--wait=true", "--timeout=60s", "--ignore-not-found")


def test_fault_taints_and_recovers(cluster, driver):
    wait_devices(cluster, 8)
    claim_pod(cluster, "h-victim", 3)
    cluster.wait_phase("h-victim", "Running")
    wait("the device's health in the pod's status",
         lambda: list(device_health(cluster, "h-victim").values()) == ["Healthy"], timeout=90)
    [rid] = device_health(cluster, "h-victim")
    # The kubelet names a DRA device by its CDI device: gpulet's, by the GPU's UUID.
    assert rid == "nvidia.com/gpu=" + device(cluster, "gpu-3")["attributes"]["uuid"]["string"], rid
    # XID 79: the device stays in the slice, tainted as it happens (3 s: each
    # look is a kubectl on a loaded 2-core machine; there is no periodic resync).
    begun = time.monotonic()
    subprocess.run([GPULET, "sim", "xid", "3", "79"], check=True, env=driver.env, timeout=10)
    wait("gpu-3 tainted", lambda: taints(cluster, "gpu-3"), every=0.02)
    took = time.monotonic() - begun
    assert took < 3.0, took
    assert taints(cluster, "gpu-3") == [("gpu.nvidia.com/xid", "79", "NoSchedule"),
                                        ("gpu.nvidia.com/gpu-lost", None, "NoSchedule")]
    assert len(slice_devices(cluster)) == 8
    # The pod's status says it, with the cause (no eviction: NoSchedule).
    wait("Unhealthy in the pod's status", lambda: device_health(cluster, "h-victim")[rid] == "Unhealthy")
    assert cluster.get("pod", "h-victim")["status"]["phase"] == "Running"
    # The Node's condition: the same fault, the same time as the taint's.
    cond = wait("the condition", lambda: next((c for c in cluster.get("node", cluster.node)["status"]["conditions"]
                                              if c["type"] == "GPUUnhealthy" and c["status"] == "True"), None))
    assert cond["reason"] == "XID79", cond
    assert cond["lastTransitionTime"] == device(cluster, "gpu-3")["taints"][0]["timeAdded"]
    # A free GPU with the same fault: a new claim for it stays Pending with
    # the scheduler's reason; one that tolerates the taints runs on it.
    subprocess.run([GPULET, "sim", "xid", "4", "79"], check=True, env=driver.env, timeout=10)
    wait("gpu-4 tainted", lambda: taints(cluster, "gpu-4"))
    claim_pod(cluster, "h-intolerant", 4)
    claim_pod(cluster, "h-tolerant", 4, TOLERATE, command="ls /dev; echo done; sleep 3600")
    cluster.wait_phase("h-tolerant", "Running")
    wait("done", lambda: "done" in cluster.kubectl("logs", "h-tolerant"))
    assert "nvidia4" in cluster.kubectl("logs", "h-tolerant").split()
    msg = wait("FailedScheduling", lambda: scheduling_failure(cluster, "h-intolerant"))
    assert cluster.get("pod", "h-intolerant")["status"]["phase"] == "Pending"
    print("scheduler:", msg)
    assert "cannot allocate all claims" in msg or "taint" in msg, msg
    delete(cluster, "h-tolerant")
    # Recovery (an operator's clear) lifts the taints; the pod's status
    # turns Healthy, and the waiting pod runs.
    for gpu in ("3", "4"):  # a reset (the simulator's XID 79 loses the GPU), then the clear
        subprocess.run([GPULET, "sim", "recover", gpu], check=True, env=driver.env, timeout=10)
        subprocess.run([GPULET, "health", "clear", gpu, "--status-socket",
                        f"{cluster.base}/gpulet-{driver.name}.sock"], check=True, timeout=10)
    wait("gpu-3 untainted", lambda: not taints(cluster, "gpu-3") and not taints(cluster, "gpu-4"))
    wait("Healthy again", lambda: device_health(cluster, "h-victim")[rid] == "Healthy")
    cluster.wait_phase("h-intolerant", "Running")
    delete(cluster, "h-victim", "h-intolerant")


def test_noexecute_evicts(cluster, driver):
    """--dra-evict-on 94: an XID 94 taints NoExecute, and the eviction
    controller deletes the pod that uses the device."""
    wait_devices(cluster, 8)
    claim_pod(cluster, "h-evicted", 5)
    cluster.wait_phase("h-evicted", "Running")
    uid = cluster.get("pod", "h-evicted")["metadata"]["uid"]
    subprocess.run([GPULET, "sim", "xid", "5", "94"], check=True, env=driver.env, timeout=10)
    wait("gpu-5 NoExecute", lambda: taints(cluster, "gpu-5") == [("gpu.nvidia.com/xid", "94", "NoExecute")])

    def gone():
        p = subprocess.run(["kubectl", "get", "pod", "h-evicted", "-o", "json"], capture_output=True,
                           text=True, env=cluster.env, timeout=30)
        return p.returncode != 0 or json.loads(p.stdout)["metadata"]["uid"] != uid or \
            json.loads(p.stdout)["metadata"].get("deletionTimestamp")
    wait("the pod evicted", gone, timeout=90, every=0.5)
    subprocess.run([GPULET, "health", "clear", "5", "--status-socket",
                    f"{cluster.base}/gpulet-{driver.name}.sock"], check=True, timeout=10)
    wait("gpu-5 untainted", lambda: not taints(cluster, "gpu-5"))
    delete(cluster, "h-evicted")


def test_extended_resource_through_dra(cluster, driver):
    """NVIDIA's DeviceClass with extendedResourceName: a pod that asks for
    nvidia.com/gpu gets a GPU through a claim the scheduler made, on a node
    no device plugin serves."""
    wait_devices(cluster, 8)
    assert "nvidia.com/gpu" not in cluster.get("node", cluster.node)["status"].get("allocatable", {})
    cluster.pod("h-ext", 1, command="ls /dev; env; echo done; sleep 3600")
    cluster.wait_phase("h-ext", "Running")
    wait("done", lambda: "done" in cluster.kubectl("logs", "h-ext"))
    out = cluster.kubectl("logs", "h-ext")
    assert len([w for w in out.split() if w.startswith("nvidia") and w[6:].isdigit()]) == 1, out
    st = cluster.get("pod", "h-ext")["status"]
    claim = st["extendedResourceClaimStatus"]["resourceClaimName"]
    alloc = cluster.get("resourceclaim", claim)["status"]["allocation"]["devices"]["results"]
    assert [r["driver"] for r in alloc] == ["gpu.nvidia.com"], alloc
    driver.wait_log(f"DRA: prepared claim default/{claim}")
    delete(cluster, "h-ext")
