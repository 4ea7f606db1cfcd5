"""GPUs in containers without NVIDIA's toolkit, on the simulator with a
stand-in driver tree (gpulet sim driver-root): `gpulet cdi generate`
(valid against the CDI schema, JSON and YAML the same), the agent keeping
its spec in --cdi-spec-dir, and the driver-mounts strategy's Allocate
(device nodes, each library at its file name and soname, the binaries),
both in /usr/local/nvidia and where any image's loader and PATH look
(--driver-layout system), with the bad cases: no driver, a bad capability, an unwritable directory."""
import json
import os
import platform
import shutil
import signal
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import GPULET, SANITIZED, STREAM_S

SCHEMA = json.loads((Path(__file__).parent / "data" / "cdi-schema.json").read_text())
VERSION = "580.159.04"
LIB = "/usr/local/nvidia/lib64"
TRIPLET = f"{platform.machine()}-linux-gnu"
# Where glibc looks by itself (Debian's and the Red Hat family's), and PATH.
SYSTEM_LIBS = (f"/usr/lib/{TRIPLET}", "/usr/lib64")


@pytest.fixture
def driver_root(tmp_path, sim_env):
    """A stand-in driver tree, with the device nodes' stand-ins under dev/."""
    root = tmp_path / "driver"
    p = subprocess.run([GPULET, "sim", "driver-root", str(root)], capture_output=True, text=True,
                       env=sim_env)
    assert p.returncode == 0, p.stderr
    (root / "dev").mkdir()
    for node in ("nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1", "nvidia2", "nvidia3"):
        (root / "dev" / node).write_text("")
    return root


def cdi_generate(sim_env, *args):
    return subprocess.run([GPULET, "cdi", "generate", "--simulate", "l4-pcie", *args],
                          capture_output=True, text=True, env=sim_env, timeout=30)


def test_cdi_generate(driver_root, sim_env, tmp_path):
    p = cdi_generate(sim_env, "--nvidia-driver-root", str(driver_root), "--format", "json")
    assert p.returncode == 0, p.stderr
    spec = json.loads(p.stdout)
    jsonschema.validate(spec, SCHEMA)
    names = [d["name"] for d in spec["devices"]]
    uuids = [g["uuid"] for g in json.loads(subprocess.run(
        [GPULET, "list", "--simulate", "l4-pcie", "-o", "json"], capture_output=True, text=True,
        env=sim_env).stdout)["gpus"]]
    assert names == [n for i, u in enumerate(uuids) for n in (str(i), u)] + ["all"]
    edits = spec["containerEdits"]
    assert edits["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert {n["path"] for n in edits["deviceNodes"]} == {"/dev/nvidiactl", "/dev/nvidia-uvm"}
    assert all(n["hostPath"].startswith(str(driver_root)) for n in edits["deviceNodes"])
    mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
    real = str(driver_root / f"usr/lib/{TRIPLET}/libcuda.so.{VERSION}")
    for name in (f"libcuda.so.{VERSION}", "libcuda.so.1", "libcuda.so"):
        assert mounts[f"{LIB}/{name}"] == real      # one file, at each name programs open
    assert mounts[f"{LIB}/libnvidia-nvvm.so.4"].endswith(f"libnvidia-nvvm.so.{VERSION}")
    assert f"{LIB}/libnvidia-encode.so.1" not in mounts  # video is not asked for
    assert "/usr/local/nvidia/bin/nvidia-smi" in mounts
    assert f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin" in mounts
    assert all(os.path.exists(h) for h in mounts.values())
    assert all(m["options"] == ["ro", "nosuid", "nodev", "bind"] for m in edits["mounts"])
    assert "hooks" not in edits
    # Any image: the same files where its loader and PATH look by themselves.
    for name in (f"libcuda.so.{VERSION}", "libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-nvvm.so.4"):
        for d in SYSTEM_LIBS:
            assert mounts[f"{d}/{name}"] == mounts[f"{LIB}/{name}"], name
    assert mounts["/usr/bin/nvidia-smi"] == mounts["/usr/local/nvidia/bin/nvidia-smi"]
    # The old layout: /usr/local/nvidia alone.
    p = cdi_generate(sim_env, "--nvidia-driver-root", str(driver_root), "--format", "json",
                     "--driver-layout", "nvidia")
    old = {m["containerPath"] for m in json.loads(p.stdout)["containerEdits"]["mounts"]}
    assert f"{LIB}/libcuda.so.1" in old and "/usr/local/nvidia/bin/nvidia-smi" in old
    assert not [m for m in old if m.startswith(("/usr/lib", "/usr/bin"))], old
    # YAML says the same; -o FILE writes it; all capabilities add the video libraries
    p = cdi_generate(sim_env, "--nvidia-driver-root", str(driver_root), "-o", str(tmp_path / "s.yaml"))
    assert p.returncode == 0, p.stderr
    assert yaml.safe_load((tmp_path / "s.yaml").read_text()) == spec
    p = cdi_generate(sim_env, "--nvidia-driver-root", str(driver_root), "--format", "json",
                     "--driver-capabilities", "all")
    assert f"{LIB}/libnvidia-encode.so.1" in {m["containerPath"] for m in
                                              json.loads(p.stdout)["containerEdits"]["mounts"]}


def test_container_driver_root(driver_root, sim_env):
    """gpulet in a container reads the host's driver root where it is
    mounted, and names the host's paths in the spec."""
    p = cdi_generate(sim_env, "--nvidia-driver-root", "/run/nvidia/driver",
                     "--container-driver-root", str(driver_root), "--format", "json")
    assert p.returncode == 0, p.stderr
    edits = json.loads(p.stdout)["containerEdits"]
    assert edits["mounts"] and all(m["hostPath"].startswith("/run/nvidia/driver/")
                                   for m in edits["mounts"])
    assert [n["hostPath"] for n in edits["deviceNodes"]] == [
        "/run/nvidia/driver/dev/nvidiactl", "/run/nvidia/driver/dev/nvidia-uvm"]


def test_cdi_generate_bad_input(driver_root, sim_env, tmp_path):
    p = cdi_generate(sim_env, "--nvidia-driver-root", str(tmp_path / "nothing"))
    assert p.returncode == 1
    assert f"driver root {tmp_path / 'nothing'}: no NVIDIA driver {VERSION} libraries" in p.stderr
    # Simulated GPUs: the stand-in tree is the way out, and the error says so.
    assert "`gpulet sim driver-root DIR` and give --nvidia-driver-root DIR" in p.stderr, p.stderr
    p = cdi_generate(sim_env, "--nvidia-driver-root", str(driver_root), "--format", "toml")
    assert p.returncode == 2 and "--format must be yaml or json" in p.stderr
    p = cdi_generate(sim_env, "--driver-capabilities", "compute,display")
    assert p.returncode == 2 and "unknown driver capability 'display'" in p.stderr
    p = cdi_generate(sim_env, "--nvidia-driver-root", str(driver_root), "-o",
                     str(tmp_path / "missing-dir" / "spec.yaml"))
    assert p.returncode == 1 and "missing-dir" in p.stderr
    # A command line gpulet cdi cannot take: one line and exit 2, as elsewhere.
    p = subprocess.run([GPULET, "cdi"], capture_output=True, text=True, env=sim_env)
    assert p.returncode == 2 and p.stderr == ("gpulet cdi: expected a command: generate "
                                              "(see gpulet cdi --help)\n"), p.stderr
    p = subprocess.run([GPULET, "cdi", "bogus"], capture_output=True, text=True, env=sim_env)
    assert p.returncode == 2 and "unknown command 'bogus'" in p.stderr, p.stderr
    assert len(p.stderr.splitlines()) == 1, p.stderr
    p = subprocess.run([GPULET, "version", "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("usage: gpulet version"), p


def test_agent_keeps_spec(plugin_agent, kubelet, driver_root, tmp_path):
    cdi = tmp_path / "cdi"
    a = plugin_agent("--simulate", "l4-pcie", "--nvidia-driver-root", str(driver_root),
                     "--device-list-strategy", "cdi-cri", "--cdi-spec-dir", str(cdi))
    a.wait_log("CDI spec written")
    spec = cdi / "nvidia.com-gpu.json"
    jsonschema.validate(json.loads(spec.read_text()), SCHEMA)
    stamp = spec.stat().st_mtime_ns
    # The same configuration again: the spec is not written again.
    a.proc.send_signal(signal.SIGHUP)
    kubelet.wait_registrations(2, timeout=10)
    assert a.log().count("CDI spec written") == 1
    assert spec.stat().st_mtime_ns == stamp
    assert not [f for f in os.listdir(cdi) if f != "nvidia.com-gpu.json"]  # no temporary left
    # Allocate names CDI devices the spec has.
    pb = kubelet.pb
    channel, stub = kubelet.plugin()
    ids = [d.ID for d in next(stub.ListAndWatch(pb.Empty(), timeout=STREAM_S)).devices]
    r = stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=ids[:1])])).container_responses[0]
    names = {d["name"] for d in json.loads(spec.read_text())["devices"]}
    assert [c.name for c in r.cdi_devices] == [f"nvidia.com/gpu={ids[0]}"]
    assert ids[0] in names
    channel.close()


def test_unwritable_cdi_dir(plugin_agent, kubelet, driver_root, tmp_path):
    a = plugin_agent("--simulate", "l4-pcie", "--nvidia-driver-root", str(driver_root),
                     "--device-list-strategy", "cdi-annotations",
                     "--cdi-spec-dir", str(driver_root / "usr/bin/nvidia-smi/cdi"))
    a.wait_log("containers asking for CDI devices will not start")
    assert str(driver_root / "usr/bin/nvidia-smi/cdi") in a.log()
    assert a.proc.poll() is None  # the plugin keeps serving


def test_driver_mounts_allocate(plugin_agent, kubelet, driver_root):
    a = plugin_agent("--simulate", "l4-pcie", "--nvidia-driver-root", str(driver_root),
                     "--device-list-strategy", "driver-mounts")
    a.wait_log("driver 580.159.04 under")
    pb = kubelet.pb
    channel, stub = kubelet.plugin()
    ids = [d.ID for d in next(stub.ListAndWatch(pb.Empty(), timeout=STREAM_S)).devices]
    r = stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[ids[2]])])).container_responses[0]
    devices = [(d.host_path, d.container_path, d.permissions) for d in r.devices]
    assert devices == [(str(driver_root / "dev/nvidiactl"), "/dev/nvidiactl", "rw"),
                       (str(driver_root / "dev/nvidia-uvm"), "/dev/nvidia-uvm", "rw"),
                       (str(driver_root / "dev/nvidia2"), "/dev/nvidia2", "rw")]
    mounts = {m.container_path: (m.host_path, m.read_only) for m in r.mounts}
    assert mounts[f"{LIB}/libnvidia-ml.so.1"] == (
        str(driver_root / f"usr/lib/{TRIPLET}/libnvidia-ml.so.{VERSION}"), True)
    assert "/usr/local/nvidia/bin/nvidia-smi" in mounts
    for d in SYSTEM_LIBS:
        assert mounts[f"{d}/libnvidia-ml.so.1"] == mounts[f"{LIB}/libnvidia-ml.so.1"]
    assert mounts["/usr/bin/nvidia-smi"] == mounts["/usr/local/nvidia/bin/nvidia-smi"]
    # An installed toolkit adds nothing, whatever the image's own value (CUDA
    # images set "all").
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == "void"
    channel.close()


def test_driver_mounts_without_driver(plugin_agent, kubelet, tmp_path):
    """No driver under the root: one error at start; Allocate fails naming
    the root (the pod gets the message), and the plugin keeps serving."""
    a = plugin_agent("--simulate", "l4-pcie", "--nvidia-driver-root", str(tmp_path / "empty"),
                     "--device-list-strategy", "driver-mounts")
    a.wait_log("containers get no driver files from gpulet")
    pb = kubelet.pb
    channel, stub = kubelet.plugin()
    ids = [d.ID for d in next(stub.ListAndWatch(pb.Empty(), timeout=STREAM_S)).devices]
    assert len(ids) == 4
    import grpc
    with pytest.raises(grpc.RpcError) as err:
        stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=ids[:1])]))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert str(tmp_path / "empty") in err.value.details()
    channel.close()


@pytest.mark.skipif(SANITIZED or not shutil.which("valgrind"), reason="valgrind runs on the plain build")
def test_valgrind_containers(plugin_agent, kubelet, driver_root, tmp_path):
    """Discovery, the CDI spec, a driver-mounts Allocate and a reload under
    valgrind: no leaks, no invalid accesses."""
    a = plugin_agent("--simulate", "l4-pcie", "--nvidia-driver-root", str(driver_root),
                     "--device-list-strategy", "cdi-cri,driver-mounts",
                     "--cdi-spec-dir", str(tmp_path / "cdi"),
                     prefix=("valgrind", "--error-exitcode=9", "--leak-check=full",
                             "--errors-for-leak-kinds=definite,indirect", "-q"))
    a.wait_log("CDI spec written", timeout=30)
    pb = kubelet.pb
    channel, stub = kubelet.plugin()
    ids = [d.ID for d in next(stub.ListAndWatch(pb.Empty(), timeout=STREAM_S)).devices]
    stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=ids[:2])]), timeout=30)
    channel.close()
    a.proc.send_signal(signal.SIGHUP)
    kubelet.wait_registrations(2, timeout=30)
    assert a.stop(timeout=60) == 0, a.log()
