"""Registering before NVML is up: the device IDs from the driver's procfs
(here a fake one, GPULET_PROC_ROOT, describing the simulator's GPUs), NVML
started off the loop, its view merged in by UUID."""
import json
import random
import subprocess

from conftest import GPULET, STREAM_S


def fake_procfs(root, gpus, excluded=()):
    """The driver's /proc/driver/nvidia/gpus/<bus>/information for gpus."""
    for g in random.sample(gpus, len(gpus)):  # directory order says nothing
        bus = g["pci_bus_id"][4:].lower()
        d = root / "driver" / "nvidia" / "gpus" / bus
        d.mkdir(parents=True)
        (d / "information").write_text(
            f"Model: \t\t {g['name']}\nIRQ:   \t\t 41\nGPU UUID: \t {g['uuid']}\n"
            f"Bus Location: \t {bus}\nDevice Minor: \t {g['minor']}\n"
            f"GPU Excluded:\t {'Yes' if g['uuid'] in excluded else 'No'}\n")


def sim_gpus(gpulet, preset):
    return json.loads(gpulet("list", "--simulate", preset, "-o", "json").stdout)["gpus"]


def health(sock):
    """`gpulet health`'s rows (its header left out)."""
    p = subprocess.run([GPULET, "health", "--status-socket", str(sock)], capture_output=True,
                       text=True)
    return p.stdout.splitlines()[1:]


def test_registers_from_procfs_then_merges_nvml(plugin_agent, kubelet, gpulet, sim_env, tmp_path):
    gpus = sim_gpus(gpulet, "dgx-h100")
    fake_procfs(tmp_path / "proc", gpus)
    sim_env["GPULET_PROC_ROOT"] = str(tmp_path / "proc")
    a = plugin_agent("--simulate", "dgx-h100")
    a.wait_log("8 GPU(s) in")
    assert "registering them while NVML starts" in a.log()
    channel, stub = kubelet.plugin()
    stream = stub.ListAndWatch(kubelet.pb.Empty(), timeout=STREAM_S)
    first = next(stream)
    assert [d.ID for d in first.devices] == [g["uuid"] for g in gpus]  # bus order = NVML's
    assert "device IDs from procfs" in a.log()
    # NVML's facts arrived: NUMA nodes, and health from NVML's own view.
    now = first
    while not all(d.topology.nodes for d in now.devices):
        now = next(stream)
    assert [d.topology.nodes[0].ID for d in now.devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    r = stub.Allocate(kubelet.pb.AllocateRequest(container_requests=[
        kubelet.pb.ContainerAllocateRequest(devices_ids=[gpus[5]["uuid"]])]))
    assert r.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == gpus[5]["uuid"]
    stream.cancel()


def test_procfs_gpu_that_nvml_lacks_is_unhealthy(plugin_agent, kubelet, gpulet, sim_env, tmp_path):
    gpus = sim_gpus(gpulet, "l4-pcie")
    extra = dict(gpus[0], uuid="GPU-00000000-0000-0000-0000-00000000dead",
                 pci_bus_id="00000000:F0:00.0", minor=9)
    fake_procfs(tmp_path / "proc", gpus + [extra])
    sim_env["GPULET_PROC_ROOT"] = str(tmp_path / "proc")
    a = plugin_agent("--simulate", "l4-pcie")
    lines = health(tmp_path / "status.sock")
    assert len(lines) == 5
    assert extra["uuid"] in lines[4] and "Unhealthy" in lines[4]
    assert "the driver lists it, NVML does not" in lines[4]
    assert all(" Healthy " in l for l in lines[:4])
    assert "NVML lists GPU" not in a.log()


def test_excluded_gpu_is_left_out(plugin_agent, kubelet, gpulet, sim_env, tmp_path):
    gpus = sim_gpus(gpulet, "l4-pcie")
    fake_procfs(tmp_path / "proc", gpus, excluded={gpus[2]["uuid"]})
    sim_env["GPULET_PROC_ROOT"] = str(tmp_path / "proc")
    a = plugin_agent("--simulate", "l4-pcie")
    _, stub = kubelet.plugin()
    devs = next(stub.ListAndWatch(kubelet.pb.Empty(), timeout=STREAM_S)).devices
    assert gpus[2]["uuid"] not in [d.ID for d in devs] and len(devs) == 3
    assert f"NVML lists GPU {gpus[2]['uuid']}, which the driver's procfs did not" in a.log()


def test_bad_nvml_with_procfs(agent, kubelet, gpulet, sim_env, tmp_path):
    """An NVML that does not even load fails before anything is advertised."""
    fake_procfs(tmp_path / "proc", sim_gpus(gpulet, "t4"))
    sim_env["GPULET_PROC_ROOT"] = str(tmp_path / "proc")
    a = agent("--nvml", "libm.so.6", "--kubelet-root", str(kubelet.root), "--no-metrics")
    assert a.proc.wait(timeout=10) == 1
    assert "lacks nvmlInit_v2" in a.log()
    assert not kubelet.registrations


def test_nvml_init_failing_off_the_loop(agent, kubelet, gpulet, sim_env, tmp_path):
    """The GPUs were advertised from procfs: NVML failing to initialize turns
    them unhealthy, and the agent exits 1 unless told not to fail."""
    fake_procfs(tmp_path / "proc", sim_gpus(gpulet, "t4"))
    sim_env["GPULET_PROC_ROOT"] = str(tmp_path / "proc")
    sim_env["GPULET_SIM_INIT_ERROR"] = "9"  # driver not loaded
    a = agent("--simulate", "t4", "--kubelet-root", str(kubelet.root), "--no-metrics",
              "--fail-on-init-error", "false")
    kubelet.wait_registrations(1)
    a.wait_log("its GPUs are advertised unhealthy")
    _, stub = kubelet.plugin()
    stream = stub.ListAndWatch(kubelet.pb.Empty(), timeout=STREAM_S)
    assert [d.health for d in next(stream).devices] == ["Unhealthy"]
    line = health(sim_env["GPULET_STATUS_SOCKET"])[0]
    assert "Unhealthy" in line and "NVML initialization failed: Driver Not Loaded" in line, line
    stream.cancel()
    assert a.stop() == 0
    b = agent("--simulate", "t4", "--kubelet-root", str(kubelet.root), "--no-metrics")
    assert b.proc.wait(timeout=10) == 1
    assert "registering them while NVML starts" in b.log()
    assert "Driver Not Loaded" in b.log()
