"""gpulet's CDI spec consumed by a real CDI runtime: Debian's podman resolves
--device nvidia.com/gpu=1 through it, and runs a busybox image that sees
exactly its device nodes and the driver's files (a simulated node with
the stand-in driver tree). podman reads specs only from /etc/cdi and /var/run/cdi
(4.3 has no setting for it), so it runs in a private mount namespace with
tmpfs on /run and /var/lib (where podman keeps a cache whatever --root
says): the node's own are never touched. Its storage lives under the
test's directory. Needs root and podman; skips otherwise."""
import os
import shutil
import subprocess

import pytest

from conftest import GPULET, needs, skip_or_fail, tool

def private_mounts():
    """Whether a private mount namespace can be made here (not in a plain
    chroot, where / is not a mount point)."""
    return os.geteuid() == 0 and subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True).returncode == 0


pytestmark = [
    needs(os.geteuid() != 0, "podman in a private mount namespace needs root"),
    needs(not private_mounts(), "no private mount namespace here (a plain chroot?)"),
    tool("podman"), tool("runc"),
    needs(not os.path.exists("/bin/busybox"), "no /bin/busybox for the image (busybox-static)"),
]


def podman(tmp, script):
    """Runs podman commands (script, with $P for podman and its flags) with
    /run private; returns (rc, output)."""
    p = f"podman --root {tmp}/storage --runroot {tmp}/run --cgroup-manager cgroupfs --events-backend file --runtime runc"
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        f"mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/lib && mkdir -p /run/cdi && "
                        f"P='{p}' && {script}"],
                       capture_output=True, text=True, timeout=180)
    return r.returncode, r.stdout + r.stderr


@pytest.fixture
def node(tmp_path, sim_env):
    """A simulated node's spec over the stand-in driver tree (device node
    stand-ins with /dev/null's numbers), and a busybox image in storage
    under tmp_path. Returns the spec's path."""
    root = tmp_path / "driver"
    subprocess.run([GPULET, "sim", "driver-root", str(root)], check=True, env=sim_env)
    (root / "dev").mkdir()
    for n in ("nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1", "nvidia2", "nvidia3"):
        os.mknod(root / "dev" / n, 0o666 | 0o020000, os.makedev(1, 3))
    spec = tmp_path / "nvidia.com-gpu.json"
    p = subprocess.run([GPULET, "cdi", "generate", "--simulate", "l4-pcie", "--nvidia-driver-root",
                        str(root), "-o", str(spec)], capture_output=True, text=True, env=sim_env)
    assert p.returncode == 0, p.stderr
    image = tmp_path / "image"
    (image / "bin").mkdir(parents=True)
    shutil.copy("/bin/busybox", image / "bin/busybox")
    for name in ("sh", "ls", "echo"):
        os.symlink("busybox", image / "bin" / name)
    subprocess.run(["tar", "-C", str(image), "-cf", str(tmp_path / "image.tar"), "."], check=True)
    rc, out = podman(tmp_path, f"$P import {tmp_path}/image.tar localhost/gpulet-bb:test")
    assert rc == 0, out
    return spec


# Small limits of its own: podman would raise the container's (to a
# million open files), which needs CAP_SYS_RESOURCE, and some machines (CI's
# VM) do not grant it; runc, as crun does not run on hybrid cgroups.
LIMITS = "--ulimit nofile=1024:1024 --ulimit nproc=1024:1024"
RUN = f"$P run --rm --network none {LIMITS} --device nvidia.com/gpu=1 localhost/gpulet-bb:test"


def plain_container_error(tmp_path):
    """Why podman cannot start even a plain container here (some machines'
    runc or crun may not set rlimits), or None when it can."""
    rc, out = podman(tmp_path, f"$P run --rm --network none {LIMITS} localhost/gpulet-bb:test echo plain-ok")
    return None if "plain-ok" in out else out.strip()[-200:]


def test_podman_resolves_the_spec(node, tmp_path):
    """podman's CDI library loads and applies the spec: without it the name
    is unresolvable; with it, podman gets past CDI and, where it can start
    containers at all, starts this one."""
    rc, out = podman(tmp_path, f"{RUN} echo ran")
    assert rc != 0 and "unresolvable CDI devices nvidia.com/gpu=1" in out, out
    rc, out = podman(tmp_path, f"cp {node} /run/cdi/ && {RUN} echo ran")
    assert "CDI" not in out and "cdi" not in out, out  # no complaint about the spec
    if plain_container_error(tmp_path) is None:
        assert rc == 0 and "ran" in out, out


def test_podman_container_sees_the_driver(node, tmp_path):
    why = plain_container_error(tmp_path)
    if why:
        skip_or_fail(f"podman cannot start a container on this machine: {why}")
    rc, out = podman(tmp_path, f"cp {node} /run/cdi/ && {RUN} sh -c "
                               "'ls /dev; ls /usr/local/nvidia/lib64; /usr/local/nvidia/bin/nvidia-smi'")
    assert rc == 0, out
    names = out.split()
    assert "nvidia1" in names and "nvidiactl" in names and "nvidia0" not in names, out
    assert "libcuda.so.1" in names and "libnvidia-ml.so.1" in names, out
    assert "gpulet stand-in nvidia-smi" in out, out
