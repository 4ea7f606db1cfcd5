"""GPU faults as the control plane of a real cluster sees them: the Node
condition GPUUnhealthy and Events, written by the session's gpulet with the
rights deploy/base/rbac.yaml ships, through the kubelet's own status
updates; and the opt-in taint, on a Node object of its own (a taint on the
one real node would keep the other tests' pods off it)."""
import json
import subprocess
import time

from conftest import GPULET, K8S, extra_gpulet


def condition(cluster, node=None):
    node = cluster.get("node", node or cluster.node)
    return next((c for c in node["status"].get("conditions", []) if c["type"] == "GPUUnhealthy"), None)


def wait(what, fn, timeout=30, every=0.05):
    deadline = time.monotonic() + timeout
    while not (v := fn()):
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(every)
    return v


def node_events(cluster, reason):
    out = cluster.get("events", "-n", "default", "--field-selector",
                      f"involvedObject.kind=Node,involvedObject.name={cluster.node},reason={reason}")
    return out["items"]


def test_condition_and_events(cluster, gpulet):
    c = wait("no GPUUnhealthy condition on the Node", lambda: condition(cluster))
    assert (c["status"], c["reason"]) == ("False", "GPUsHealthy"), c
    t0 = time.monotonic()
    cluster.sim("xid", "6", "79")
    c = wait(lambda: f"condition still {condition(cluster)}",
             lambda: (x := condition(cluster))["status"] == "True" and x)
    took = time.monotonic() - t0
    assert took < 3.0, took   # as it happens (each look is a kubectl): no periodic resync
    assert c["reason"] == "XID79" and "GPU 6 (GPU-" in c["message"], c
    ev = wait("no GPUUnhealthy event", lambda: node_events(cluster, "GPUUnhealthy"))[-1]
    assert ev["type"] == "Warning" and ev["source"]["component"] == "gpulet"
    assert ev["message"].startswith("GPU 6 (GPU-") and "XID 79" in ev["message"]
    # The kubelet writes its own status when it starts: GPUUnhealthy stays.
    ready = lambda: next(c for c in cluster.get("node", cluster.node)["status"]["conditions"]
                         if c["type"] == "Ready")
    beat = ready()["lastHeartbeatTime"]
    subprocess.run([str(K8S / "cluster.sh"), "restart-kubelet", cluster.base], check=True,
                   capture_output=True, timeout=120)
    wait("the kubelet wrote no status after its restart",
         lambda: ready()["lastHeartbeatTime"] != beat and ready()["status"] == "True", timeout=60,
         every=0.5)
    assert condition(cluster)["status"] == "True"
    assert condition(cluster)["lastTransitionTime"] == c["lastTransitionTime"]
    cluster.wait_gpus("7")
    cluster.sim("recover", "6")
    c = wait(lambda: f"condition still {condition(cluster)}",
             lambda: (x := condition(cluster))["status"] == "False" and x, timeout=10)
    assert c["reason"] == "GPUsHealthy"
    ev = wait("no GPUHealthy event", lambda: node_events(cluster, "GPUHealthy"))[-1]
    assert ev["type"] == "Normal" and ev["message"].startswith("GPU 6 (GPU-")
    cluster.wait_gpus("8")
    assert "fault report not written" not in cluster.gpulet_log.read_text()


def test_taint(cluster, gpulet):
    """--fault-taint on a Node object with someone else's taint: gpulet's
    NoSchedule taint comes with an XID 79 and goes with the recovery, the
    other taint stays; a taint of gpulet's key it did not put on stays too."""
    k = cluster.kubectl
    name = "gpulet-fault-test"
    k("create", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "spec": {"taints": [{"key": "example.com/other", "effect": "NoSchedule"}]}}))
    taints = lambda: cluster.get("node", name)["spec"].get("taints", [])
    try:
        # Its own kubelet root: no device plugin beside the session's.
        with extra_gpulet(cluster, "taint", "--simulate", "t4", "--no-metrics",
                          "--kubelet-root", f"{cluster.base}/taint-kubelet", "--node-name", name,
                          "--fault-taint", "--health-probe-ms", "200") as env:
            sim = lambda *a: subprocess.run([GPULET, "sim", *a], env=env, check=True,
                                            capture_output=True)
            wait("no condition on the test Node", lambda: condition(cluster, name))
            sim("xid", "0", "79")
            wait(lambda: f"no taint: {taints()}", lambda: len(taints()) == 2, timeout=10)
            assert taints()[1]["key"] == "gpulet.io/gpu-fault"
            # An XID 79 comes with the GPU gone: the next health probe finds
            # it lost. On a busy machine that may come before the taint is
            # written, and the taint names the worse fault, as it should.
            assert (taints()[1]["value"], taints()[1]["effect"]) in (("XID79", "NoSchedule"),
                                                                    ("GPULost", "NoSchedule"))
            sim("recover", "0")
            wait(lambda: f"taint not taken off: {taints()}", lambda: len(taints()) == 1, timeout=10)
            assert taints()[0]["key"] == "example.com/other"
            k("taint", "node", name, "gpulet.io/gpu-fault=manual:NoSchedule")
            sim("xid", "0", "79")
            wait("no XID 79", lambda: condition(cluster, name)["reason"] in ("XID79", "GPULost"), timeout=10)
            sim("recover", "0")
            wait("not recovered", lambda: condition(cluster, name)["status"] == "False", timeout=10)
            assert {"key": "gpulet.io/gpu-fault", "value": "manual", "effect": "NoSchedule"} in taints()
    finally:
        k("delete", "node", name, "--wait=false", check=False)



def test_pod_status_shows_device_health(cluster, gpulet):
    """The device plugin's per-device health (ListAndWatch) in the pod's
    status.containerStatuses[].allocatedResourcesStatus (KEP-4680, beta in
    1.36): Unhealthy with a fault of the pod's GPU, Healthy after recovery."""
    cluster.wait_gpus("8")
    cluster.pod("health-dp", 1, command="ls /dev; echo done; sleep 3600")
    try:
        cluster.wait_phase("health-dp", "Running")
        out = wait("the pod's devices", lambda: "done" in (o := cluster.kubectl("logs", "health-dp")) and o)
        [gpu] = [w[6:] for w in out.split() if w.startswith("nvidia") and w[6:].isdigit()]

        def health():
            st = cluster.get("pod", "health-dp")["status"]["containerStatuses"][0]
            return [(s["name"], r.get("health")) for s in st.get("allocatedResourcesStatus", [])
                    for r in s["resources"]]
        wait(lambda: f"no health in the pod's status: {health()}",
             lambda: health() == [("nvidia.com/gpu", "Healthy")], timeout=60, every=0.5)
        cluster.sim("xid", gpu, "79")
        wait(lambda: f"still {health()}", lambda: health() == [("nvidia.com/gpu", "Unhealthy")])
        cluster.sim("recover", gpu)
        wait(lambda: f"still {health()}", lambda: health() == [("nvidia.com/gpu", "Healthy")], timeout=30)
    finally:
        cluster.kubectl("delete", "pod", "health-dp", "--wait=true", "--timeout=60s")
