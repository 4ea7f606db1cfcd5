"""The GPU Operator's MIG manager, built in, on the real kubelet and API
server: gpulet (device plugin, --mig-strategy mixed, labels through the API
server with the shipped rights) on two simulated H100s with MIG off. The
Node's label nvidia.com/mig.config=all-1g.10gb moves the allocatable from
nvidia.com/gpu to nvidia.com/mig-1g.10gb, a pod gets one such device, and
all-disabled moves it back; nvidia.com/mig.config.state says success each
time, and an Event says so. Runs in the DRA run on 1.36, where no session
gpulet serves the Node's nvidia.com/gpu. The layouts are deploy/mig-manager/'s,
and that overlay renders them into the DaemonSet as gpulet reads them."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import GPULET, SIM_LIB, SOURCE, service_account

SCENARIO = """name: e2e-migmgr
driver_version: "580.159.04"
cuda_version: "13.0"
gpus:
  - {product: h100-sxm}
  - {product: h100-sxm}
"""
SHIPPED = SOURCE / "deploy" / "mig-manager"


def cap_minor(gpu, gi, ci=None):
    """The driver's numbering of /dev/nvidia-caps minors (no mig-minors file here)."""
    base = 3 + gpu * 135 + gi * 9
    return base if ci is None else base + 1 + ci


@pytest.fixture(scope="module")
def manager(cluster):
    env = cluster.env
    base = Path(cluster.base)
    (base / "migmgr.yaml").write_text(SCENARIO)
    caps = Path(env["K8S_DEV_ROOT"]) / "dev" / "nvidia-caps"
    caps.mkdir(exist_ok=True)
    for gpu in (0, 1):
        for gi in range(1, 15):
            for minor in (cap_minor(gpu, gi), cap_minor(gpu, gi, 0)):
                if not (caps / f"nvidia-cap{minor}").exists():
                    os.mknod(caps / f"nvidia-cap{minor}", 0o20444, os.makedev(238, minor))
    run_env = dict(service_account(cluster, "gpulet-migmgr", rbac=True), GPULET_SIM_LIB=SIM_LIB,
                   GPULET_SIM_CONTROL=str(base / "sim-migmgr.sock"))
    log = open(base / "gpulet-migmgr.log", "w")
    proc = subprocess.Popen(
        [GPULET, "agent", "--simulate", str(base / "migmgr.yaml"), "--kubelet-root", "/var/lib/kubelet",
         "--pod-resources-kubelet-socket", env["K8S_POD_RESOURCES_SOCKET"], "--mig-strategy", "mixed",
         "--mig-parted-config", str(SHIPPED / "mig-parted.yaml"), "--labels", "api",
         "--nvidia-dev-root", env["K8S_DEV_ROOT"], "--pass-device-specs", "--no-metrics",
         "--status-socket", str(base / "gpulet-migmgr.sock"), "--proc-root", str(base / "migmgr-proc")],
        stdout=log, stderr=subprocess.STDOUT, env=run_env)
    proc.log = base / "gpulet-migmgr.log"
    try:
        yield proc
    finally:
        cluster.kubectl("label", "node", cluster.node, "nvidia.com/mig.config-", check=False)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        log.close()


def test_the_overlay_mounts_its_layouts(cluster):
    """deploy/mig-manager/ as kubectl renders it: the DaemonSet reads the
    ConfigMap's file at GPULET_MIG_PARTED_CONFIG, and that file is the one
    this test applies."""
    import yaml
    docs = list(yaml.safe_load_all(cluster.kubectl("kustomize", str(SHIPPED))))
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gpulet-mig-parted-config")
    assert cm["data"]["mig-parted.yaml"] == (SHIPPED / "mig-parted.yaml").read_text()
    pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "mig-parted")
    assert env["GPULET_MIG_PARTED_CONFIG"] == mount["mountPath"] + "/mig-parted.yaml"
    assert next(v for v in pod["volumes"] if v["name"] == "mig-parted")["configMap"]["name"] == cm["metadata"]["name"]


def wait_node(cluster, manager, what, test, timeout=60):
    deadline = time.monotonic() + timeout
    while not test(node := cluster.get("node", cluster.node)):
        assert time.monotonic() < deadline, f"{what}: {json.dumps(node['status']['allocatable'])} " \
            f"{node['metadata']['labels'].get('nvidia.com/mig.config.state')}\n" + manager.log.read_text()[-3000:]
        time.sleep(0.5)
    return node


def allocatable(name, want):
    return lambda node: node["status"]["allocatable"].get(name, "0") == want


def state(want):
    return lambda node: node["metadata"]["labels"].get("nvidia.com/mig.config.state") == want


def test_label_moves_allocatable_and_a_pod_runs_on_the_new_device(cluster, manager):
    wait_node(cluster, manager, "nvidia.com/gpu 2", allocatable("nvidia.com/gpu", "2"))
    t0 = time.monotonic()
    cluster.kubectl("label", "node", cluster.node, "--overwrite", "nvidia.com/mig.config=all-1g.10gb")
    wait_node(cluster, manager, "state success", state("success"))
    wait_node(cluster, manager, "nvidia.com/mig-1g.10gb 14", allocatable("nvidia.com/mig-1g.10gb", "14"))
    took = time.monotonic() - t0
    wait_node(cluster, manager, "nvidia.com/gpu 0", allocatable("nvidia.com/gpu", "0"))
    labels = cluster.get("node", cluster.node)["metadata"]["labels"]
    assert labels.get("nvidia.com/mig.strategy") == "mixed" and labels.get("nvidia.com/mig-1g.10gb.count") == "14"
    events = json.loads(cluster.kubectl("get", "events", "-n", "default", "-o", "json",
                                        "--field-selector", "reason=MIGConfigApplied"))["items"]
    assert any("MIG config 'all-1g.10gb' applied" in e["message"] for e in events), events
    spec = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "migmgr-pod"},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": cluster.env["K8S_BUSYBOX_IMAGE"],
                                     "command": ["sh", "-c", "env; sleep 3600"],
                                     "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}}]}}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(spec))
    try:
        cluster.wait_phase("migmgr-pod", "Running")
        deadline = time.monotonic() + 30
        while "NVIDIA_VISIBLE_DEVICES=MIG-" not in (out := cluster.kubectl("logs", "migmgr-pod", check=False)):
            assert time.monotonic() < deadline, out
            time.sleep(0.5)
    finally:
        cluster.kubectl("delete", "pod", "migmgr-pod", "--grace-period=0", "--wait=true", "--timeout=60s",
                        check=False)
    # Back: the pod has gone, so nothing holds a GPU.
    cluster.kubectl("label", "node", cluster.node, "--overwrite", "nvidia.com/mig.config=all-disabled")
    wait_node(cluster, manager, "nvidia.com/gpu 2 again", allocatable("nvidia.com/gpu", "2"))
    wait_node(cluster, manager, "state success", state("success"))
    wait_node(cluster, manager, "nvidia.com/mig-1g.10gb 0", allocatable("nvidia.com/mig-1g.10gb", "0"))
    print(f"label -> success and nvidia.com/mig-1g.10gb allocatable: {took:.1f} s")
