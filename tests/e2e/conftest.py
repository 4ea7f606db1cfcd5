"""A real single-node Kubernetes 1.36 (../shared/k8s-v1/cluster.sh) with gpulet
as its device plugin, on the simulator, for tests that look at what a cluster
operator sees: the Node, pods, the kubelet's own behaviour.

Needs root, ../shared/k8s-v1 (or $GPULET_K8S) and kubectl; otherwise every test
here is skipped with the reason."""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

SOURCE = Path(os.environ.get("GPULET_SOURCE", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("GPULET_BUILD", SOURCE / "build"))
GPULET = os.environ.get("GPULET_BIN", str(BUILD / "gpulet"))
SIM_LIB = os.environ.get("GPULET_SIM_LIB", str(BUILD / "libgpulet-nvml-sim.so"))
K8S = Path(os.environ.get("GPULET_K8S", SOURCE.parent / "shared" / "k8s-v1"))
METRICS = "127.0.0.1:19402"


CI = os.environ.get("CI") == "true"


def skip_or_fail(reason):
    """A test that cannot run here: skipped, but in CI, whose machine is
    meant to run it, failed (tests/README.md lists the skips that remain)."""
    (pytest.fail if CI else pytest.skip)(reason)


def why_not():
    """Why the cluster cannot run here, or None. A kubelet socket that no
    kubelet listens on (one left by a run that died) is cleared."""
    if os.geteuid() != 0:
        return "the real kubelet needs root"
    if not (K8S / "cluster.sh").exists():
        return f"no cluster at {K8S} (set {os.environ.get('GPULET_K8S_FROM', 'GPULET_K8S')})"
    if not shutil.which("kubectl"):
        return "kubectl is not on PATH (cluster.sh needs it)"
    sock = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
    if sock.exists():
        import socket
        with socket.socket(socket.AF_UNIX) as s:
            if s.connect_ex(str(sock)) == 0:
                return "another kubelet serves /var/lib/kubelet/device-plugins"
        sock.unlink()
    return None


class Cluster:
    def __init__(self, env):
        self.env = env
        self.base = env["K8S_BASE"]
        self.node = env["K8S_NODE"]

    def kubectl(self, *args, stdin=None, check=True):
        p = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True,
                           env=self.env, timeout=60)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {p.stderr}")
        return p.stdout

    def get(self, *args):
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def gpus(self, field="allocatable"):
        return self.get("node", self.node)["status"][field].get("nvidia.com/gpu")

    def wait_gpus(self, want, field="allocatable", timeout=60):
        """The kubelet reports device changes with its node status, every few seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.gpus(field) == want:
                return
            time.sleep(0.5)
        raise AssertionError(f"node {field} nvidia.com/gpu is {self.gpus(field)}, not {want}")

    def pod(self, name, gpus, command="env; ls /dev; sleep 3600"):
        spec = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": self.env["K8S_BUSYBOX_IMAGE"],
                                     "command": ["sh", "-c", command],
                                     "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}
        self.kubectl("apply", "-f", "-", stdin=json.dumps(spec))

    def wait_phase(self, name, phase, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.get("pod", name).get("status", {}).get("phase") == phase:
                return
            time.sleep(0.5)
        raise AssertionError(f"pod {name} is not {phase}: {self.kubectl('describe', 'pod', name)}")

    def sim(self, *args):
        p = subprocess.run([GPULET, "sim", *args], capture_output=True, text=True, env=self.env,
                           timeout=10)
        assert p.returncode == 0, p.stderr
        return p.stdout


@pytest.fixture(scope="session")
def cluster():
    reason = why_not()
    if reason:
        skip_or_fail(f"end-to-end tests skipped: {reason}")
    up = subprocess.run([str(K8S / "cluster.sh"), "up", "--gpus", "8"], capture_output=True,
                        text=True, timeout=300)
    if up.returncode != 0:
        pytest.fail(f"cluster.sh up failed:\n{up.stderr[-3000:]}")
    env = dict(os.environ)
    for line in up.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    env["GPULET_SIM_CONTROL"] = f"{env['K8S_BASE']}/sim.sock"
    c = Cluster(env)
    try:
        yield c
    finally:
        subprocess.run([str(K8S / "cluster.sh"), "down", c.base], capture_output=True, timeout=300)


def shipped_cluster_role(name):
    """deploy/base/rbac.yaml's ClusterRole, under another name (so that
    `kubectl delete -k deploy/` leaves the session's alone)."""
    import yaml
    docs = yaml.safe_load_all((SOURCE / "deploy" / "base" / "rbac.yaml").read_text())
    role = next(d for d in docs if d and d["kind"] == "ClusterRole")
    role["metadata"] = {"name": name}
    return role


def service_account(cluster, name, rbac):
    """A ServiceAccount's credentials laid out as a pod sees them (token and
    CA in one directory) and the environment that points gpulet at them:
    the in-cluster path of a DaemonSet pod. rbac: bind the ClusterRole that
    deploy/base/rbac.yaml ships, or none."""
    k = cluster.kubectl
    k("create", "serviceaccount", name, "-n", "kube-system")
    if rbac:
        k("apply", "-f", "-", stdin=json.dumps(shipped_cluster_role(f"gpulet-e2e-{name}")))
        k("create", "clusterrolebinding", f"gpulet-e2e-{name}", f"--clusterrole=gpulet-e2e-{name}",
          f"--serviceaccount=kube-system:{name}")
    sa = Path(cluster.base) / f"sa-{name}"
    sa.mkdir()
    (sa / "token").write_text(k("create", "token", name, "-n", "kube-system", "--duration=2h"))
    shutil.copy(Path(cluster.base) / "pki" / "ca.crt", sa / "ca.crt")
    server = k("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
    host, port = server.removeprefix("https://").rsplit(":", 1)
    env = {k: v for k, v in cluster.env.items() if k != "KUBECONFIG"}
    env.update(KUBERNETES_SERVICE_HOST=host, KUBERNETES_SERVICE_PORT=port,
               GPULET_SERVICEACCOUNT_DIR=str(sa), NODE_NAME=cluster.node)
    return env


@pytest.fixture(scope="session")
def gpulet(cluster):
    """gpulet as the node's device plugin, flags as ../shared/k8s-v1/README.md says,
    and labelling its Node with a service account's least rights. Before it
    starts, the Node gets someone else's label and a stale one of gpulet's."""
    env = cluster.env
    cluster.kubectl("label", "node", cluster.node, "example.com/keep=yes",
                    "nvidia.com/gpu.stale-test=1")
    cluster.kubectl("annotate", "node", cluster.node,
                    "gpulet.io/labels=nvidia.com/gpu.stale-test,nvidia.com/gpu.count")
    (Path(cluster.base) / "product_name").write_text("DGX H100\n")
    log = open(f"{cluster.base}/gpulet.log", "w")
    proc = subprocess.Popen(
        [GPULET, "agent", "--simulate", "dgx-h100", "--kubelet-root", "/var/lib/kubelet",
         "--pod-resources-kubelet-socket", env["K8S_POD_RESOURCES_SOCKET"],
         "--nvidia-dev-root", env["K8S_DEV_ROOT"], "--pass-device-specs",
         "--hostname", cluster.node, "--status-socket", f"{cluster.base}/gpulet.sock",
         "--metrics-listen", METRICS, "--pod-resources-interval-ms", "1000",
         "--health-probe-ms", "500", "--labels", "api",
         "--machine-type-file", f"{cluster.base}/product_name"],
        stdout=log, stderr=subprocess.STDOUT,
        env=dict(service_account(cluster, "gpulet", rbac=True), GPULET_SIM_LIB=SIM_LIB))
    cluster.gpulet_log = Path(f"{cluster.base}/gpulet.log")
    try:
        yield proc
    finally:
        # First: its socket lives in the directory `cluster.sh down` removes.
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        log.close()


@contextlib.contextmanager
def labels_left_alone(gpulet):
    """The session's gpulet stopped (SIGSTOP) meanwhile: it keeps its labels
    on its Node, and puts back at once a label of its that another removes
    or changes; a test that labels the Node as NVIDIA's stack would (a
    CPU-only node, one that is MPS-capable) does so with it stopped. It
    catches up when it goes on (SIGCONT)."""
    gpulet.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        gpulet.send_signal(signal.SIGCONT)


@contextlib.contextmanager
def extra_gpulet(cluster, name, *args):
    """A second gpulet beside the session's (its own resource names), on a
    simulator control socket of its own, logging to <base>/gpulet-<name>.log.
    Yields the environment in which `gpulet sim` reaches it."""
    base = Path(cluster.base)
    env = dict(cluster.env, GPULET_SIM_LIB=SIM_LIB, GPULET_SIM_CONTROL=str(base / f"sim-{name}.sock"))
    log = open(base / f"gpulet-{name}.log", "w")
    proc = subprocess.Popen([GPULET, "agent", "--kubelet-root", "/var/lib/kubelet", "--labels", "none",
                             "--status-socket", str(base / f"gpulet-{name}.sock"), *args],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        yield env
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        log.close()
