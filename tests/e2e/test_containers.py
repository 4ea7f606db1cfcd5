"""Direct injection on the real kubelet: containerd 1.6 and plain runc, no
NVIDIA component. A second gpulet serves nvidia.com/t4 from a simulated T4
node with the driver-mounts strategy and a stand-in driver tree (gpulet sim
driver-root): a pod asking for one sees its device nodes, the driver's
libraries at their file names and sonames, and a binary it can run; an
image that is not CUDA-based (no /usr/local/nvidia on any path) finds
libcuda.so.1 through glibc's own search; a pod asking for none sees
nothing of the driver."""
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import GPULET, extra_gpulet

VERSION = "580.159.04"
CONFIG = "version: v1\nresources:\n  gpus: [{pattern: '*', name: t4}]\n"


@pytest.fixture(scope="module")
def injecting(cluster, gpulet):
    base = Path(cluster.base)
    root = base / "driver-stand-in"
    subprocess.run([GPULET, "sim", "driver-root", str(root)], check=True, timeout=30)
    (base / "t4.yaml").write_text(CONFIG)
    with extra_gpulet(cluster, "t4", "--simulate", "t4", "--nvidia-driver-root", str(root),
                      "--nvidia-dev-root", cluster.env["K8S_DEV_ROOT"],
                      "--device-list-strategy", "driver-mounts", "--no-metrics",
                      "--config-file", str(base / "t4.yaml")) as env:
        yield env


def run_pod(cluster, name, limits, script, glibc=None):
    spec = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": cluster.env["K8S_BUSYBOX_IMAGE"],
                                     "command": ["sh", "-c", script],
                                     "resources": {"limits": limits}}]}}
    if glibc:
        # The C library where Debian keeps it, as an image built on Debian has it.
        spec["spec"]["volumes"] = [{"name": "glibc", "hostPath": {"path": str(glibc)}}]
        spec["spec"]["containers"][0]["volumeMounts"] = [
            {"name": "glibc", "mountPath": "/lib/x86_64-linux-gnu", "readOnly": True}]
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(spec))
    deadline = time.monotonic() + 90
    while cluster.get("pod", name)["status"].get("phase") not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, cluster.kubectl("describe", "pod", name)
        time.sleep(0.5)
    out = cluster.kubectl("logs", name)
    cluster.kubectl("delete", "pod", name, "--wait=false")
    return out


def test_pod_gets_the_driver(cluster, injecting):
    deadline = time.monotonic() + 60
    while cluster.get("node", cluster.node)["status"]["allocatable"].get("nvidia.com/t4") != "1":
        assert time.monotonic() < deadline, "nvidia.com/t4 never became allocatable"
        time.sleep(0.5)
    out = run_pod(cluster, "inject", {"nvidia.com/t4": 1},
                  "ls /dev; ls /usr/local/nvidia/lib64 /usr/local/nvidia/bin; "
                  "/usr/local/nvidia/bin/nvidia-smi; echo done")
    for want in ("nvidia0", "nvidiactl", f"libcuda.so.{VERSION}", "libcuda.so.1",
                 "libnvidia-ml.so.1", "libnvidia-nvvm.so.4", "nvidia-smi",
                 f"gpulet stand-in nvidia-smi {VERSION}", "done"):
        assert want in out, out


def test_any_image_finds_the_driver(cluster, injecting):
    """The busybox image with glibc added at Debian's place, no ld.so.cache
    and nothing of /usr/local/nvidia on any path: the loader finds
    libcuda.so.1 by its own search, and nvidia-smi is on a plain PATH."""
    loader = Path("/lib64/ld-linux-x86-64.so.2")
    if not loader.exists():
        pytest.skip("no x86-64 glibc loader on this machine")
    glibc = Path(cluster.base) / "glibc"
    glibc.mkdir(exist_ok=True)
    # What any glibc image has: libc and the libraries NVIDIA's libcuda and
    # libnvidia-ml name beside it (the stand-in driver's name them too).
    for f in (loader, *(Path("/lib/x86_64-linux-gnu") / n for n in
                        ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"))):
        shutil.copy2(f.resolve(), glibc / f.name)
    ld = "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    out = run_pod(cluster, "any-image", {"nvidia.com/t4": 1},
                  f"LD_DEBUG=libs {ld} --preload 'libcuda.so.1 libnvidia-ml.so.1' "
                  f"/lib/x86_64-linux-gnu/libc.so.6 2>&1 | grep -e 'calling init' -e ERROR; "
                  "echo PATH=$PATH; PATH=/usr/bin:/bin nvidia-smi; echo done", glibc=glibc)
    assert "calling init: /usr/lib/x86_64-linux-gnu/libcuda.so.1" in out, out
    assert "calling init: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1" in out, out
    assert "ERROR" not in out and "/usr/local/nvidia" not in out.split("PATH=")[1], out
    assert f"gpulet stand-in nvidia-smi {VERSION}" in out and "done" in out, out


def test_pod_without_gpu_gets_nothing(cluster, injecting):
    out = run_pod(cluster, "no-inject", {},
                  "ls /usr/local/nvidia /usr/lib64 /usr/bin 2>&1; "
                  "ls /dev | grep nvidia || echo no-nvidia-nodes")
    assert out.count("No such file or directory") == 3 and "no-nvidia-nodes" in out, out
