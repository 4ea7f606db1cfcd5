"""MIG on the real kubelet: a second gpulet with --mig-strategy mixed on two
simulated H100s, every GPU in MIG mode (so no nvidia.com/gpu beside the
session's). The Node gets nvidia.com/mig-1g.10gb capacity; a pod asking
for one gets one MIG device: its MIG UUID, its GPU's node and the GI and CI
access capability nodes. A live reconfiguration changes the capacity."""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import GPULET, extra_gpulet

SCENARIO = """name: e2e-mig
driver_version: "580.159.04"
cuda_version: "13.0"
gpus:
  - {product: h100-sxm, mig: true, mig_devices: [1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb]}
  - {product: h100-sxm, mig: true, mig_devices: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]}
"""


def cap_minor(gpu, gi, ci=None):
    """The driver's numbering of /dev/nvidia-caps minors (no mig-minors file here)."""
    base = 3 + gpu * 135 + gi * 9
    return base if ci is None else base + 1 + ci


@pytest.fixture(scope="module")
def mig(cluster, gpulet):
    env = cluster.env
    base = Path(cluster.base)
    (base / "mig.yaml").write_text(SCENARIO)
    # The capability nodes a container of a MIG device gets, as the driver makes them.
    caps = Path(env["K8S_DEV_ROOT"]) / "dev" / "nvidia-caps"
    caps.mkdir(exist_ok=True)
    for gpu, gis in ((0, range(1, 8)), (1, range(1, 5))):
        for gi in gis:
            for minor in (cap_minor(gpu, gi), cap_minor(gpu, gi, 0)):
                node = caps / f"nvidia-cap{minor}"
                if not node.exists():
                    os.mknod(node, 0o20444, os.makedev(238, minor))
    with extra_gpulet(cluster, "mig", "--simulate", str(base / "mig.yaml"), "--mig-strategy",
                      "mixed", "--nvidia-dev-root", env["K8S_DEV_ROOT"], "--pass-device-specs",
                      "--no-metrics", "--proc-root", str(base / "mig-proc")) as sim_env:
        yield sim_env


def allocatable(cluster, name):
    return cluster.get("node", cluster.node)["status"]["allocatable"].get(name)


def wait_allocatable(cluster, name, want, timeout=60):
    deadline = time.monotonic() + timeout
    while allocatable(cluster, name) != want:
        assert time.monotonic() < deadline, f"{name} allocatable is {allocatable(cluster, name)}"
        time.sleep(0.5)


def test_capacity_and_a_pod_with_a_mig_device(cluster, mig):
    wait_allocatable(cluster, "nvidia.com/mig-1g.10gb", "9")
    wait_allocatable(cluster, "nvidia.com/mig-3g.40gb", "1")
    wait_allocatable(cluster, "nvidia.com/mig-2g.20gb", "1")
    listed = json.loads(subprocess.run([GPULET, "list", "--simulate", str(Path(cluster.base) / "mig.yaml"),
                                        "-o", "json"], capture_output=True, text=True,
                                       env=mig, check=True).stdout)["gpus"]
    by_uuid = {m["uuid"]: (g["index"], m) for g in listed for m in g["mig_devices"]}
    spec = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mig-pod"},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": cluster.env["K8S_BUSYBOX_IMAGE"],
                                     "command": ["sh", "-c", "env; ls /dev /dev/nvidia-caps; sleep 3600"],
                                     "resources": {"limits": {"nvidia.com/mig-3g.40gb": 1}}}]}}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(spec))
    try:
        cluster.wait_phase("mig-pod", "Running")
        deadline = time.monotonic() + 30
        while "nvidia-cap" not in (out := cluster.kubectl("logs", "mig-pod", check=False)):
            assert time.monotonic() < deadline, out
            time.sleep(0.5)
        visible = [l.split("=", 1)[1] for l in out.splitlines() if l.startswith("NVIDIA_VISIBLE_DEVICES=")]
        assert len(visible) == 1 and visible[0] in by_uuid, out
        gpu, m = by_uuid[visible[0]]
        assert m["profile"] == "3g.40gb" and gpu == 1
        assert f"nvidia{gpu}" in out.split()
        for minor in (cap_minor(gpu, m["gpu_instance_id"]), cap_minor(gpu, m["gpu_instance_id"], 0)):
            assert f"nvidia-cap{minor}" in out.split(), out
    finally:
        cluster.kubectl("delete", "pod", "mig-pod", "--wait=false", check=False)


def test_reconfiguration_reaches_the_node(cluster, mig):
    """mig-parted's kind of change: the Node's capacity follows in seconds."""
    wait_allocatable(cluster, "nvidia.com/mig-1g.10gb", "9")
    p = subprocess.run([GPULET, "sim", "mig", "0", "4g.40gb,3g.40gb"], capture_output=True,
                       text=True, env=mig)
    assert p.returncode == 0, p.stdout + p.stderr
    t0 = time.monotonic()
    wait_allocatable(cluster, "nvidia.com/mig-1g.10gb", "2", timeout=30)
    wait_allocatable(cluster, "nvidia.com/mig-3g.40gb", "2", timeout=30)
    wait_allocatable(cluster, "nvidia.com/mig-4g.40gb", "1", timeout=30)
    assert time.monotonic() - t0 < 30
