"""gpulet's image (scripts/image.sh) on the GPU machine, as deploy/ runs
it, without Kubernetes: the image's amd64 root unpacked and entered with
chroot in a private mount namespace, the host's / at /driver-root
(read-only) and NVIDIA_DRIVER_ROOT=/ CONTAINER_DRIVER_ROOT=/driver-root as
deploy/base/daemonset.yaml sets them. Checks:
- `gpulet list -o json` loads the host's NVML through the driver root and
  agrees with nvidia-smi on each GPU's UUID;
- the agent with an MPS config finds nvidia-cuda-mps-control under the
  driver root (no --mps-control) and starts its daemon on the host's files;
  a CUDA client (torch, with the pipe directory and /dev/shm a container
  gets) runs under it;
- the daemon started here is quit at the end, and the card's compute mode
  is what it was.
usage: image_driver.py OCI_ARCHIVE (root; one line per check; exit 1 on a failure)"""
import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cross"))
from oci import unpack  # noqa: E402

ROOT = "/tmp/gpulet-image-root"
failed = 0


def check(what, cond, detail=""):
    global failed
    failed += not cond
    print(f"{'ok  ' if cond else 'FAIL'} image on the driver: {what}{'' if cond else ': ' + str(detail)[-3000:]}",
          flush=True)


def smi(query):
    return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.split()


# In the namespace: the image's root a mount point of its own (a
# container's / is one), the host's / read-only at /driver-root, and what a
# privileged container has (/proc, /dev, /sys); then chroot.
ENTER = f"""set -e
mount --make-rprivate /
mount --bind {ROOT} {ROOT}
for d in driver-root proc dev sys; do mkdir -p {ROOT}/$d; done
mount --rbind / {ROOT}/driver-root
mount -o remount,bind,ro {ROOT}/driver-root
mount -t proc proc {ROOT}/proc
mount --rbind /dev {ROOT}/dev
mount --rbind /sys {ROOT}/sys
exec chroot {ROOT} /usr/bin/gpulet "$@"
"""
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "NVIDIA_DRIVER_ROOT": "/", "CONTAINER_DRIVER_ROOT": "/driver-root",
       "GPULET_LABELS": "none"}


def gpulet(*args, **kw):
    return ["unshare", "--mount", "sh", "-c", ENTER, "sh", *args]


def main():
    mode = smi("compute_mode")
    unpack(sys.argv[1], "amd64", ROOT)
    check("the image holds no shell", not os.path.exists(ROOT + "/bin/sh"))
    p = subprocess.run(gpulet("list", "-o", "json"), capture_output=True, text=True, env=ENV)
    uuids = [g["uuid"] for g in json.loads(p.stdout)["gpus"]] if p.returncode == 0 else []
    check("gpulet list loads the host's NVML from the driver root", uuids == smi("uuid"),
          p.stdout + p.stderr)
    print(p.stderr.strip())

    mps = "/run/nvidia/mps"
    os.makedirs(mps, exist_ok=True)          # the host's, as deploy/'s hostPath makes it
    os.makedirs(ROOT + mps, exist_ok=True)
    os.makedirs(ROOT + "/run/gpulet", exist_ok=True)
    with open(ROOT + "/tmp/mps.yaml", "w") as f:
        f.write("version: v1\nflags:\n  plugin:\n    deviceListStrategy: driver-mounts\n"
                "sharing:\n  mps:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 2\n")
    # The host's /run/nvidia/mps is bound to the image root's copy of it: the
    # daemon, pivoted to the host's files, and gpulet then see one directory.
    log = open("/tmp/image-agent.log", "w")
    agent = subprocess.Popen(
        ["unshare", "--mount", "sh", "-c", f"mount --make-rprivate / && mount --bind {ROOT}{mps} {mps} && " +
         ENTER.replace("set -e\n", ""), "sh", "agent", "--config-file", "/tmp/mps.yaml",
         "--kubelet-root", "/tmp/kubelet", "--metrics-listen", "127.0.0.1:19400"],
        stdout=log, stderr=subprocess.STDOUT, env=ENV)
    text = ""
    deadline = time.monotonic() + 60
    while "MPS daemon for nvidia.com/gpu is up" not in text and time.monotonic() < deadline:
        time.sleep(0.5)
        text = open("/tmp/image-agent.log").read()
    check("the agent starts MPS from the driver root's nvidia-cuda-mps-control",
          "MPS daemon for nvidia.com/gpu is up" in text, text)
    print("\n".join(l for l in text.splitlines() if "MPS" in l or "NVML" in l or "error" in l))
    pipes = glob.glob(ROOT + mps + "/**/pipe", recursive=True)
    client = ""
    if pipes:
        pipe, shm = pipes[0], ROOT + mps + "/shm"
        code = ("import torch; a = torch.randn(4096, 4096, device='cuda'); "
                "s = (a @ a).sum().item(); torch.cuda.synchronize(); print('MPS client ok', s == s)")
        c = subprocess.run(["unshare", "--mount", "sh", "-c",
                            f"mount --make-rprivate / && mount --bind {shm} /dev/shm && "
                            f"CUDA_MPS_PIPE_DIRECTORY={pipe} exec python3 -c \"{code}\""],
                           capture_output=True, text=True, timeout=180)
        client = c.stdout + c.stderr
        servers = subprocess.run(["pgrep", "-c", "nvidia-cuda-mps-server"], capture_output=True,
                                 text=True).stdout.strip()
        check("a CUDA client runs under that daemon (an MPS server started for it)",
              "MPS client ok True" in client and servers not in ("", "0"), client[-2000:])
    agent.send_signal(signal.SIGTERM)
    rc = agent.wait(timeout=60)
    text = open("/tmp/image-agent.log").read()
    check("SIGTERM: the agent stops cleanly", rc == 0 and "agent stopped" in text, text[-2000:])
    # The daemon outlives gpulet by design: this run started it, so it ends it.
    for pipe in pipes:
        subprocess.run(["sh", "-c", f"echo quit | CUDA_MPS_PIPE_DIRECTORY={pipe} "
                                    "nvidia-cuda-mps-control"], timeout=60)
    time.sleep(2)
    # (their process name is cut to 15 characters: nvidia-cuda-mps)
    left = subprocess.run(["pgrep", "-a", "-x", "nvidia-cuda-mps"], capture_output=True, text=True).stdout
    subprocess.run(["pkill", "-9", "-x", "nvidia-cuda-mps"])
    check("no MPS daemon is left", not left, left)
    check("the card's compute mode is unchanged", smi("compute_mode") == mode, smi("compute_mode"))


main()
print(f"image on the driver: {'all passed' if not failed else f'{failed} failed'}")
sys.exit(1 if failed else 0)
