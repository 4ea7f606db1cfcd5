"""The arm64 build's smoke test, run under qemu-user (scripts/arm64.sh):
`gpulet list` and `gpulet labels` on the simulated Grace Hopper node, the
agent registering with the kubelet stand-in and answering ListAndWatch and
Allocate, a scrape of its /metrics, `gpulet health`, and a clean stop.
With --image, the same in one architecture's image of scripts/image.sh's
index, unpacked and entered with chroot (root only), so that every library
comes from the image itself; the image holds no simulator, so the GPUs are
a stand-in driver's, seen as deploy/ shows a node's: its tree (`gpulet sim
driver-root` of that architecture's BUILD_DIR, whose NVML names the
libraries NVIDIA's does) at /driver-root, NVIDIA_DRIVER_ROOT=/ and
CONTAINER_DRIVER_ROOT=/driver-root. An image that cannot load a driver's
NVML fails here as it would on a node.
usage: smoke.py BUILD_DIR | --image OCI_ARCHIVE ARCH BUILD_DIR
(one line per check; exit 1 on a failure)"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from kubelet import FakeKubelet, load_stubs  # noqa: E402
from oci import unpack  # noqa: E402 (beside this file)

QEMU = shutil.which(os.environ.get("QEMU", "qemu-aarch64-static"))
PRODUCT = "NVIDIA GH200 480GB"
failed = 0


ARCH = sys.argv[3] if sys.argv[1] == "--image" else "arm64"


def check(what, cond, detail=""):
    global failed
    failed += not cond
    print(f"{'ok  ' if cond else 'FAIL'} {ARCH} smoke: {what}{'' if cond else ': ' + str(detail)}",
          flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(tmp):
    """tmp: the test's directory as this process sees it; inside: as gpulet does."""
    machine = {"arm64": 183, "amd64": 62}[ARCH]
    if sys.argv[1] == "--image":
        root = tmp / "image"
        unpack(sys.argv[2], ARCH, root)
        emulate = [QEMU] if ARCH == "arm64" else []
        builder = Path(sys.argv[4]).resolve() / "gpulet"
        made = subprocess.run(emulate + [str(builder), "sim", "driver-root", str(root / "driver-root")],
                              capture_output=True, text=True)
        check("the stand-in driver tree", made.returncode == 0, made.stderr)
        inside_emulator = []
        if emulate:
            shutil.copy2(QEMU, root / "qemu-aarch64")
            inside_emulator = ["/qemu-aarch64"]
        binary = root / "usr/bin/gpulet"
        gpulet, host, inside = ["chroot", str(root)] + inside_emulator + ["/usr/bin/gpulet"], root / "tmp", Path("/tmp")
        node = {"NVIDIA_DRIVER_ROOT": "/", "CONTAINER_DRIVER_ROOT": "/driver-root",
                "GPULET_SIM_SCENARIO": "gh200"}
        simulate = []
    else:
        binary = Path(sys.argv[1]).resolve() / "gpulet"
        gpulet, host, inside = [QEMU, str(binary)], tmp, tmp
        node, simulate = {}, ["--simulate", "gh200"]
    head = binary.read_bytes()[:20]
    check(f"the binary is {ARCH} (ELF e_machine {machine})",
          int.from_bytes(head[18:20], "little") == machine, head)
    smoke(gpulet, host, inside, node, simulate)


def smoke(gpulet, tmp, inside, node, simulate):
    def run(*args):
        return subprocess.run(gpulet + list(args), capture_output=True, text=True, env=env,
                              timeout=120)

    # Every path the agent would take from the node is the test's own.
    env = dict(os.environ, GPULET_SIM_CONTROL=str(inside / "sim.sock"),
               GPULET_STATUS_SOCKET=str(inside / "status.sock"),
               GPULET_CDI_SPEC_DIR=str(inside / "cdi"), GPULET_PROC_ROOT=str(inside / "proc"),
               GPULET_CONTAINER_LOG_DIR=str(inside / "logs"),
               GFD_MACHINE_TYPE_FILE=str(inside / "product_name"), GPULET_LABELS="none", **node)
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NODE_NAME", "XDG_RUNTIME_DIR"):
        env.pop(var, None)
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "product_name").write_text("GH200\n")

    p = run("list", *simulate)
    check(f"list {' '.join(simulate) or 'through the driver root'}",
          p.returncode == 0 and PRODUCT in p.stdout, p.stdout + p.stderr)
    p = run("labels", *simulate)
    check("labels: accelerator and product",
          "accelerator=nvidia-gh200-480gb" in p.stdout
          and "nvidia.com/gpu.product=NVIDIA-GH200-480GB" in p.stdout, p.stdout + p.stderr)

    pb, pbg = load_stubs(tmp / "stubs")
    kubelet = FakeKubelet(tmp / "kubelet", pb, pbg)
    kubelet.start()
    port = free_port()
    log = open(tmp / "agent.log", "w")
    agent = subprocess.Popen(gpulet + ["agent", *simulate, "--kubelet-root",
                                       str(inside / "kubelet"), "--metrics-listen", f"127.0.0.1:{port}"],
                             stderr=log, env=env)
    try:
        t0 = time.monotonic()
        try:
            reg = kubelet.wait_registrations(1, timeout=60)[1]
        except AssertionError as e:
            reg = e
        check(f"the agent registers ({time.monotonic() - t0:.1f} s{' under qemu' if QEMU in gpulet or '/qemu-aarch64' in gpulet else ''})",
              getattr(reg, "resource_name", None) == "nvidia.com/gpu", reg)
        if not isinstance(reg, AssertionError):  # else nothing further can pass: its log says why
            channel, stub = kubelet.plugin()
            devs = next(stub.ListAndWatch(pb.Empty(), timeout=30)).devices
            check("ListAndWatch: one healthy GPU", len(devs) == 1 and devs[0].health == "Healthy", devs)
            r = stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
                devices_ids=[devs[0].ID])]), timeout=30).container_responses[0]
            check("Allocate", r.envs.get("NVIDIA_VISIBLE_DEVICES") == devs[0].ID, r)
            channel.close()
            body = ""
            deadline = time.monotonic() + 60
            while f'modelName="{PRODUCT}"' not in body and time.monotonic() < deadline:
                try:
                    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
                except OSError:
                    time.sleep(0.5)
            check("a scrape of /metrics", "DCGM_FI_DEV_FB_USED{" in body and f'modelName="{PRODUCT}"' in body,
                  body[:300])
            p = run("health")
            check("health", p.returncode == 0 and "Healthy" in p.stdout, p.stdout + p.stderr)
    finally:
        agent.send_signal(signal.SIGTERM)
        rc = agent.wait(timeout=60)
        kubelet.stop()
    text = (tmp / "agent.log").read_text()
    check("SIGTERM: a clean stop", rc == 0 and "agent stopped" in text, text[-800:])
    if failed:
        print(text[-3000:])


with tempfile.TemporaryDirectory() as tmp:
    main(Path(tmp))
print(f"{ARCH} smoke: {'all passed' if not failed else f'{failed} failed'}")
sys.exit(1 if failed else 0)
