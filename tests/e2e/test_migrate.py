"""docs/deploy.md's node-by-node move from NVIDIA's chart, run as written:
its shell block (`kubectl -n "$ns" get daemonsets -o yaml | gpulet
replace-nvidia | sh`) on a chart-shaped install of all three of NVIDIA's
DaemonSets under a release name of the user's (device plugin, GFD and the
MPS control daemon, with the chart's node affinity and labels; busybox in
place of NVIDIA's image), beside a DaemonSet that is not NVIDIA's. The node,
labelled for gpulet, loses all three, MPS's included although gpulet's
`nvidia.com/mps.capable=true` label is on it; the other stays."""
import json
import os
import re
import subprocess
import time
from pathlib import Path


from conftest import GPULET, SOURCE, labels_left_alone

NS = "nvidia-device-plugin"
RELEASE = "nvdp"
CHART_TERMS = [{"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In",
                                      "values": ["true"]}]},
               {"matchExpressions": [{"key": "feature.node.kubernetes.io/cpu-model.vendor_id", "operator": "In",
                                      "values": ["NVIDIA"]}]},
               {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]
NODE_LABELS = ("nvidia.com/gpu.present=true", "nvidia.com/mps.capable=true")


def daemonset(cluster, name, app, node_selector=None, terms=CHART_TERMS):
    """A DaemonSet shaped as NVIDIA's chart makes it: its labels, its node
    affinity, a container that only sleeps."""
    labels = {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": RELEASE}
    pod = {"terminationGracePeriodSeconds": 1, "tolerations": [{"operator": "Exists"}],
           "containers": [{"name": "c", "image": cluster.env["K8S_BUSYBOX_IMAGE"],
                           "command": ["sleep", "3600"]}]}
    if terms:
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    if node_selector:
        pod["nodeSelector"] = node_selector
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {**labels, "app": name}}, "spec": pod}}}


def desired(cluster, name):
    """desiredNumberScheduled, once the controller has seen the last change."""
    deadline = time.monotonic() + 60
    while True:
        ds = cluster.get("ds", name, "-n", NS)
        status = ds.get("status", {})
        if status.get("observedGeneration", 0) >= ds["metadata"]["generation"]:
            return status.get("desiredNumberScheduled", 0)
        assert time.monotonic() < deadline, ds
        time.sleep(0.5)


def wait_desired(cluster, names, want):
    for name in names:
        deadline = time.monotonic() + 60
        while (got := desired(cluster, name)) != want:
            assert time.monotonic() < deadline, f"{name} wants {got} node(s), not {want}"
            time.sleep(0.5)


def guide_block():
    """The shell block of docs/deploy.md that runs gpulet replace-nvidia."""
    text = (SOURCE / "docs" / "deploy.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    block = next(b for b in blocks if "gpulet replace-nvidia | sh" in b)
    return "\n".join(line.strip() for line in block.splitlines())


def run_guide(cluster):
    env = dict(cluster.env, PATH=f"{Path(GPULET).resolve().parent}:{os.environ['PATH']}")
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", guide_block()], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    return p.stderr


def test_the_guide_moves_a_chart_install_off_a_node(cluster, gpulet):
    with labels_left_alone(gpulet):
        guide_moves_a_chart_install(cluster)


def guide_moves_a_chart_install(cluster):
    chart = [f"{RELEASE}-nvidia-device-plugin", f"{RELEASE}-gpu-feature-discovery",
             f"{RELEASE}-nvidia-device-plugin-mps-control-daemon"]
    other = "someone-elses"
    k = cluster.kubectl
    had = cluster.get("node", cluster.node)["metadata"].get("labels", {})
    added = [label.split("=")[0] for label in NODE_LABELS if label.split("=")[0] not in had]
    k("create", "namespace", NS)
    try:
        for ds in (daemonset(cluster, chart[0], "nvidia-device-plugin"),
                   daemonset(cluster, chart[1], "gpu-feature-discovery"),
                   daemonset(cluster, chart[2], "nvidia-device-plugin",
                             node_selector={"nvidia.com/mps.capable": "true"}),
                   daemonset(cluster, other, "log-shipper", terms=None)):
            k("apply", "-f", "-", stdin=json.dumps(ds))
        k("label", "node", cluster.node, "--overwrite", *NODE_LABELS)
        wait_desired(cluster, chart + [other], 1)
        said = run_guide(cluster)
        for name in chart:
            assert f"patched: {NS}/{name}" in said, said
        assert f"left alone (not NVIDIA's): {NS}/{other}" in said, said
        for name in chart:  # the requirement in every one of the chart's terms
            terms = cluster.get("ds", name, "-n", NS)["spec"]["template"]["spec"]["affinity"][
                "nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            assert len(terms) == 3 and all(
                {"key": "gpulet.io/replaces-nvidia", "operator": "NotIn", "values": ["true"]}
                in t["matchExpressions"] for t in terms), terms
        wait_desired(cluster, chart + [other], 1)  # nothing moves before the label
        k("label", "node", cluster.node, "gpulet.io/replaces-nvidia=true")
        wait_desired(cluster, chart, 0)
        wait_desired(cluster, [other], 1)
        # Again: nothing to do; the label gone, NVIDIA's come back.
        assert "no DaemonSet of NVIDIA's needs a patch" in run_guide(cluster)
        k("label", "node", cluster.node, "gpulet.io/replaces-nvidia-")
        wait_desired(cluster, chart, 1)
    finally:
        k("label", "node", cluster.node, "gpulet.io/replaces-nvidia-", *[f"{key}-" for key in added],
          check=False)
        k("delete", "namespace", NS, "--wait=true", "--timeout=120s", check=False)
