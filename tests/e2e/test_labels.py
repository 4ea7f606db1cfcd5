"""gpulet's labels on the real API server: they appear on the Node, stale
ones of gpulet's go, everyone else's stay, a fault reaches the Node within a
second, a pod selecting the accelerator label schedules, and missing RBAC
gets the one line that names it. Runs after test_cluster.py, on its cluster."""
import copy
import json
import signal
import subprocess
import time
from pathlib import Path

from conftest import GPULET, SIM_LIB, service_account


def labels(cluster):
    return cluster.get("node", cluster.node)["metadata"]["labels"]


def wait_labels(cluster, pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        got = labels(cluster)
        if pred(got):
            return got
        assert time.monotonic() < deadline, got
        time.sleep(0.05)


def test_labels_on_the_node(cluster, gpulet):
    got = wait_labels(cluster, lambda l: "nvidia.com/gpu.product" in l)
    assert got["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert got["nvidia.com/gpu.count"] == "8"
    assert got["nvidia.com/gpu.memory"] == "81559"
    assert got["nvidia.com/gpu.machine"] == "DGX-H100"
    assert got["nvidia.com/gpu.present"] == "true"
    assert got["accelerator"] == "nvidia-h100-80gb"
    assert got["example.com/keep"] == "yes"          # someone else's: untouched
    assert "nvidia.com/gpu.stale-test" not in got    # gpulet's from before: gone
    # The Node holds what `gpulet labels` prints for the same node.
    p = subprocess.run([GPULET, "labels", "--simulate", "dgx-h100", "--machine-type-file",
                        f"{cluster.base}/product_name"], capture_output=True, text=True,
                       env=dict(cluster.env, GPULET_SIM_CONTROL="off"), check=True)
    printed = dict(line.split("=", 1) for line in p.stdout.splitlines())
    assert {k: got.get(k) for k in printed} == printed
    owned = cluster.get("node", cluster.node)["metadata"]["annotations"]["gpulet.io/labels"]
    assert sorted(owned.split(",")) == sorted(printed)


def test_fault_reaches_the_node_as_it_happens(cluster, gpulet):
    """Not at the next rewrite (60 s on): within 3 s, each look a kubectl."""
    wait_labels(cluster, lambda l: l.get("gpulet.io/gpu.healthy") == "8")
    t0 = time.monotonic()
    cluster.sim("xid", "5", "79")
    wait_labels(cluster, lambda l: l.get("gpulet.io/gpu.healthy") == "7", timeout=3.0)
    assert time.monotonic() - t0 < 3.0
    cluster.sim("recover", "5")
    wait_labels(cluster, lambda l: l.get("gpulet.io/gpu.healthy") == "8", timeout=10)


def test_node_selector_on_accelerator(cluster, gpulet):
    base = {"apiVersion": "v1", "kind": "Pod",
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": cluster.env["K8S_BUSYBOX_IMAGE"],
                                     "command": ["sleep", "3600"],
                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    for name, accel in (("h100-pod", "nvidia-h100-80gb"), ("t4-pod", "nvidia-tesla-t4")):
        spec = copy.deepcopy(base)
        spec["metadata"] = {"name": name}
        spec["spec"]["nodeSelector"] = {"accelerator": accel}
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(spec))
    cluster.wait_phase("h100-pod", "Running")
    time.sleep(2)
    assert cluster.get("pod", "t4-pod")["status"]["phase"] == "Pending"
    events = cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=t4-pod")
    assert "node(s) didn't match Pod's node affinity/selector" in events
    cluster.kubectl("delete", "pod", "h100-pod", "t4-pod", "--wait=false")


def second_agent(env, tmp):
    """Runs a second gpulet (its own simulator, no kubelet) until it has said
    why it cannot read its Node (whose watch the labels wait for), then a
    little longer; returns its log."""
    env = dict(env, GPULET_SIM_CONTROL=str(tmp / "sim.sock"), GPULET_SIM_LIB=SIM_LIB)
    log = tmp / "gpulet.log"
    with open(log, "w") as out:
        p = subprocess.Popen([GPULET, "agent", "--simulate", "t4", "--kubelet-root", str(tmp / "k"),
                              "--status-socket", str(tmp / "s.sock"), "--no-metrics",
                              "--labels", "api"], stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 10
            while "watch Node " not in log.read_text():
                assert time.monotonic() < deadline and p.poll() is None, log.read_text()
                time.sleep(0.1)
            time.sleep(1.5)  # retries, and still one line
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=10)
    text = Path(log).read_text()
    assert text.count("watch Node ") == 1, text
    return text


def test_missing_rbac_is_named(cluster, gpulet, tmp_path_factory):
    text = second_agent(service_account(cluster, "gpulet-norbac", rbac=False),
                        tmp_path_factory.mktemp("norbac"))
    assert "403 Forbidden: the service account needs get, list and watch on nodes" in text
    assert labels(cluster)["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"  # untouched


def test_bad_token_and_wrong_ca(cluster, gpulet, tmp_path_factory):
    env = service_account(cluster, "gpulet-badcreds", rbac=False)
    sa = Path(env["GPULET_SERVICEACCOUNT_DIR"])
    (sa / "token").write_text("expired-or-forged")
    text = second_agent(env, tmp_path_factory.mktemp("badtoken"))
    assert "401 Unauthorized: the API server does not accept the credentials" in text
    # A CA that did not sign the API server's certificate.
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=other-ca", "-keyout", str(sa / "other.key"), "-out",
                    str(sa / "ca.crt")], check=True, capture_output=True)
    text = second_agent(env, tmp_path_factory.mktemp("badca"))
    assert f"watch Node {cluster.node}: GET https://" in text and "certificate" in text, text
