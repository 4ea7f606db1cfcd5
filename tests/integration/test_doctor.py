"""gpulet doctor against a fake host root that is right, then broken one
thing at a time: each fault gives its FAIL (or WARN) and its fix, and the
other checks keep their results. The root holds the driver's procfs files,
a stand-in driver tree (gpulet sim driver-root), device nodes (mknod, as
root), a kernel log, containerd's config, a grpcio kubelet and PodResources,
a running agent and a stand-in API server; NVML is the simulator, with
faults from GPULET_SIM_FAULTS. Also: a hung GPU, JSON output, bad input."""
import json
import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import GPULET, SANITIZED, SIM_LIB, check_clean, needs
from fakeapi import FakeAPI
from limits import limit
from test_procfs import fake_procfs

ROOT_USER = os.geteuid() == 0
VERSION = "580.159.04"
PRESET = "dgx-h100"
KMSG = ("6,100,2000000,-;nvidia: loading out-of-tree module taints kernel.\n"
        "4,101,3000000,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04\n"
        "4,102,500000000,-;NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python, Graphics "
        "Exception: ESR 0x5\n")
CONTAINERD = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n' \
             '  [plugins."io.containerd.grpc.v1.cri".containerd]\n    default_runtime_name = "nvidia"\n'


def base_env(d):
    env = dict(os.environ, GPULET_SIM_LIB=SIM_LIB, GPULET_SIM_CONTROL=str(d / "sim.sock"))
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NODE_NAME", "GPULET_CONFIG_MAP",
                "GPULET_STATUS_SOCKET", "GPULET_KUBELET_ROOT", "GPULET_CDI_SPEC_DIR",
                "GPULET_SIM_FAULTS"):
        env.pop(var, None)
    return env


def make_root(root, gpus):
    """A GPU node's files under root, all of them right."""
    proc = root / "proc"
    fake_procfs(proc, gpus)
    (proc / "driver" / "nvidia" / "version").write_text(
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {VERSION}  Release Build  "
        "(dvs-builder@U22)  Thu Oct 30 2026\nGCC version:  gcc version 12.2.0\n")
    (proc / "devices").write_text("Character devices:\n  1 mem\n195 nvidia-frontend\n"
                                  "510 nvidia-uvm\n\nBlock devices:\n  8 sd\n")
    (proc / "uptime").write_text("1000.00 3000.00\n")
    (root / "sys" / "module" / "nvidia_uvm").mkdir(parents=True)
    subprocess.run([GPULET, "sim", "driver-root", str(root), VERSION], check=True,
                   capture_output=True)
    dev = root / "dev"
    dev.mkdir()
    (dev / "kmsg").write_text(KMSG)
    if ROOT_USER:
        nodes = [("nvidiactl", 195, 255), ("nvidia-uvm", 510, 0), ("nvidia-uvm-tools", 510, 1)]
        nodes += [(f"nvidia{g['minor']}", 195, g["minor"]) for g in gpus]
        for name, major, minor in nodes:
            os.mknod(dev / name, 0o20666, os.makedev(major, minor))
            os.chmod(dev / name, 0o666)
    (root / "etc" / "containerd").mkdir(parents=True)
    (root / "etc" / "containerd" / "config.toml").write_text(CONTAINERD)
    for d in ("var/lib/kubelet", "run/gpulet", "var/run/cdi"):
        (root / d).mkdir(parents=True)


class Node:
    """The fake node, its peers, and `gpulet doctor` run against it."""

    def __init__(self, d, stubs):
        from kubelet import FakeKubelet, FakePodResources, load_podresources_stubs
        self.d, self.root = d, d / "root"
        self.env = base_env(d)
        self.gpus = json.loads(subprocess.run([GPULET, "list", "--simulate", PRESET, "-o", "json"],
                                              capture_output=True, text=True, env=self.env,
                                              check=True).stdout)["gpus"]
        make_root(self.root, self.gpus)
        kroot = self.root / "var/lib/kubelet"
        self.kubelet = FakeKubelet(kroot, *stubs)
        self.kubelet.start()
        self.podres = FakePodResources(kroot, *load_podresources_stubs(d / "pr-stubs"))
        self.podres.start()
        self.api = FakeAPI(node="n1", labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                              "nvidia.com/gpu.count": "8"})
        self.api.node["status"] = {"allocatable": {"nvidia.com/gpu": "8"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}
        self.kubeconfig = self.api.kubeconfig(d / "kubeconfig")
        # As in the DaemonSet: host paths named from the host, read under the root.
        self.log = open(d / "agent.log", "w")
        self.agent = subprocess.Popen(
            [GPULET, "agent", "--simulate", PRESET, "--no-metrics", "--labels", "none",
             "--kubelet-root", str(kroot), "--status-socket", str(self.root / "run/gpulet/status.sock"),
             "--container-driver-root", str(self.root), "--cdi-spec-dir", str(self.root / "var/run/cdi"),
             "--write-cdi-spec", "true"],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        self.kubelet.wait_registrations(1, timeout=30)
        deadline = time.monotonic() + 10
        while not (self.root / "var/run/cdi/nvidia.com-gpu.json").exists():
            assert time.monotonic() < deadline, (d / "agent.log").read_text()
            time.sleep(0.05)

    def doctor(self, *args, faults="", preset=PRESET, root=None):
        # Its simulator takes faults from GPULET_SIM_FAULTS; the control
        # socket is the agent's.
        env = dict(self.env, GPULET_SIM_FAULTS=faults, GPULET_SIM_CONTROL="off")
        p = subprocess.run(
            [GPULET, "doctor", "--root", str(root or self.root), "-o", "json", "--simulate", preset,
             "--kubelet-root", "/var/lib/kubelet", "--status-socket", "/run/gpulet/status.sock",
             "--kubeconfig", str(self.kubeconfig), "--node-name", "n1", *args],
            capture_output=True, text=True, env=env, timeout=60)
        check_clean(p.stderr)
        assert p.returncode in (0, 1, 2), p.stderr
        report = json.loads(p.stdout)
        report["exit"] = p.returncode
        report["by_id"] = {c["id"]: c for c in report["checks"]}
        return report

    def stop(self):
        self.agent.terminate()
        self.agent.wait(timeout=10)
        self.log.close()
        self.kubelet.stop()
        self.podres.stop()
        self.api.stop()


@pytest.fixture(scope="module")
def node(stubs):
    d = Path(tempfile.mkdtemp(prefix="gpulet-doc-"))
    n = Node(d, stubs)
    try:
        yield n
    finally:
        n.stop()
        shutil.rmtree(d, ignore_errors=True)


# What the right root gives: fabric and cdi-spec do not apply (no NVSwitch
# fabric in the simulator's preset; the envvar strategy), and without root
# no device node could be made.
BASE_SKIP = {"fabric", "cdi-spec", "dra", "mig-config"}
BASE_FAIL = set() if ROOT_USER else {"device-nodes"}


def base_status(check):
    """A check's status on the healthy root."""
    return "FAIL" if check in BASE_FAIL else "SKIP" if check in BASE_SKIP else "PASS"


def test_healthy_root(node):
    r = node.doctor()
    got = {i: c["status"] for i, c in r["by_id"].items()}
    want = {i: base_status(i) for i in got}
    assert got == want, json.dumps(r["checks"], indent=1)
    assert r["exit"] == (2 if BASE_FAIL else 0)
    assert "XID 13 on GPU 0 (0000:18:00)" in r["by_id"]["kernel-log"]["message"]
    assert "an application's fault" in r["by_id"]["kernel-log"]["message"]
    assert "registered: nvidia.com/gpu (8 device(s))" in r["by_id"]["registration"]["message"]
    assert "Node n1 is Ready; allocatable nvidia.com/gpu=8" in r["by_id"]["node"]["message"]
    assert "answers List: 0 pod(s) hold 0 GPU device(s)" in r["by_id"]["pod-resources"]["message"]
    assert r["summary"]["seconds"] < 30
    # The CDI spec the agent keeps is the one doctor would write.
    r = node.doctor("--device-list-strategy", "cdi-cri")
    assert r["by_id"]["cdi-spec"]["status"] == "PASS", r["by_id"]["cdi-spec"]


@contextmanager
def changed(path, text=None):
    """path with other text, or gone (text None), for the block."""
    away = Path(str(path) + ".away")
    if path.exists() or path.is_symlink():
        os.rename(path, away)
    if text is not None:
        path.write_text(text)
    try:
        yield
    finally:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        if away.exists() or away.is_symlink():
            os.rename(away, path)


def fault(node, check, status, message, fix, *args, also=(), **kw):
    """doctor on the root with one thing broken: check has status, message
    and fix, and every other check keeps its healthy result but those in
    also (the ones that fault reaches too, as the test says why)."""
    r = node.doctor(*args, **kw)
    c = r["by_id"][check]
    assert c["status"] == status, c
    assert message in c["message"], c
    assert fix in c.get("fix", ""), c
    assert r["exit"] == {"WARN": 1, "FAIL": 2}[status] or BASE_FAIL
    moved = {i: x for i, x in r["by_id"].items()
             if i != check and i not in also and x["status"] != base_status(i)}
    assert not moved, json.dumps(moved, indent=1)
    return r


def test_kernel_module_missing(node):
    with changed(node.root / "proc/driver/nvidia/version"):
        fault(node, "kernel-module", "FAIL", "the NVIDIA kernel module is not loaded", "modprobe nvidia",
              also=("driver-library",))  # nothing to compare the library with


def test_version_mismatch(node):
    with changed(node.root / "proc/driver/nvidia/version",
                 "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.10  Release Build\n"):
        r = fault(node, "driver-library", "FAIL",
                  "driver/library version mismatch: kernel module 570.86.10, libnvidia-ml "
                  "580.159.04", "reboot the node", also=("nvml",))
        assert r["by_id"]["kernel-module"]["status"] == "PASS"
        assert "NVML reports driver 580.159.04, the kernel module is 570.86.10" in \
            r["by_id"]["nvml"]["message"]


@needs(not ROOT_USER, "device nodes can be made only as root")
def test_device_node_wrong(node):
    with changed(node.root / "dev/nvidia3"):
        fault(node, "device-nodes", "FAIL", "nvidia3: missing", "nvidia-modprobe -c0 -u")
    os.chmod(node.root / "dev/nvidia2", 0o660)
    try:
        fault(node, "device-nodes", "WARN", "nvidia2: mode 660, not 666", "NVreg_DeviceFileMode")
    finally:
        os.chmod(node.root / "dev/nvidia2", 0o666)


def test_device_node_not_a_device(node):
    path = node.root / "dev/nvidia5"
    old = path.exists()
    if old:
        os.rename(path, node.d / "nvidia5.node")
    path.write_text("")
    try:
        fault(node, "device-nodes", "FAIL", "nvidia5: not a character device", "mknod")
    finally:
        path.unlink()
        if old:
            os.rename(node.d / "nvidia5.node", path)


def test_uvm_not_loaded(node):
    with changed(node.root / "proc/devices", "Character devices:\n195 nvidia-frontend\n"), \
            changed(node.root / "sys/module/nvidia_uvm"):
        fault(node, "nvidia-uvm", "FAIL", "nvidia-uvm is not loaded", "modprobe nvidia-uvm")


def test_gpu_faults(node):
    fault(node, "nvml", "FAIL", "GPU 3: GPU is lost", "drain the node and reboot", faults="lose 3")
    fault(node, "gpu-health", "FAIL", "GPU 2: a row remap failed", "replacing",
          faults="set 2 rows.failure=1")
    fault(node, "gpu-health", "WARN", "GPU 6: a row remap waits for a reset", "nvidia-smi -r -i N",
          faults="set 6 rows.pending=1")
    fault(node, "gpu-health", "FAIL", "GPU 1: 2 uncorrected ECC error(s)", "reset the GPU",
          faults="set 1 ecc.uncorrected=2")
    fault(node, "persistence", "WARN", "persistence mode is off on GPU(s) 0, 4",
          "nvidia-persistenced", faults="set 0 persistence.off=1; set 4 persistence.off=1")
    fault(node, "mig", "WARN", "a MIG mode change waits for a reset on GPU(s) 7", "nvidia-smi -r",
          faults="set 7 mig.pending=1")


def test_gpu_health_is_the_agents_too(node):
    """A GPU the running agent has unhealthy fails gpu-health, whatever the
    driver's counters say, with the agent's reason and the socket asked."""
    def health():
        return node.doctor()["by_id"]["gpu-health"]

    subprocess.run([GPULET, "sim", "xid", "2", "79"], env=node.env, check=True, capture_output=True)
    try:
        deadline = time.monotonic() + 15
        while health()["status"] != "FAIL":
            assert time.monotonic() < deadline, health()
            time.sleep(0.2)
        h = health()
        assert "GPU 2: XID 79" in h["message"] and "run/gpulet/status.sock" in h["message"], h
        assert "gpulet health" in h["fix"], h
    finally:
        subprocess.run([GPULET, "sim", "recover", "2"], env=node.env, check=True, capture_output=True)
    deadline = time.monotonic() + 15
    while health()["status"] != "PASS":
        assert time.monotonic() < deadline, health()
        time.sleep(0.2)
    assert "has them healthy" in health()["message"]


def test_dra_mig_needs_mig_mode(node):
    """--dra-mig lists GPUs whose MIG mode is off: a warning (they are
    published whole); GPUs DRA serves in MIG mode need no strategy."""
    c = node.doctor("--dra", "all", "--dra-mig", "0,1")["by_id"]["mig"]
    assert c["status"] == "WARN" and "--dra-mig lists GPU(s) 0, 1, whose MIG mode is off" in c["message"], c
    assert "nvidia-smi -i N -mig 1" in c["fix"], c
    c = node.doctor("--dra", "all", "--dra-mig", "*", preset="h100-mig-empty")["by_id"]["mig"]
    assert c["status"] == "PASS", c


def test_fabric_manager_down(node):
    scenario = node.d / "fabric.yaml"
    show = subprocess.run([GPULET, "sim", "show", PRESET], capture_output=True, text=True,
                          check=True).stdout
    scenario.write_text(show + "fabric: {cluster_uuid: 7f2c3a54-1b1e-4f7e-9d3a-0c1e2d3f4a5b, "
                        "clique_id: 1}\n")
    r = node.doctor(preset=str(scenario))
    assert r["by_id"]["fabric"]["status"] == "PASS", r["by_id"]["fabric"]
    fault(node, "fabric", "FAIL", "GPU 5: registration not started", "nvidia-fabricmanager",
          preset=str(scenario), faults="set 5 fabric.down=1")


def test_recent_critical_xid(node):
    # 950 s after boot, uptime 1000 s: 50 s ago.
    with changed(node.root / "dev/kmsg", KMSG + "4,103,950000000,-;NVRM: Xid (PCI:0000:48:00): "
                 "79, pid=0, name=, GPU has fallen off the bus.\n"):
        fault(node, "kernel-log", "FAIL", "XID 79 on GPU 4 (0000:48:00) 1 min ago", "drain the node")


def test_runtime_setup(node):
    with changed(node.root / "etc/containerd/config.toml", "version = 2\n"):
        fault(node, "runtime", "FAIL", "containerd's default runtime is runc, not nvidia",
              "--device-list-strategy cdi-cri or driver-mounts")
        fault(node, "runtime", "FAIL", "containerd has CDI off", "enable_cdi = true",
              "--device-list-strategy", "cdi-cri", also=("cdi-spec",))  # checked (and current) with cdi-cri
        r = node.doctor("--device-list-strategy", "driver-mounts")
        assert r["by_id"]["runtime"]["status"] == "PASS"
    with changed(node.root / "etc/containerd/config.toml", "version = 3\n"):
        r = node.doctor("--device-list-strategy", "cdi-cri")
        assert r["by_id"]["runtime"]["status"] == "PASS"  # containerd 2: CDI on by default


def test_cdi_spec(node):
    spec = node.root / "var/run/cdi/nvidia.com-gpu.json"
    with changed(spec):
        fault(node, "cdi-spec", "FAIL", "no CDI spec", "gpulet cdi generate",
              "--device-list-strategy", "cdi-cri")
    with changed(spec, spec.read_text().replace("nvidia7", "nvidia9")):
        fault(node, "cdi-spec", "WARN", "is stale", "restart gpulet", "--device-list-strategy", "cdi-cri")


def test_kubelet_and_agent_gone(node, tmp_path):
    # A root with no kubelet and no agent: the same files, other sockets.
    other = tmp_path / "r"
    import stat

    def special(d, names):
        return [n for n in names if not stat.S_ISDIR(os.lstat(os.path.join(d, n)).st_mode) and
                not stat.S_ISREG(os.lstat(os.path.join(d, n)).st_mode) and
                not stat.S_ISLNK(os.lstat(os.path.join(d, n)).st_mode)]
    shutil.copytree(node.root, other, symlinks=True, ignore=special)
    r = node.doctor(root=other)
    assert r["by_id"]["kubelet"]["status"] == "FAIL"
    assert "no kubelet.sock in" in r["by_id"]["kubelet"]["message"]
    assert "gpulet does not answer" in r["by_id"]["registration"]["message"]
    assert r["by_id"]["pod-resources"]["status"] == "WARN"


def test_node_not_allocatable(node):
    node.api.node["status"]["allocatable"] = {"nvidia.com/gpu": "0"}
    try:
        fault(node, "node", "FAIL", "no allocatable nvidia.com resource, with 8 GPU(s)",
              "unhealthy devices")
    finally:
        node.api.node["status"]["allocatable"] = {"nvidia.com/gpu": "8"}
    node.api.fail = 403
    try:
        fault(node, "node", "WARN", "HTTP 403", "deploy/base/rbac.yaml",
              also=("api-rights",))  # the API server refuses every question
    finally:
        node.api.fail = 0


def test_node_allocatable_per_resource(node):
    alloc = node.api.node["status"]["allocatable"]
    try:
        # One GPU unhealthy: 7 of the 8 served.
        alloc["nvidia.com/gpu"] = "7"
        fault(node, "node", "WARN", "Node n1: nvidia.com/gpu: 7 allocatable, 8 served; some "
              "devices are unhealthy", "gpulet list")
        # A resource gpulet does not serve, still allocatable: NVIDIA's plugin too.
        alloc["nvidia.com/gpu"] = "8"
        alloc["nvidia.com/mig-1g.10gb"] = "7"
        fault(node, "node", "WARN", "nvidia.com/mig-1g.10gb=7 is allocatable, but gpulet does "
              "not serve it: another device plugin does", "deploy/replace-nvidia")
        # Zero: a resource whose plugin left (the kubelet keeps its name).
        alloc["nvidia.com/mig-1g.10gb"] = "0"
        assert node.doctor()["by_id"]["node"]["status"] == "PASS"
    finally:
        node.api.node["status"]["allocatable"] = {"nvidia.com/gpu": "8"}


def test_pod_resources_list(node):
    import grpc
    uuid = node.gpus[3]["uuid"]
    node.podres.pods = [("train-0", "ml", "main", "nvidia.com/gpu", [uuid]),
                        ("web", "default", "nginx", "example.com/other", ["x"])]
    try:
        r = node.doctor()
        assert "answers List: 1 pod(s) hold 1 GPU device(s)" in \
               r["by_id"]["pod-resources"]["message"], r["by_id"]["pod-resources"]
        node.podres.fail = (grpc.StatusCode.UNIMPLEMENTED, "unknown service")
        fault(node, "pod-resources", "WARN", "List failed: unknown service (gRPC 12)",
              "metrics name no pods")
    finally:
        node.podres.pods, node.podres.fail = [], None


def test_api_rights(node):
    """A right the fault report needs, denied: named, with what it is for."""
    node.api.forbidden = {("patch", "nodes/status"), ("create", "events")}
    try:
        fault(node, "api-rights", "WARN", "gpulet may not: patch nodes/status (the Node condition "
              "GPUUnhealthy); create events (GPU events on the Node)", "deploy/base/rbac.yaml")
    finally:
        node.api.forbidden = set()
    r = node.doctor()
    assert r["by_id"]["api-rights"]["status"] == "PASS"
    assert "all 5 rights gpulet uses, and its writes are confined to node" in r["by_id"]["api-rights"]["message"]


def test_api_rights_confined(node):
    """Whether the API server keeps gpulet's writes to its own node: a dry-run
    label that is not gpulet's, which deploy/confine/'s policy must refuse. Accepted,
    it FAILs; credentials that name no node (an old cluster, a token the kubelet
    did not issue) are described; the dry run changes nothing either way."""
    node.api.confined = False
    try:
        fault(node, "api-rights", "FAIL", "writes are NOT confined", "deploy/confine/")
    finally:
        node.api.confined = True
    node.api.token_node = None
    try:
        fault(node, "api-rights", "WARN", "name no node, so no policy can keep their writes",
              "Kubernetes 1.30")
    finally:
        node.api.token_node = node.api.node["metadata"]["name"]
    assert "example.com/gpulet-doctor-probe" not in node.api.node["metadata"].get("labels", {})
    # Each policy is tried by a write it must refuse (issue 50): one that is
    # missing, unbound or Warn-only is named, though the others refuse theirs.
    node.api.open_policies = {"gpulet-events"}
    try:
        fault(node, "api-rights", "FAIL", "an Event about another Node (policy gpulet-events missing, "
              "unbound or only warning)", "deploy/confine/")
    finally:
        node.api.open_policies = set()
    events = set(node.api.node_events)
    r = node.doctor()["by_id"]["api-rights"]
    assert r["status"] == "PASS" and "each of 3 dry-run writes refused by its own policy" in r["message"], r
    assert "NodeRestriction on" in r["message"], r
    assert set(node.api.node_events) == events  # the probes were dry runs


def test_api_rights_slices_and_node_restriction(node):
    """With DRA, a slice named for another node, in its pool, is tried too;
    the node a token names is only as good as NodeRestriction: FAIL where
    the API server's admission metrics show it off, WARN (with why and how
    to confirm) where gpulet may not read them (issue 50, items 8 and 9)."""
    node.api.open_policies = {"gpulet-resourceslices"}
    try:
        r = node.doctor("--dra", "all")["by_id"]["api-rights"]
        assert r["status"] == "FAIL" and "a slice named for another node, in its pool (policy " \
            "gpulet-resourceslices missing" in r["message"], r
    finally:
        node.api.open_policies = set()
    r = node.doctor("--dra", "all")["by_id"]["api-rights"]
    assert r["status"] == "PASS" and "each of 4 dry-run writes" in r["message"], r
    assert not node.api.slices  # a dry run
    node.api.node_restriction = False
    try:
        fault(node, "api-rights", "FAIL", "the API server runs no NodeRestriction",
              "--enable-admission-plugins")
    finally:
        node.api.node_restriction = True
    node.api.node_restriction = None
    try:
        fault(node, "api-rights", "WARN", "NodeRestriction not confirmed: the API server's /metrics "
              "answered HTTP 403 (gpulet's account may not read it: bind the ClusterRole "
              "system:monitoring", "--enable-admission-plugins")
    finally:
        node.api.node_restriction = True


def test_hung_gpu_has_a_time_limit(node):
    """Each GPU is read on a thread of its own within the check's time: the
    one that hangs is named with its call, and the others are still read
    and checked by the NVML checks after it."""
    t0 = time.monotonic()
    r = fault(node, "nvml", "FAIL",
              "1 of 8 GPUs do not answer: GPU 5: hung (no answer in 0.4 s, in nvmlDeviceGetUUID)",
              "nvidia-smi -r -i N", "--timeout-ms", "500", faults="hang 5")
    assert time.monotonic() - t0 < 10
    for later in ("gpu-health", "persistence", "mig"):
        assert r["by_id"][later]["status"] == "PASS", r["by_id"][later]
    assert r["by_id"]["registration"]["status"] == "PASS"  # the checks after it still ran


def test_partly_readable_proc(node):
    info = next((node.root / "proc/driver/nvidia/gpus").iterdir()) / "information"
    text = info.read_text()
    info.unlink()
    info.mkdir()
    try:
        r = node.doctor()
        c = r["by_id"]["device-nodes"]
        assert c["status"] == "FAIL" and "information" in c["message"], c
        assert r["by_id"]["nvml"]["status"] == "PASS"
    finally:
        info.rmdir()
        info.write_text(text)


def test_text_output_and_bad_input(node, tmp_path):
    p = subprocess.run([GPULET, "doctor", "--root", str(node.root), "--simulate", PRESET,
                        "--kubelet-root", "/var/lib/kubelet", "--status-socket",
                        "/run/gpulet/status.sock"], capture_output=True, text=True,
                       env=dict(node.env, GPULET_SIM_CONTROL="off"))
    assert p.stdout.startswith(f"gpulet doctor: the node at {node.root}\n")
    assert "PASS  kernel-module  NVIDIA open kernel module 580.159.04 is loaded" in p.stdout
    assert p.stdout.splitlines()[-1].startswith("20 checks in ")
    for args, msg in [(["--bogus"], "unknown option '--bogus'"),
                      (["--root", str(tmp_path / "none")], "is not a readable directory"),
                      (["-o", "xml"], "-o must be text or json, not 'xml'"),
                      (["--timeout-ms", "0"], "--timeout-ms must be from 10 to 600000"),
                      (["--root"], "--root needs a value")]:
        p = subprocess.run([GPULET, "doctor", *args], capture_output=True, text=True,
                           env=dict(node.env, GPULET_SIM_CONTROL="off"))
        assert p.returncode == 3, (args, p.stderr)
        assert msg in p.stderr and p.stdout == "", (args, p.stderr)


@pytest.mark.skipif(SANITIZED or not shutil.which("valgrind"), reason="valgrind runs on the plain build")
def test_valgrind_doctor(node):
    """Every check, the API server's included, under valgrind."""
    env = dict(node.env, GPULET_SIM_FAULTS="set 2 rows.pending=1", GPULET_SIM_CONTROL="off")
    p = subprocess.run(["valgrind", "--error-exitcode=9", "--leak-check=full",
                        "--errors-for-leak-kinds=definite,indirect", "-q", GPULET, "doctor",
                        "--root", str(node.root), "--simulate", PRESET, "--kubelet-root",
                        "/var/lib/kubelet", "--status-socket", "/run/gpulet/status.sock",
                        "--kubeconfig", str(node.kubeconfig), "--node-name", "n1",
                        "--device-list-strategy", "cdi-cri"],
                       capture_output=True, text=True, env=env, timeout=limit(120))
    assert p.returncode in (1, 2), p.stderr
    assert "==" not in p.stderr, p.stderr


def test_metrics_tls_library_missing(node, tmp_path):
    """libmicrohttpd is linked in: /metrics needs nothing of the host, and
    doctor passes even where GnuTLS is absent. TLS needs the host's GnuTLS:
    with a web config that asks for it and no GnuTLS, doctor says the agent
    would not start, with the fix."""
    node.env["GPULET_GNUTLS_LIB"] = "/nonexistent/libgnutls.so.30"
    try:
        r = node.doctor()
        assert r["by_id"]["metrics"]["status"] == "PASS", r["by_id"]["metrics"]
        (tmp_path / "k.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
        (tmp_path / "c.pem").write_text("-----BEGIN CERTIFICATE-----\n")
        (tmp_path / "web.yml").write_text("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n")
        r = node.doctor("--web-config-file", str(tmp_path / "web.yml"))
    finally:
        node.env.pop("GPULET_GNUTLS_LIB")
    m = r["by_id"]["metrics"]
    assert m["status"] == "FAIL" and "libgnutls30" in m["fix"], m
    assert "would not start" in m["message"] and "libgnutls.so.30" in m["message"], m
    assert node.doctor("--no-metrics")["by_id"]["metrics"]["status"] == "SKIP"
