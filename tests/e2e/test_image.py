"""gpulet's container image (scripts/image.sh) and manifests (deploy/) on
the real cluster. The image is imported into the cluster's containerd, and
pods run `gpulet version` and `gpulet list` from it, with no shell in the
image, on a stand-in node's driver (node_root) loaded as a node's is. Then `kubectl apply -k` of an overlay of
deploy/ for this cluster runs the DaemonSet: the gpulet pod becomes Ready,
registers its resource with the kubelet and serves metrics; `kubectl
delete -k` takes it away. Skips where the image was not built
(scripts/test.sh builds it as root)."""
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import GPULET, SOURCE, labels_left_alone, skip_or_fail

ARCHIVE = SOURCE / "build-release" / "gpulet-image.tar"
IMAGE = "localhost/gpulet:test"


def image_ready():
    """scripts/test.sh builds the image beside the end-to-end runs and names a
    file (GPULET_IMAGE_DONE) that says how its build ended: wait for it."""
    done = os.environ.get("GPULET_IMAGE_DONE")
    deadline = time.monotonic() + 900
    while done and not Path(done).exists() and time.monotonic() < deadline:
        time.sleep(2)
    said = Path(done).read_text().strip() if done and Path(done).exists() else None
    if done and said != "ok":
        skip_or_fail(f"the suite's image stage said {said or 'nothing in 15 minutes'}")


@pytest.fixture(scope="module")
def image(cluster):
    image_ready()
    if not ARCHIVE.exists():
        pytest.skip(f"no image at {ARCHIVE} (scripts/image.sh {IMAGE} {ARCHIVE} builds it)")
    import subprocess
    sock = Path(cluster.base) / "containerd" / "containerd.sock"
    p = subprocess.run(["ctr", "--address", str(sock), "-n", "k8s.io", "images", "import",
                        "--base-name", "localhost/gpulet", str(ARCHIVE)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return IMAGE


@pytest.fixture(scope="module")
def node_root(cluster):
    """The kit's stand-in for a GPU node's /, which deploy/ mounts at
    /driver-root: this host's own / through an overlay (nothing of the host
    changes), with the stand-in driver installed in it where a driver
    installs (`gpulet sim driver-root`: its NVML the simulator, its
    programs NVIDIA's stand-ins, every library naming the glibc libraries
    NVIDIA's name), the kit's fake device nodes as its /dev, /proc, /sys,
    and the directories whose sockets are live (the kubelet's, gpulet's) as
    on a node. gpulet's image loads that NVML and runs those
    programs (MPS) as it would a node's: no --simulate, no --mps-control."""
    base = Path(cluster.base)
    root, upper, work = base / "node", base / "node.upper", base / "node.work"
    for d in (root, upper, work):
        d.mkdir(exist_ok=True)
    dev = Path(cluster.env["K8S_DEV_ROOT"]) / "dev"
    (dev / "shm").mkdir(exist_ok=True)
    mounts = [["mount", "-t", "overlay", "overlay", "-o",
               f"lowerdir=/,upperdir={upper},workdir={work}", str(root)],
              ["mount", "--bind", str(dev), str(root / "dev")],
              ["mount", "-t", "proc", "proc", str(root / "proc")],
              ["mount", "--rbind", "/sys", str(root / "sys")],
              # the kubelet's and gpulet's sockets, live (an overlay passes
              # none through): the device-plugin directory, and the kit's
              # own (its kubelet's root, gpulet's status directory)
              ["mount", "--bind", "/var/lib/kubelet/device-plugins",
               str(root / "var/lib/kubelet/device-plugins")],
              ["mount", "--bind", str(base), f"{root}{base}"]]
    try:
        subprocess.run(mounts[0], check=True, capture_output=True, text=True, timeout=30)
        # (before /proc is mounted over its proc/driver/nvidia-caps)
        subprocess.run([GPULET, "sim", "driver-root", str(root)], check=True, env=cluster.env,
                       timeout=30)
        for m in mounts[1:]:
            subprocess.run(m, check=True, capture_output=True, text=True, timeout=30)
        yield str(root)
    finally:
        subprocess.run(["umount", "-R", "-l", str(root)], capture_output=True, timeout=30)


def run(cluster, name, args, root=None):
    """A pod of the image running gpulet with args; with root (node_root),
    the node's / at /driver-root and deploy/'s variables, so NVML is the
    stand-in driver's, loaded as on a node."""
    spec = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never",
                                     "args": args}]}}
    if root:
        spec["spec"]["volumes"] = [{"name": "driver-root", "hostPath": {"path": root}}]
        c = spec["spec"]["containers"][0]
        c["volumeMounts"] = [{"name": "driver-root", "mountPath": "/driver-root", "readOnly": True}]
        c["env"] = [{"name": "NVIDIA_DRIVER_ROOT", "value": root},
                    {"name": "CONTAINER_DRIVER_ROOT", "value": "/driver-root"},
                    {"name": "GPULET_SIM_SCENARIO", "value": "dgx-h100"}]
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(spec))
    deadline = time.monotonic() + 90
    while (phase := cluster.get("pod", name)["status"].get("phase")) not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, cluster.kubectl("describe", "pod", name)
        time.sleep(0.5)
    out = cluster.kubectl("logs", name)
    cluster.kubectl("delete", "pod", name, "--wait=false")
    return phase, out


def test_image_runs(cluster, image, node_root):
    """The image runs, and loads a driver's NVML from the node's driver root
    as deploy/ mounts it (an image without the glibc libraries a driver's
    NVML names cannot)."""
    phase, out = run(cluster, "gpulet-version", ["version"])
    assert phase == "Succeeded" and out.startswith("gpulet "), out
    phase, out = run(cluster, "gpulet-list", ["list", "-o", "json"], root=node_root)
    assert phase == "Succeeded", out
    assert len(json.loads(out)["gpus"]) == 8


# The cluster's differences from a GPU node, and no clash with the session's
# gpulet (which owns nvidia.com/gpu): the node's / is node_root's (a
# stand-in A100 driver), advertised as nvidia.com/a100-deployed, the host's
# network (pods here have only loopback, so the kubelet's probes and the
# API server need it), and the node paths under the cluster's own
# directory. Nothing else of deploy/ changes. The configs are the base's
# ConfigMap replaced: per-node configuration through the API server.
OVERLAY = """apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [{deploy}]
# another namespace, as docs/deploy.md says: the namespace, and the RBAC
# subjects (kustomize leaves those of a service account not named default)
namespace: {ns}
transformers:
  - |-
    apiVersion: builtin
    kind: NamespaceTransformer
    metadata: {{name: gpulet, namespace: {ns}}}
    setRoleBindingSubjects: allServiceAccounts
images: [{{name: localhost/gpulet, newTag: test}}]
configMapGenerator:
  - name: gpulet-config
    namespace: gpulet
    behavior: replace
    options: {{disableNameSuffixHash: true}}
    literals:
      - "default=version: v1\\nresources:\\n  gpus: [{{pattern: '*', name: a100-deployed}}]\\n"
      - "ts2=version: v1\\nresources:\\n  gpus: [{{pattern: '*', name: a100-deployed}}]\\nsharing:\\n  timeSlicing:\\n    resources: [{{name: nvidia.com/a100-deployed, replicas: 2}}]\\n"
patches:
  - patch: |
      apiVersion: apps/v1
      kind: DaemonSet
      metadata: {{name: gpulet, namespace: gpulet}}
      spec:
        template:
          spec:
            hostNetwork: true
            containers:
              - name: gpulet
                imagePullPolicy: Never
                args: [agent, --metrics-listen, "127.0.0.1:9400"]
                env:
                  - {{name: KUBERNETES_SERVICE_HOST, value: "{api_host}"}}
                  - {{name: KUBERNETES_SERVICE_PORT, value: "{api_port}"}}
                  # the node's / is node_root's: its driver's GPUs, an A100 node's
                  - {{name: NVIDIA_DRIVER_ROOT, value: "{root}"}}
                  - {{name: GPULET_SIM_SCENARIO, value: a100-2x4}}
                volumeMounts:
                  # this machine's / is a private mount: no propagation from it
                  - {{name: driver-root, mountPath: /driver-root, readOnly: true, mountPropagation: None}}
            volumes:
              - {{name: driver-root, hostPath: {{path: "{root}", type: Directory}}}}
              - {{name: pod-resources, hostPath: {{path: {base}/kubelet/pod-resources, type: Directory}}}}
              - {{name: cdi, hostPath: {{path: {base}/deployed/cdi, type: DirectoryOrCreate}}}}
              - {{name: mps, hostPath: {{path: {base}/deployed/mps, type: DirectoryOrCreate}}}}
              - {{name: status, hostPath: {{path: {base}/deployed/status, type: DirectoryOrCreate}}}}
"""


def kubelet_lines(cluster, word, last=40):
    """The kubelet's last log lines that name word: what it made of a
    plugin's registrations and streams, when a test's wait ran out."""
    log = Path(cluster.base) / "kubelet.log"
    lines = [l for l in log.read_text(errors="replace").splitlines() if word in l] if log.exists() else []
    return "\nthe kubelet on " + word + ":\n" + "\n".join(lines[-last:])


def wait(what, fn, timeout=120):
    """fn() once true; else fails with what() (or what)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(1)


def test_kubectl_apply_k(cluster, image, gpulet, node_root):
    """The pod becomes Ready; the Node gets its GPUs, its labels and (by its
    label) its config; metrics are served. The session's gpulet labels the
    same Node: it publishes its labels again afterwards."""
    overlay = Path(cluster.base) / "deploy-overlay"
    overlay.mkdir(exist_ok=True)
    deploy = os.path.relpath(SOURCE / "deploy", overlay)
    server = cluster.kubectl("config", "view", "--minify", "-o",
                             "jsonpath={.clusters[0].cluster.server}")
    host, port = server.removeprefix("https://").rsplit(":", 1)
    (overlay / "kustomization.yaml").write_text(
        OVERLAY.format(deploy=deploy, base=cluster.base, api_host=host, api_port=port, root=node_root,
                       ns=NS))
    # The label an operator puts on a GPU node NFD has not seen yet.
    cluster.kubectl("label", "node", cluster.node, "gpulet.io/gpu-node=true", "--overwrite")
    cluster.kubectl("apply", "-k", str(overlay))
    node = lambda: cluster.get("node", cluster.node)
    try:
        def ready():
            pods = cluster.get("pods", "-n", NS)["items"]
            return pods and all(c.get("ready") for p in pods for c in p["status"].get("containerStatuses", []))
        wait(lambda: cluster.kubectl("describe", "ds,pods", "-n", NS, check=False)[-3000:],
             ready)
        wait("nvidia.com/a100-deployed never became allocatable",
             lambda: node()["status"]["allocatable"].get("nvidia.com/a100-deployed") == "8")
        wait(lambda: f"the deployed gpulet's labels are not on the Node: {node()['metadata']['labels']}",
             lambda: node()["metadata"]["labels"].get("nvidia.com/gpu.product", "").startswith("NVIDIA-A100"))
        text = urllib.request.urlopen("http://127.0.0.1:9400/metrics", timeout=5).read().decode()
        assert "DCGM_FI_DEV_GPU_TEMP{" in text and "A100" in text
        assert 'gpulet_config_info{config="default"} 1' in text
        pod = cluster.get("pods", "-n", NS)["items"][0]
        assert pod["spec"]["priorityClassName"] == "system-node-critical"
        assert pod["spec"]["hostPID"] is True
        # Per-node config: the label chooses ts2, applied live (no restart).
        cluster.kubectl("label", "node", cluster.node, "nvidia.com/device-plugin.config=ts2")
        wait(lambda: "the node's config ts2 was not applied: allocatable " +
             json.dumps(node()["status"]["allocatable"]) + "\n" +
             cluster.kubectl("logs", "-n", NS, "ds/gpulet", check=False)[-3000:] +
             kubelet_lines(cluster, "a100-deployed"),
             lambda: node()["status"]["allocatable"].get("nvidia.com/a100-deployed") == "16",
             timeout=30)
        wait(lambda: f"the replicas label did not follow: {node()['metadata']['labels']} " +
             cluster.kubectl("logs", "-n", NS, "ds/gpulet", check=False)[-3000:] +
             cluster.gpulet_log.read_text()[-3000:],
             lambda: node()["metadata"]["labels"].get("nvidia.com/gpu.replicas") == "2", timeout=30)
        name = pod["metadata"]["name"]
        restarts = cluster.get("pod", name, "-n", NS)["status"]["containerStatuses"][0]["restartCount"]
        assert restarts == 0, (cluster.kubectl("logs", "-n", NS, name, "--previous", check=False)[-4000:] +
                               cluster.kubectl("describe", "pod", "-n", NS, name, check=False)[-3000:])
        logs = cluster.kubectl("logs", "-n", NS, name)
        assert "node config: applied 'ts2'" in logs
        # deploy/base/rbac.yaml's rights cover the fault report (condition, events).
        assert "fault report: the condition GPUUnhealthy" in logs
        assert "fault report not written" not in logs, logs
        # gpulet doctor in the pod, on the host's filesystem (this host has no
        # NVIDIA driver: the host checks fail; the node's side passes).
        out = cluster.kubectl("-n", NS, "exec", name, "--", "gpulet", "doctor", "--root",
                              "/driver-root", "-o", "json",
                              "--status-socket", f"{cluster.base}/deployed/status/status.sock",
                              "--pod-resources-kubelet-socket",
                              f"{cluster.base}/kubelet/pod-resources/kubelet.sock", check=False)
        checks = {c["id"]: c for c in json.loads(out)["checks"]}
        assert checks["kernel-module"]["status"] == "FAIL"
        assert checks["nvml"]["status"] == "PASS"
        for ok in ("kubelet", "registration", "pod-resources"):
            assert checks[ok]["status"] == "PASS", checks[ok]
        assert "nvidia.com/a100-deployed (16 device(s))" in checks["registration"]["message"]
        assert "answers List:" in checks["pod-resources"]["message"]  # the real kubelet's
        assert checks["node"]["status"] in ("PASS", "WARN"), checks["node"]
        assert f"Node {cluster.node}" in checks["node"]["message"]
        # deploy/confine/: its writes are the API server's to confine (issue 39).
        # deploy/ grants no read of the API server's /metrics: NodeRestriction,
        # which the node claim rests on, is not confirmed (issue 50, item 9)...
        assert checks["api-rights"]["status"] == "WARN", checks["api-rights"]
        assert f"confined to node {cluster.node}" in checks["api-rights"]["message"]
        assert "NodeRestriction not confirmed" in checks["api-rights"]["message"]
        # ...until the cluster's monitoring role lets doctor read it there.
        cluster.kubectl("create", "clusterrolebinding", "gpulet-e2e-monitoring", "--clusterrole",
                        "system:monitoring", f"--serviceaccount={NS}:gpulet")
        try:
            def rights():
                out = cluster.kubectl("-n", NS, "exec", name, "--", "gpulet", "doctor", "-o", "json",
                                      check=False)
                return {c["id"]: c for c in json.loads(out)["checks"]}["api-rights"]
            seen = wait(lambda: f"doctor did not see NodeRestriction: {rights()}",
                        lambda: (lambda r: r if r["status"] == "PASS" else None)(rights()), timeout=60)
            assert "NodeRestriction on" in seen["message"], seen
        finally:
            cluster.kubectl("delete", "clusterrolebinding", "gpulet-e2e-monitoring", check=False)
        confined(cluster, name)
        # Without the Node policy's binding, doctor says the writes are open.
        cluster.kubectl("delete", "validatingadmissionpolicybinding", "gpulet-node")
        try:  # the API server takes a moment to drop a deleted binding
            open_ = wait(lambda: f"doctor did not see the writes open: {rights()}",
                         lambda: (lambda r: r if r["status"] == "FAIL" else None)(rights()), timeout=60)
            assert "NOT confined" in open_["message"], open_
        finally:
            cluster.kubectl("apply", "-k", str(SOURCE / "deploy/confine"))
    finally:
        cluster.kubectl("delete", "-k", str(overlay), "--wait=true", "--timeout=60s", check=False)
        cluster.kubectl("label", "node", cluster.node, "gpulet.io/gpu-node-",
                        "nvidia.com/device-plugin.config-", check=False)
    wait("the gpulet pod did not go", lambda: not cluster.get("pods", "-n", NS)["items"]
         if cluster.kubectl("get", "ns", NS, check=False) else True)
    restore_session_labels(cluster)


OTHER = "gpulet-e2e-other"   # a second Node object, no kubelet behind it
NS = "gpulet-e2e"            # deploy/ installed in another namespace than its own (issue 50)


def confined(cluster, pod):
    """With a token bound to gpulet's pod (as the kubelet makes it: TokenRequest,
    the pod as bound object), every write to another node's objects, and every
    write of its own Node outside gpulet's fields, is refused with the policy's
    message; each write gpulet makes is accepted (dry runs, but the Event). A
    token that names no node writes nothing."""
    raw = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json"))
    where = raw["clusters"][0]["cluster"]
    trust = ["--certificate-authority", where["certificate-authority"]] if "certificate-authority" in where \
        else ["--insecure-skip-tls-verify"] if where.get("insecure-skip-tls-verify") else []
    if "certificate-authority-data" in where:
        import base64
        ca = Path(cluster.base) / "e2e-ca.crt"
        ca.write_bytes(base64.b64decode(where["certificate-authority-data"]))
        trust = ["--certificate-authority", str(ca)]
    bound = cluster.kubectl("-n", NS, "create", "token", "gpulet", "--bound-object-kind", "Pod",
                            "--bound-object-name", pod).strip()
    unbound = cluster.kubectl("-n", NS, "create", "token", "gpulet").strip()
    # The DRA policy and rights too, for the slices' rows.
    dra_rbac = (SOURCE / "deploy/dra/rbac.yaml").read_text().replace("namespace: gpulet", f"namespace: {NS}")
    cluster.kubectl("apply", "-f", str(SOURCE / "deploy/dra/confine.yaml"))
    cluster.kubectl("apply", "-f", "-", stdin=dra_rbac)
    # Every policy type-checks against every kind it matches (issue 50, item 7).
    for p in cluster.get("validatingadmissionpolicies")["items"]:
        if p["metadata"]["name"].startswith("gpulet-"):
            seen = wait(f"policy {p['metadata']['name']} was not type-checked",
                        lambda: (lambda x: x if x.get("status", {}).get("observedGeneration") ==
                                 x["metadata"]["generation"] else None)(
                            cluster.get("validatingadmissionpolicy", p["metadata"]["name"])))
            assert not seen["status"].get("typeChecking", {}).get("expressionWarnings"), seen["status"]
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": OTHER}}))

    def as_gpulet(token, *args, stdin=None):
        env = {k: v for k, v in cluster.env.items() if k != "KUBECONFIG"}
        env["KUBECONFIG"] = "/dev/null"
        return subprocess.run(["kubectl", "--server", where["server"], *trust, "--token", token, *args], input=stdin, capture_output=True, text=True,
                              env=env, timeout=60)

    def status_patch(token, node, dry, body=None):
        """PATCH nodes/NODE/status as gpulet sends it (kubectl would GET it first,
        which gpulet's rights do not allow); body: another patch than its own."""
        import ssl
        import urllib.error
        ctx = ssl.create_default_context(cafile=trust[1]) if trust[:1] == ["--certificate-authority"] \
            else ssl._create_unverified_context()
        req = urllib.request.Request(f"{where['server']}/api/v1/nodes/{node}/status" +
                                     ("?dryRun=All" if dry else ""), data=(body or status).encode(),
                                     method="PATCH",
                                     headers={"Authorization": f"Bearer {token}",
                                              "Content-Type": "application/strategic-merge-patch+json"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
                return subprocess.CompletedProcess([], 0, r.read().decode(), "")
        except urllib.error.HTTPError as e:
            return subprocess.CompletedProcess([], 1, "", e.read().decode())

    me = cluster.node

    def event(about, ns="default", name=None, **more):
        """An Event as gpulet writes it (name <node>.<hex>, its source), or changed."""
        return json.dumps({"apiVersion": "v1", "kind": "Event", "metadata": {
            "name": name or f"{me}.{os.urandom(6).hex()}", "namespace": ns},
            "involvedObject": {"kind": "Node", "name": about}, "reason": "GPUUnhealthy",
            "message": "e2e", "type": "Warning", "source": {"component": "gpulet", "host": me},
            "reportingComponent": "gpulet", "reportingInstance": me, **more})

    def slice_(node, name=None, pool=None):
        return json.dumps({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                           "metadata": {"name": name or f"{node}-gpu.nvidia.com-gpu-99"}, "spec": {
                               "driver": "gpu.nvidia.com", "nodeName": node,
                               "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1},
                               "devices": []}})

    status = '{"status":{"conditions":[{"type":"GPUUnhealthy","status":"True","reason":"XID79",' \
             '"message":"e2e"}]}}'
    taint = '{"spec":{"taints":[{"key":"gpulet.io/gpu-fault","value":"XID79","effect":"NoSchedule"}]}}'
    dry = "--dry-run=server"
    refused = [  # (what, kubectl args, stdin, the policy's words)
        ("another Node's labels", ["label", "node", OTHER, "nvidia.com/gpu.present=true", dry], None,
         f"gpulet of node {me} may not change Node {OTHER}"),
        ("a taint on another Node", ["patch", "node", OTHER, "--type", "merge", "-p", taint, dry], None,
         f"may not change Node {OTHER}"),
        ("another Node's condition", ("status", OTHER), None, f"may not change Node {OTHER}"),
        ("an Event about another Node", ["create", "-f", "-", dry], event(OTHER),
         "may write Events about its own Node only"),
        ("a slice of another node", ["create", "-f", "-", dry], slice_(OTHER),
         f"may write ResourceSlices of its own node only, not of {OTHER}"),
        ("a label not gpulet's on its own Node", ["label", "node", me, "example.com/x=1", dry], None,
         "not example.com/x"),
        ("another taint on its own Node", ["patch", "node", me, "--type", "merge", "-p",
                                           '{"spec":{"taints":[{"key":"evil","effect":"NoExecute"}]}}',
                                           dry], None, "only its own taint gpulet.io/gpu-fault"),
        # issue 50: what nodes/status stored, and the taint gpulet never writes
        ("its taint as NoExecute", ["patch", "node", me, "--type", "merge", "-p",
                                    taint.replace("NoSchedule", "NoExecute"), dry], None,
         "gpulet's taint gpulet.io/gpu-fault is NoSchedule only"),
        ("a label through nodes/status",
         ("status", me, '{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}'), None,
         "gpulet changes no label through nodes/status"),
        ("an annotation through nodes/status",
         ("status", me, '{"metadata":{"annotations":{"example.com/x":"1"}}}'), None,
         "gpulet changes no annotation through nodes/status"),
        # issue 50: slices squatted or in another's pool; Events elsewhere, as another
        ("a slice named as another node's", ["create", "-f", "-", dry],
         slice_(me, name=f"{OTHER}-gpu.nvidia.com"),
         f"names its ResourceSlices {me}-gpu.nvidia.com[-...] only, not {OTHER}-gpu.nvidia.com"),
        ("a slice in another node's pool", ["create", "-f", "-", dry], slice_(me, pool=OTHER),
         f"may publish in its own pool {me} only"),
        # (the API server takes a Node's Event elsewhere once it names a namespace)
        ("an Event in another namespace", ["create", "-f", "-", dry],
         event(me, ns=NS, involvedObject={"kind": "Node", "name": me, "namespace": NS}),
         f"may write Events in the namespace default only, not in {NS}"),
        ("an Event under another node's name", ["create", "-f", "-", dry],
         event(me, name=f"{OTHER}.1a2b"), f"names its Events {me}.<hex> only"),
        ("an Event as another node's kubelet", ["create", "-f", "-", dry],
         event(me, source={"component": "kubelet", "host": OTHER}), "reports as gpulet"),
        ("an Event with a related object", ["create", "-f", "-", dry],
         event(me, related={"kind": "Node", "name": OTHER}), "with no related object"),
        ("an owner through nodes/status",
         ("status", me, '{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap",'
                        '"name":"gone","uid":"00000000-0000-0000-0000-000000000000"}]}}'), None,
         "may not change a Node's ownerReferences or finalizers"),
    ]
    run = lambda token, args, stdin: status_patch(token, args[1], True, *args[2:]) \
        if args[0] == "status" else as_gpulet(token, *args, stdin=stdin)
    for what, args, stdin, words in refused:
        # A policy just applied takes the API server a moment to enforce.
        seen = []
        wait(lambda: f"{what}: {seen[-1].stdout} {seen[-1].stderr}",
             lambda: (seen.append(run(bound, args, stdin)) or
                      (seen[-1].returncode != 0 and words in seen[-1].stderr)), timeout=30)
        assert "denied request" in seen[-1].stderr, f"{what}: not the policy's refusal: {seen[-1].stderr}"
    allowed = [
        ("a label of gpulet's on its own Node", ["label", "node", me, "nvidia.com/e2e=1", dry], None),
        ("its taint on its own Node", ["patch", "node", me, "--type", "merge", "-p", taint, dry], None),
        ("its condition on its own Node", ("status", me), None),
        ("its own node's slice", ["create", "-f", "-", dry], slice_(me)),
        ("its counter slice", ["create", "-f", "-", dry], slice_(me, name=f"{me}-gpu.nvidia.com-counters-1")),
        ("an Event about its own Node", ["create", "-f", "-", "-o", "name"], event(me)),
    ]
    made = []
    for what, args, stdin in allowed:
        p = run(bound, args, stdin)
        assert p.returncode == 0, f"{what}: {p.stderr}"
        made += [x for x in p.stdout.split() if x.startswith("event")]
    p = as_gpulet(unbound, "label", "node", me, "nvidia.com/e2e=1", dry)
    assert p.returncode != 0 and "names no node" in p.stderr, p.stderr
    for x in made:
        cluster.kubectl("-n", "default", "delete", x, check=False)
    cluster.kubectl("delete", "node", OTHER, check=False)
    cluster.kubectl("delete", "-f", str(SOURCE / "deploy/dra/confine.yaml"), check=False)
    cluster.kubectl("delete", "-f", "-", stdin=dra_rbac, check=False)


def restore_session_labels(cluster):
    """The session's gpulet takes the Node's labels back at its next change."""
    node = lambda: cluster.get("node", cluster.node)
    cluster.sim("xid", "7", "79")
    wait("the session's labels did not come back",
         lambda: node()["metadata"]["labels"].get("nvidia.com/gpu.product") == "NVIDIA-H100-80GB-HBM3",
         timeout=30)
    cluster.sim("recover", "7")
    wait("GPU 7 did not recover", lambda: node()["metadata"]["labels"].get("gpulet.io/gpu.healthy") == "8",
         timeout=30)


# NVIDIA's DaemonSets as they ship. The chart (deployments/helm/
# nvidia-device-plugin/values.yaml) gives the device plugin and GFD these
# tolerations and three ORed node affinity terms; its static manifest
# (nvidia-device-plugin.yml) gives no affinity at all.
CHART_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present",
                               "operator": "In", "values": ["true"]}]},
        {"matchExpressions": [{"key": "feature.node.kubernetes.io/cpu-model.vendor_id",
                               "operator": "In", "values": ["NVIDIA"]}]},
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In",
                               "values": ["true"]}]}]}}}
CHART_TOLERATIONS = [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                     {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
NVIDIA_NS = "nvidia-device-plugin"
GPU_LABELS = ("feature.node.kubernetes.io/pci-10de.present", "feature.node.kubernetes.io/cpu-model.vendor_id",
              "nvidia.com/gpu.present")
# What deploy/replace-nvidia shipped before: a strategic merge patch, which
# replaces nodeSelectorTerms whole (it is an atomic list).
OLD_STRATEGIC_PATCH = {"spec": {"template": {"spec": {"affinity": {"nodeAffinity": {
    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "gpulet.io/replaces-nvidia", "operator": "NotIn", "values": ["true"]}]}]}}}}}}}


def nvidia_daemonset(name, container, affinity=CHART_AFFINITY, volumes=()):
    spec = {"priorityClassName": "system-node-critical", "tolerations": CHART_TOLERATIONS,
            "terminationGracePeriodSeconds": 1, "containers": [container],
            "volumes": list(volumes)}
    if affinity:
        spec["affinity"] = affinity
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": NVIDIA_NS},
            "spec": {"selector": {"matchLabels": {"name": name}},
                     "template": {"metadata": {"labels": {"name": name}}, "spec": spec}}}


def sleeper(cluster):
    return {"name": "c", "image": cluster.env["K8S_BUSYBOX_IMAGE"], "command": ["sleep", "3600"]}


# A stand-in for NVIDIA's device plugin: gpulet's image serving the same
# A100s (node_root's driver) under the same resource name, as NVIDIA's
# plugin would serve a real node's.
def stand_in(root):
    return nvidia_daemonset("nvidia-device-plugin-daemonset", {
        "name": "nvidia-device-plugin-ctr", "image": IMAGE, "imagePullPolicy": "Never",
        "args": ["agent", "--labels", "none", "--no-metrics",
                 "--config-file", "/config/config.yaml", "--status-socket", "/tmp/s.sock"],
        "env": [{"name": "NVIDIA_DRIVER_ROOT", "value": root},
                {"name": "CONTAINER_DRIVER_ROOT", "value": "/driver-root"},
                {"name": "GPULET_SIM_SCENARIO", "value": "a100-2x4"}],
        "volumeMounts": [{"name": "dp", "mountPath": "/var/lib/kubelet/device-plugins"},
                         {"name": "config", "mountPath": "/config"},
                         {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True}]},
        volumes=[{"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                 {"name": "config", "configMap": {"name": "stand-in-config"}},
                 {"name": "driver-root", "hostPath": {"path": root}}])


def desired(cluster, name, ns=NVIDIA_NS):
    """How many nodes the DaemonSet controller wants name on, once it has
    seen the DaemonSet's last change."""
    def settled():
        ds = cluster.get("ds", name, "-n", ns)
        status = ds.get("status", {})
        if status.get("observedGeneration", 0) >= ds["metadata"]["generation"]:
            return (status.get("desiredNumberScheduled", 0),)
    return wait(f"the DaemonSet controller never saw {name}", settled)[0]


def wait_desired(cluster, names, want, ns=NVIDIA_NS):
    for name in names:
        wait(lambda: f"{name} wants {desired(cluster, name, ns)} node(s), not {want}",
             lambda: desired(cluster, name, ns) == want, timeout=60)


def replace_patch(cluster, name):
    """gpulet replace-nvidia's patch for the DaemonSet, as the docs say to make it."""
    ds = cluster.kubectl("-n", NVIDIA_NS, "get", "ds", name, "-o", "json")
    p = subprocess.run([GPULET, "replace-nvidia"], input=ds, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_replace_nvidia_node_by_node(cluster, image, gpulet, node_root):
    """deploy/replace-nvidia on DaemonSets shaped as NVIDIA ships them.
    On a node with no GPU label, the patched ones start nowhere they did
    not before (the old strategic patch made the chart's run there). With
    the GPU label they run; labelled for gpulet, every one of NVIDIA's
    leaves, gpulet's comes, the resource stays, and a pod holding a GPU
    keeps running; the label removed, NVIDIA's come back and gpulet's goes."""
    with labels_left_alone(gpulet):
        replace_nvidia_node_by_node(cluster, image, node_root)
    restore_session_labels(cluster)  # through the session's gpulet, going on again


def replace_nvidia_node_by_node(cluster, image, root):
    k = cluster.kubectl
    node = lambda: cluster.get("node", cluster.node)
    alloc = lambda: node()["status"]["allocatable"].get("nvidia.com/a100-deployed")
    chart = ("nvidia-device-plugin-daemonset", "gpu-feature-discovery")
    static, control = "nvidia-device-plugin-static", "strategic-patch-control"
    # A node with none of the chart's labels: a CPU-only node, for the chart.
    k("label", "node", cluster.node, *[f"{l}-" for l in GPU_LABELS])
    k("create", "namespace", NVIDIA_NS)
    k("-n", NVIDIA_NS, "create", "configmap", "stand-in-config",
      "--from-literal=config.yaml=version: v1\nresources:\n  gpus: [{pattern: '*', name: a100-deployed}]\n")
    for ds in (stand_in(root), nvidia_daemonset(chart[1], sleeper(cluster)),
               nvidia_daemonset(static, sleeper(cluster), affinity=None),
               nvidia_daemonset(control, sleeper(cluster))):
        k("apply", "-f", "-", stdin=json.dumps(ds))
    overlay = Path(cluster.base) / "replace-overlay"
    overlay.mkdir(exist_ok=True)
    server = k("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
    host, port = server.removeprefix("https://").rsplit(":", 1)
    (overlay / "kustomization.yaml").write_text(OVERLAY.format(
        deploy=os.path.relpath(SOURCE / "deploy" / "replace-nvidia", overlay), base=cluster.base,
        api_host=host, api_port=port, root=root, ns="gpulet"))
    holder = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holds-an-a100"},
              "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                  "name": "c", "image": cluster.env["K8S_BUSYBOX_IMAGE"],
                  "command": ["sh", "-c", "sleep 3600"],
                  "resources": {"limits": {"nvidia.com/a100-deployed": 1}}}]}}
    try:
        wait_desired(cluster, chart + (control,), 0)
        # The patches, as docs/deploy.md says: the chart's shipped file for
        # the chart's device plugin (it is what gpulet replace-nvidia makes
        # for it), gpulet replace-nvidia for the others.
        shipped = SOURCE / "deploy" / "replace-nvidia" / "nvidia-chart-patch.json"
        assert json.loads(replace_patch(cluster, chart[0])) == json.loads(shipped.read_text())
        k("-n", NVIDIA_NS, "patch", "ds", chart[0], "--type", "json", "--patch-file", str(shipped))
        for name in (chart[1], static):
            k("-n", NVIDIA_NS, "patch", "ds", name, "--type", "json", "-p", replace_patch(cluster, name))
        assert json.loads(replace_patch(cluster, static)) == []  # patched once is enough
        k("-n", NVIDIA_NS, "patch", "ds", control, "--type", "strategic", "-p",
          json.dumps(OLD_STRATEGIC_PATCH))
        # CPU-only: the chart's stay off it, the static manifest's runs as it
        # always did; the old patch put the chart's on it.
        wait_desired(cluster, chart, 0)
        wait_desired(cluster, (static, control), 1)
        k("-n", NVIDIA_NS, "delete", "ds", control)
        # A GPU node (NFD's label): NVIDIA's serve it.
        k("label", "node", cluster.node, "feature.node.kubernetes.io/pci-10de.present=true")
        wait_desired(cluster, chart + (static,), 1)
        wait("the stand-in never served", lambda: alloc() == "8")
        k("apply", "-f", "-", stdin=json.dumps(holder))
        cluster.wait_phase("holds-an-a100", "Running")
        uid = cluster.get("pod", "holds-an-a100")["metadata"]["uid"]
        # gpulet is installed but runs nowhere until a node is labelled.
        k("apply", "-k", str(overlay))
        assert desired(cluster, "gpulet", "gpulet") == 0
        k("label", "node", cluster.node, "gpulet.io/replaces-nvidia=true")
        wait_desired(cluster, chart + (static,), 0)
        wait("NVIDIA's pods did not leave the node",
             lambda: not cluster.get("pods", "-n", NVIDIA_NS)["items"])
        wait(lambda: k("describe", "pods", "-n", "gpulet", check=False)[-3000:],
             lambda: [p for p in cluster.get("pods", "-n", "gpulet")["items"]
                      if all(c.get("ready") for c in p["status"].get("containerStatuses", [{}]))])
        wait("gpulet did not take over the resource", lambda: alloc() == "8")
        logs = k("logs", "-n", "gpulet", "ds/gpulet")
        assert "registered nvidia.com/a100-deployed with the kubelet" in logs, logs
        held = cluster.get("pod", "holds-an-a100")
        assert held["metadata"]["uid"] == uid and held["status"]["phase"] == "Running"
        assert held["status"]["containerStatuses"][0]["restartCount"] == 0
        # Back: the label removed, NVIDIA's return and gpulet's leaves.
        k("label", "node", cluster.node, "gpulet.io/replaces-nvidia-")
        wait_desired(cluster, chart + (static,), 1)
        assert desired(cluster, "gpulet", "gpulet") == 0
    finally:
        k("delete", "pod", "holds-an-a100", "--wait=false", check=False)
        k("delete", "-k", str(overlay), "--wait=true", "--timeout=60s", check=False)
        k("delete", "namespace", NVIDIA_NS, "--wait=true", "--timeout=60s", check=False)
        k("label", "node", cluster.node, "gpulet.io/replaces-nvidia-",
          "feature.node.kubernetes.io/pci-10de.present-", check=False)
    wait("the gpulet pod did not go", lambda: not cluster.get("pods", "-n", "gpulet")["items"]
         if k("get", "ns", "gpulet", check=False) else True)
