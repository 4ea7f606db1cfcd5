"""Time-slicing on the real kubelet: a second gpulet beside the module's one,
on a simulated L4 node whose GPU 0 is shared 4 ways (nvidia.com/l4.shared)
and GPUs 1-3 stay whole (nvidia.com/l4). Capacity is GPUs x replicas, two
pods share GPU 0, a pod asking for 2 replicas fails admission with the
kubelet's UnexpectedAdmissionError (failRequestsGreaterThanOne), and a fault
takes all of GPU 0's replicas away. The per-container series name the two
sharing pods' processes through their real cgroups and the kubelet's real
/var/log/containers links."""
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import GPULET, extra_gpulet

SHARED_METRICS = "127.0.0.1:19403"
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
    config = Path(cluster.base) / "sharing.yaml"
    config.write_text(CONFIG)
    with extra_gpulet(cluster, "sharing", "--simulate", "l4-pcie",
                      "--nvidia-dev-root", env["K8S_DEV_ROOT"], "--pass-device-specs",
                      "--metrics-listen", SHARED_METRICS, "--metrics-interval-ms", "500",
                      "--pod-resources-kubelet-socket", env["K8S_POD_RESOURCES_SOCKET"],
                      "--pod-resources-interval-ms", "1000", "--health-probe-ms", "200",
                      "--config-file", str(config)) as sim_env:
        yield sim_env


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


def container_pid(uid):
    """The host PID of a process of the pod's container, not of its sandbox
    (this cluster's pause is `sleep 2147483647`), found through the real
    cgroups as gpulet finds pods."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cg = Path(f"/proc/{pid}/cgroup").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if (uid in cg or uid.replace("-", "_") in cg) and b"2147483647" not in cmd:
            return int(pid)
    raise AssertionError(f"no process of pod {uid}")


def container_usage():
    text = urllib.request.urlopen(f"http://{SHARED_METRICS}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("gpulet_container_gpu_memory_used_bytes{") and 'pod="' in line:
            labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.rindex("}")]
                          .replace('"', "").split(","))
            out[(labels["namespace"], labels["pod"], labels["container"])] = float(line.split()[-1])
    return out


def test_per_container_memory(cluster, shared):
    """Two pods on GPU 0: a simulated process in each pod's real container
    shows up under its pod's and container's names, with its memory."""
    pids = {}
    for name, mib in (("share-a", 300), ("share-b", 500)):
        uid = cluster.get("pod", name)["metadata"]["uid"]
        pids[name] = container_pid(uid)
        subprocess.run([GPULET, "sim", "proc", "0", "add", str(pids[name]), str(mib), "20"],
                       env=shared, check=True, timeout=10)
    want = {("default", "share-a", "c"): 300 * 2**20, ("default", "share-b", "c"): 500 * 2**20}
    deadline = time.monotonic() + 20
    while container_usage() != want:
        assert time.monotonic() < deadline, (container_usage(), pids)
        time.sleep(0.5)
    subprocess.run([GPULET, "sim", "proc", "0", "clear"], env=shared, check=True, timeout=10)


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
