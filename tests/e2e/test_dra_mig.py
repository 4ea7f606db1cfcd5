"""MIG devices made per claim on Kubernetes 1.36 (../shared/k8s-v1,
partitionable devices, KEP-4815): gpulet publishes the 8 GPUs of a
simulated DGX H100 in MIG mode with no MIG device (--dra-mig '*') as a
pool of 10 slices (the API server takes all: 8 counter sets in one, 25
placements in each GPU's); a pod claiming a 1g.10gb-sized MIG device gets a
new instance (the simulator and `gpulet list` show it, the container gets
its device nodes), a 3g.40gb beside it too; after the pods the instances
are gone. Skipped where the API has no counters (1.32)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

import drakit
from conftest import GPULET, skip_or_fail
from drakit import driver_fixture_v1, pool_slices, request, wait


def cap_minor(gpu, gi, ci=None):
    """The driver's numbering of /dev/nvidia-caps minors (no mig-minors file here)."""
    base = 3 + gpu * 135 + gi * 9
    return base if ci is None else base + 1 + ci


@pytest.fixture(scope="module")
def driver(cluster):
    # The capability nodes of the GPU instances 1-7 of each GPU, as the driver makes them.
    caps = Path(cluster.env["K8S_DEV_ROOT"]) / "dev" / "nvidia-caps"
    caps.mkdir(exist_ok=True)
    for gpu in range(8):
        for gi in range(1, 8):
            for minor in (cap_minor(gpu, gi), cap_minor(gpu, gi, 0)):
                if not (caps / f"nvidia-cap{minor}").exists():
                    os.mknod(caps / f"nvidia-cap{minor}", 0o20444, os.makedev(238, minor))
    yield from driver_fixture_v1(cluster, "mig", "h100-mig-empty", "--dra-mig", "*",
                                 needs="MIG devices made per claim")


def gpulet(driver, *args):
    env = dict(driver.env)
    return subprocess.run([GPULET, *args], capture_output=True, text=True, env=env, timeout=30).stdout


def listed(driver):
    """The node's MIG devices as the agent lists them: UUID: (GPU, profile, GPU instance)."""
    out = gpulet(driver, "list", "-o", "json", "--status-socket", f"{driver.cluster.base}/gpulet-mig.sock")
    return {m["uuid"]: (g["index"], m["profile"], m["gpu_instance_id"]) for g in json.loads(out)["gpus"]
            for m in g.get("mig_devices", [])}


def mig_pod(cluster, name, profile):
    req = request("v1", "mig", "mig.nvidia.com", [f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"])
    drakit.claim_pod(cluster, "v1", name, req, "env; ls /dev /dev/nvidia-caps; echo done; sleep 3600")


def test_a_mig_device_made_per_claim(cluster, driver):
    slices = wait("the pool", lambda: pool_slices(cluster))
    if not any(s["spec"].get("sharedCounters") for s in slices):
        # The kit turns the feature on: there, counters dropped are the bug.
        skip_or_fail("the API server drops counter sets (DRAPartitionableDevices off)")
    assert len(slices) == 10
    assert sorted(len(s["spec"].get("sharedCounters", [])) for s in slices)[-1] == 8
    placements = [d for s in slices for d in s["spec"].get("devices", [])]
    assert len(placements) == 200
    assert {d["consumesCounters"][0]["counterSet"] for d in placements} == \
        {f"gpu-{i}-counter-set" for i in range(8)}
    assert all(gpulet(driver, "sim", "mig", str(i)).strip() == "ok none" for i in range(8))
    pods = ["mig-small", "mig-large"]
    try:
        mig_pod(cluster, pods[0], "1g.10gb")
        mig_pod(cluster, pods[1], "3g.40gb")
        for name in pods:
            cluster.wait_phase(name, "Running")
        made = listed(driver)
        assert sorted(p for _, p, _ in made.values()) == ["1g.10gb", "3g.40gb"], made
        for uuid, (gpu, _, _) in made.items():
            assert uuid in gpulet(driver, "sim", "mig", str(gpu))
        claims = [c for c in cluster.get("resourceclaims")["items"] if c["metadata"]["name"].startswith("mig-")]
        devices = sorted(c["status"]["allocation"]["devices"]["results"][0]["device"] for c in claims)
        assert "-mig-1g10gb-19-" in devices[0] and "-mig-3g40gb-9-" in devices[1], devices
        small = next(m for m in made.values() if m[1] == "1g.10gb")
        out = wait("mig-small's log", lambda: "done" in (o := cluster.kubectl("logs", pods[0])) and o)
        assert f"nvidia{small[0]}" in out.split(), out
        assert f"nvidia-cap{cap_minor(small[0], small[2], 0)}" in out.split(), out
        assert driver.log().count("DRA: made MIG device") == 2
    finally:
        cluster.kubectl("delete", "pod", *pods, "--wait=true", "--timeout=60s", "--ignore-not-found", check=False)
    driver.wait_log("DRA: destroyed MIG device", count=2)
    assert wait("the MIG devices gone", lambda: listed(driver) == {})
    assert all(gpulet(driver, "sim", "mig", str(i)).strip() == "ok none" for i in range(8))
