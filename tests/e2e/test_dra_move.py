"""A node moved from the device plugin to DRA with its pods kept
(docs/dra.md): gpulet restarted with --dra all keeps offering every GPU but
the ones that pods of the device plugin still hold, which stay in the slice
tainted gpulet.io/device-plugin (NoSchedule) until those pods end; the
running pod keeps running, a new claim gets another GPU, and one that asks
for the held GPU waits until it is free. Kubernetes 1.34+ (device taints):
skipped on 1.32, where held GPUs leave the slice instead."""

import pytest

import drakit
from drakit import (CDI_DIR, Driver, api_version, deviceclasses, remove_cdi_specs, request, slice_devices,
                    wait, wait_devices)


def taints(cluster, name):
    dev = next(d for d in slice_devices(cluster) or [] if d["name"] == name)
    return [t["key"] for t in dev.get("taints", [])]


def gpu_of(cluster, pod):
    out = wait(f"{pod}'s devices", lambda: "done" in (o := cluster.kubectl("logs", pod)) and o)
    [gpu] = [w[6:] for w in out.split() if w.startswith("nvidia") and w[6:].isdigit()]
    return int(gpu)


def claim_pod(cluster, name, expression):
    drakit.claim_pod(cluster, "v1", name, request("v1", "gpu", "gpu.nvidia.com", [expression]),
                     "ls /dev; echo done; sleep 3600")


def test_move_keeps_running_pods(cluster):
    if api_version(cluster) != "v1":
        pytest.skip("device taints need resource.k8s.io/v1 (Kubernetes 1.34+)")
    made = not CDI_DIR.exists()
    d = Driver(cluster, "move", "dgx-h100", "--device-list-strategy", "cdi-cri")
    d.version = "v1"
    try:
        # Before: the node's GPUs through the device plugin, one in use.
        d.start(dra="off")
        cluster.wait_gpus("8")
        cluster.pod("move-old", 1, command="ls /dev; echo done; sleep 3600")
        cluster.wait_phase("move-old", "Running")
        held = gpu_of(cluster, "move-old")
        # The move: the same gpulet, --dra all.
        d.stop()
        cluster.kubectl("apply", "-f", str(deviceclasses("v1")))
        d.start()
        d.wait_log("DRA: registered gpu.nvidia.com with the kubelet")
        wait_devices(cluster, 8)
        wait(lambda: f"gpu-{held} not tainted: {slice_devices(cluster)}",
             lambda: taints(cluster, f"gpu-{held}") == ["gpulet.io/device-plugin"])
        assert all(not taints(cluster, f"gpu-{i}") for i in range(8) if i != held)
        d.wait_log("still held by pods of the device plugin (default/move-old first)")
        # The old pod runs on; a new claim gets another GPU; one for the
        # held GPU waits for it.
        claim_pod(cluster, "move-new", "device.driver == 'gpu.nvidia.com'")
        claim_pod(cluster, "move-same", f"device.attributes['gpu.nvidia.com'].index == {held}")
        cluster.wait_phase("move-new", "Running")
        assert gpu_of(cluster, "move-new") != held
        assert cluster.get("pod", "move-old")["status"]["phase"] == "Running"
        # Once the kubelet says the device plugin is gone (allocatable 0,
        # its node status period later), a pod that asks for nvidia.com/gpu
        # gets a GPU through DRA (the DeviceClass's extendedResourceName),
        # not the held one.
        alloc = lambda: cluster.get("node", cluster.node)["status"]["allocatable"].get("nvidia.com/gpu")
        wait(lambda: f"allocatable nvidia.com/gpu {alloc()}", lambda: alloc() in ("0", None), timeout=60)
        cluster.pod("move-ext", 1, command="ls /dev; echo done; sleep 3600")
        cluster.wait_phase("move-ext", "Running")
        assert gpu_of(cluster, "move-ext") not in (held, gpu_of(cluster, "move-new"))
        assert cluster.get("pod", "move-ext")["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        assert cluster.get("pod", "move-same")["status"]["phase"] == "Pending"
        # The old pod ends: the taint goes, the waiting claim gets the GPU.
        cluster.kubectl("delete", "pod", "move-old", "--wait=true", "--timeout=60s")
        wait("the taint lifted", lambda: not taints(cluster, f"gpu-{held}"), timeout=30)
        d.wait_log("no pod of the device plugin holds a GPU any more")
        cluster.wait_phase("move-same", "Running")
        assert gpu_of(cluster, "move-same") == held
    finally:
        cluster.kubectl("delete", "pod", "move-old", "move-new", "move-same", "move-ext", "--wait=true",
                        "--timeout=60s", "--ignore-not-found", check=False)
        if d.proc and d.proc.poll() is None:
            d.stop()
        remove_cdi_specs(made)
