"""Time-slicing on the real kubelet: a second gpulet beside the module's one,
on a simulated L4 node whose GPU 0 is shared 4 ways (nvidia.com/l4.shared)
and GPUs 1-3 stay whole (nvidia.com/l4). Capacity is GPUs x replicas, two
pods share GPU 0, a pod asking for 2 replicas fails admission with the
kubelet's UnexpectedAdmissionError (failRequestsGreaterThanOne), and a fault
takes all of GPU 0's replicas away."""
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import GPULET, SIM_LIB

CONFIG = """version: v1
resources:
  gpus: [{pattern: '*', name: l4}]
sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources:
    - {name: nvidia.com/l4, replicas: 4, devices: [0]}
"""


@pytest.fixture(scope="module")
def shared(cluster, gpulet):
    env = cluster.env
    base = Path(cluster.base)
    (base / "sharing.yaml").write_text(CONFIG)
    log = open(base / "gpulet-sharing.log", "w")
    proc = subprocess.Popen(
        [GPULET, "agent", "--simulate", "l4-pcie", "--kubelet-root", "/var/lib/kubelet",
         "--nvidia-dev-root", env["K8S_DEV_ROOT"], "--pass-device-specs", "--no-metrics",
         "--labels", "none", "--status-socket", str(base / "gpulet-sharing.sock"),
         "--health-probe-ms", "200", "--config-file", str(base / "sharing.yaml")],
        stdout=log, stderr=subprocess.STDOUT,
        env=dict(env, GPULET_SIM_LIB=SIM_LIB, GPULET_SIM_CONTROL=str(base / "sim-sharing.sock")))
    try:
        yield dict(env, GPULET_SIM_CONTROL=str(base / "sim-sharing.sock"))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        log.close()


def resource(cluster, name, field="allocatable"):
    return cluster.get("node", cluster.node)["status"][field].get(name)


def wait_resource(cluster, name, want, field="allocatable", timeout=60):
    deadline = time.monotonic() + timeout
    while resource(cluster, name, field) != want:
        assert time.monotonic() < deadline, f"{name} {field} is {resource(cluster, name, field)}"
        time.sleep(0.5)


def pod(cluster, name, res, count):
    spec = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": cluster.env["K8S_BUSYBOX_IMAGE"],
                                     "command": ["sh", "-c", "env; sleep 3600"],
                                     "resources": {"limits": {res: count}}}]}}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(spec))


def visible(cluster, name):
    for _ in range(40):
        log = cluster.kubectl("logs", name, check=False)
        if "NVIDIA_VISIBLE_DEVICES=" in log:
            return dict(l.split("=", 1) for l in log.splitlines() if "=" in l)
        time.sleep(0.5)
    raise AssertionError(cluster.kubectl("describe", "pod", name))


def test_capacity_is_gpus_times_replicas(cluster, shared):
    wait_resource(cluster, "nvidia.com/l4.shared", "4", "capacity")
    wait_resource(cluster, "nvidia.com/l4", "3", "capacity")
    assert resource(cluster, "nvidia.com/gpu", "capacity") == "8"  # the module's gpulet's


def test_two_pods_share_one_gpu(cluster, shared):
    pod(cluster, "share-a", "nvidia.com/l4.shared", 1)
    pod(cluster, "share-b", "nvidia.com/l4.shared", 1)
    cluster.wait_phase("share-a", "Running")
    cluster.wait_phase("share-b", "Running")
    a, b = visible(cluster, "share-a"), visible(cluster, "share-b")
    assert a["NVIDIA_VISIBLE_DEVICES"] == b["NVIDIA_VISIBLE_DEVICES"]
    assert a["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")


def test_two_replicas_fail_admission(cluster, shared):
    pod(cluster, "greedy-share", "nvidia.com/l4.shared", 2)
    deadline = time.monotonic() + 60
    while True:
        status = cluster.get("pod", "greedy-share")["status"]
        if status.get("phase") == "Failed":
            break
        assert time.monotonic() < deadline, status
        time.sleep(0.5)
    assert status["reason"] == "UnexpectedAdmissionError"
    assert "too large: maximum request size for shared resources is 1" in status["message"]
    cluster.kubectl("delete", "pod", "greedy-share", "--wait=false")


def test_fault_takes_all_replicas(cluster, shared):
    p = subprocess.run([GPULET, "sim", "xid", "0", "79"], env=shared, capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    wait_resource(cluster, "nvidia.com/l4.shared", "0")
    assert resource(cluster, "nvidia.com/l4", "allocatable") == "3"
    subprocess.run([GPULET, "sim", "recover", "0"], env=shared, check=True, timeout=10)
    wait_resource(cluster, "nvidia.com/l4.shared", "4")
    cluster.kubectl("delete", "pod", "share-a", "share-b", "--wait=false")
