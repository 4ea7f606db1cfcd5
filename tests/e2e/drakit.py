"""What the DRA end-to-end tests share: a gpulet agent as the node's DRA
driver (restartable), the version of resource.k8s.io the cluster serves
(v1 from Kubernetes 1.34, v1beta1 on 1.32) and the shapes that differ
between them, and NVIDIA's DeviceClasses as deploy/ ships them."""
import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import GPULET, SIM_LIB, SOURCE, skip_or_fail

FAKE_MPS = str(Path(__file__).resolve().parents[1] / "integration" / "fake_mps_control.py")
CDI_DIR = Path("/var/run/cdi")  # containerd reads only the host's


def api_version(cluster):
    """The newest version of resource.k8s.io the cluster serves slices in, or None."""
    for version in ("v1", "v1beta2", "v1beta1"):
        p = subprocess.run(["kubectl", "get", "--raw", f"/apis/resource.k8s.io/{version}"],
                           capture_output=True, text=True, env=cluster.env, timeout=30)
        if p.returncode == 0 and '"resourceslices"' in p.stdout:
            return version
    return None


def request(version, name, device_class, selectors=None, **extra):
    """One device request of a claim: under `exactly` from v1beta2 on."""
    body = {"deviceClassName": device_class, **extra}
    if selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": body} if version != "v1beta1" else {"name": name, **body}


def attributes(device):
    """A slice device's attributes: under `basic` in v1beta1."""
    return device.get("basic", device)["attributes"]


def deviceclasses(version):
    """deploy/'s DeviceClasses file for the cluster's version."""
    return SOURCE / "deploy" / ("dra" if version != "v1beta1" else "dra-v1beta1") / "deviceclasses.yaml"


def wait(what, fn, timeout=60, every=0.2):
    """fn's first true value, polled; what (a string, or a function that
    says it) fails the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not (v := fn()):
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(every)
    return v


def claim_pod(cluster, version, name, req, command):
    """A ResourceClaimTemplate of one request (request()'s), and a pod whose
    one container runs command with the claim it makes."""
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name}, "spec": {"spec": {"devices": {"requests": [req]}}}}))
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
                 "containers": [{"name": "c", "image": cluster.env["K8S_BUSYBOX_IMAGE"],
                                 "command": ["sh", "-c", command],
                                 "resources": {"claims": [{"name": "gpu"}]}}]}}))


def scheduling_failure(cluster, pod):
    """The scheduler's FailedScheduling message for pod, or None yet."""
    events = json.loads(cluster.kubectl("get", "events", "--field-selector",
                                        f"involvedObject.name={pod}", "-o", "json"))["items"]
    return next((e["message"] for e in events if e["reason"] == "FailedScheduling"), None)


def remove_cdi_specs(made):
    """The CDI specs a driver left in the host's directory; the directory
    too where the test made it."""
    for spec in [CDI_DIR / "nvidia.com-gpu.json", *CDI_DIR.glob("gpu.nvidia.com-claim_*.json")]:
        spec.unlink(missing_ok=True)
    if made and CDI_DIR.exists():
        CDI_DIR.rmdir()


def pool_slices(cluster):
    """The node's gpu.nvidia.com pool, where complete: its slices of the
    newest generation, as many as it says it has; None otherwise."""
    slices = [s for s in cluster.get("resourceslices")["items"]
              if s["spec"]["driver"] == "gpu.nvidia.com" and s["spec"].get("nodeName") == cluster.node]
    if not slices:
        return None
    newest = max(s["spec"]["pool"]["generation"] for s in slices)
    slices = [s for s in slices if s["spec"]["pool"]["generation"] == newest]
    return slices if len(slices) == slices[0]["spec"]["pool"]["resourceSliceCount"] else None


def slice_devices(cluster):
    """The devices of the node's pool (None while it is incomplete)."""
    slices = pool_slices(cluster)
    return None if slices is None else [d for s in slices for d in s["spec"].get("devices", [])]


def wait_devices(cluster, n, timeout=60):
    deadline = time.monotonic() + timeout
    while (devs := slice_devices(cluster)) is None or len(devs) != n:
        assert time.monotonic() < deadline, devs
        time.sleep(0.5)
    return devs


class Driver:
    """One gpulet agent with --dra all on a simulated node, restartable."""

    def __init__(self, cluster, name, simulate, *args):
        self.cluster = cluster
        base = Path(cluster.base)
        self.root = base / "driver-stand-in"
        if not self.root.exists():
            subprocess.run([GPULET, "sim", "driver-root", str(self.root)], check=True, timeout=30)
        self.name = name
        self.log_path = base / f"gpulet-{name}.log"
        self.env = dict(cluster.env, GPULET_SIM_LIB=SIM_LIB, NODE_NAME=cluster.node,
                        GPULET_SIM_CONTROL=str(base / f"sim-{name}.sock"))
        self.simulate, self.args = simulate, args
        self.proc = None
        with socket.socket() as sk:  # a free port for metrics
            sk.bind(("127.0.0.1", 0))
            self.metrics = f"127.0.0.1:{sk.getsockname()[1]}"

    def start(self, dra="all"):
        """Started as the node's DRA driver, or with dra="off" as its device plugin."""
        log = open(self.log_path, "a")
        base = self.cluster.base
        self.proc = subprocess.Popen(
            [GPULET, "agent", "--simulate", self.simulate, "--dra", dra,
             # The device-plugin directory is the kubelet's fixed one; the
             # registration directory follows its --root-dir.
             "--kubelet-root", "/var/lib/kubelet",
             "--kubelet-registry-dir", f"{base}/kubelet/plugins_registry",
             "--dra-plugin-dir", f"{base}/dra-{self.name}",
             "--pod-resources-kubelet-socket", self.cluster.env["K8S_POD_RESOURCES_SOCKET"],
             "--nvidia-driver-root", str(self.root),
             # No --cdi-spec-dir: pointed at the kubelet, a simulated agent
             # writes its specs where the kubelet's runtime reads them.
             "--nvidia-dev-root", self.cluster.env["K8S_DEV_ROOT"],
             "--labels", "none", "--metrics-listen", self.metrics, "--fault-report", "none",
             "--mps-root", f"{base}/mps", "--mps-control", FAKE_MPS,
             "--status-socket", f"{base}/gpulet-{self.name}.sock", *self.args],
            stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0, self.log()

    def log(self):
        return self.log_path.read_text()

    def wait_log(self, text, count=1, timeout=60):
        deadline = time.monotonic() + timeout
        while self.log().count(text) < count:
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.log()[-3000:]}"
            time.sleep(0.2)

    def timeslice(self, uuid):
        """The time slice the stand-in nvidia-smi last set on a GPU (None: never)."""
        f = self.root / "var" / "lib" / "gpulet-sim" / "timeslice" / uuid
        return int(f.read_text()) if f.exists() else None


def driver_fixture(cluster, name, simulate, *args):
    """A started Driver with NVIDIA's DeviceClasses applied, for a module;
    whatever fails, it is stopped and the CDI specs it left in the host's
    directory removed."""
    version = api_version(cluster)
    if not version:  # the kits serve it: in CI, a failure
        skip_or_fail(f"the cluster at {cluster.base} serves no ResourceSlices (DRA needs 1.32+)")
    made = not CDI_DIR.exists()  # the host's: what this test makes there, it removes
    d = Driver(cluster, name, simulate, *args)
    d.version = version
    try:
        d.start()
        cluster.kubectl("apply", "-f", str(deviceclasses(version)))
        # Registered and published before a test's first pod: a pod that
        # comes sooner waits out the scheduler's and the kubelet's backoff.
        d.wait_log("DRA: registered gpu.nvidia.com with the kubelet")
        deadline = time.monotonic() + 60
        while not pool_slices(cluster):
            assert time.monotonic() < deadline, d.log()[-3000:]
            time.sleep(0.2)
        yield d
    finally:
        if d.proc and d.proc.poll() is None:
            d.stop()
        remove_cdi_specs(made)


def driver_fixture_v1(cluster, name, simulate, *args, needs):
    """driver_fixture where the cluster serves resource.k8s.io/v1 (1.34+);
    skipped elsewhere, saying what needs it."""
    gen = driver_fixture(cluster, name, simulate, *args)
    try:
        d = next(gen)
        if d.version != "v1":
            pytest.skip(f"{needs} need resource.k8s.io/v1 (Kubernetes 1.34+); the cluster serves {d.version}")
        yield d
    finally:
        gen.close()  # the driver stopped, its CDI specs removed
