"""gpulet on a real kubelet and API server: what a cluster operator sees.
The tests share one cluster and one gpulet, and run in this order."""
import json
import re
import subprocess
import time
import urllib.request

from conftest import GPULET, K8S, METRICS


def inventory(cluster):
    p = subprocess.run([GPULET, "list", "--simulate", "dgx-h100", "-o", "json"],
                       capture_output=True, text=True, check=True,
                       env=dict(cluster.env, GPULET_SIM_CONTROL="off"))
    return {g["uuid"]: g["minor"] for g in json.loads(p.stdout)["gpus"]}


def visible(cluster, pod):
    """The pod's NVIDIA_VISIBLE_DEVICES and its log, once it has written them."""
    log = ""
    for _ in range(20):
        log = cluster.kubectl("logs", pod)
        if "nvidiactl" in log:
            break
        time.sleep(0.5)
    env = dict(line.split("=", 1) for line in log.splitlines() if "=" in line)
    return env["NVIDIA_VISIBLE_DEVICES"].split(","), log


def test_node_shows_the_gpus(cluster, gpulet):
    cluster.wait_gpus("8", "capacity")
    cluster.wait_gpus("8")


def test_pod_gets_two_gpus(cluster, gpulet):
    cluster.pod("two", 2)
    cluster.wait_phase("two", "Running")
    uuids, log = visible(cluster, "two")
    minors = inventory(cluster)
    assert len(uuids) == 2 and all(u in minors for u in uuids)
    nodes = sorted(n for n in log.split() if re.fullmatch(r"nvidia\d+", n))
    assert nodes == sorted(f"nvidia{minors[u]}" for u in uuids)


def test_pod_asking_too_much_stays_pending(cluster, gpulet):
    cluster.pod("greedy", 7)  # 6 are left
    time.sleep(3)
    pod = cluster.get("pod", "greedy")
    assert pod["status"]["phase"] == "Pending"
    events = cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=greedy")
    assert "Insufficient nvidia.com/gpu" in events
    cluster.kubectl("delete", "pod", "greedy", "--wait=false")


def test_metrics_carry_the_pod(cluster, gpulet):
    deadline = time.monotonic() + 30
    while True:
        text = urllib.request.urlopen(f"http://{METRICS}/metrics", timeout=5).read().decode()
        temps = [l for l in text.splitlines() if l.startswith("DCGM_FI_DEV_GPU_TEMP{")]
        owned = [l for l in temps if 'pod="two"' in l]
        if len(owned) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(owned) == 2, "\n".join(temps)
    assert all('namespace="default"' in l and 'container="c"' in l for l in owned)


def test_fault_drops_allocatable_and_recover_restores_it(cluster, gpulet):
    used, _ = visible(cluster, "two")
    free = next(i for i, u in enumerate(inventory(cluster)) if u not in used)
    cluster.sim("xid", str(free), "79")
    cluster.wait_gpus("7")
    cluster.wait_gpus("8", "capacity")  # still the node's: it is unhealthy, not gone
    cluster.sim("recover", str(free))
    cluster.wait_gpus("8")


def test_kubelet_restart_is_survived(cluster, gpulet):
    before = cluster.gpulet_log.read_text().count("registered nvidia.com/gpu")
    subprocess.run([str(K8S / "cluster.sh"), "restart-kubelet", cluster.base],
                   check=True, capture_output=True, timeout=120)
    deadline = time.monotonic() + 30
    while cluster.gpulet_log.read_text().count("registered nvidia.com/gpu") == before:
        assert time.monotonic() < deadline, cluster.gpulet_log.read_text()
        time.sleep(0.2)
    cluster.wait_gpus("8")
    assert cluster.get("pod", "two")["status"]["phase"] == "Running"
    # A new pod still gets GPUs from the re-registered plugin.
    cluster.pod("after", 1)
    cluster.wait_phase("after", "Running")
    assert gpulet.poll() is None
