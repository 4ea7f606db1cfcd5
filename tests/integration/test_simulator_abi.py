"""The simulator as a third-party NVML program sees it: loaded by soname,
with exactly the real library's exported names; and gpulet's NVML header
against NVIDIA's (tests/abi: facts taken from NVIDIA's nvml.h), so that
the simulator and the product cannot agree on a wrong prototype."""
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import SIM_LIB, SOURCE, ctypes_env


sys.path.insert(0, str(SOURCE / "tests" / "abi"))
from prototypes import prototypes  # noqa: E402


def nvidia_functions():
    """{name: prototype} of NVIDIA's nvml.h (tests/abi/nvml-580-functions.txt)."""
    lines = (SOURCE / "tests" / "abi" / "nvml-580-functions.txt").read_text().splitlines()
    return {re.search(r"(nvml\w+)\(", l).group(1): l for l in lines if l and not l.startswith("#")}


def test_exports_match_real_library():
    out = subprocess.run(["nm", "-D", "--defined-only", SIM_LIB], capture_output=True,
                         text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    real = set((SOURCE / "sim" / "nvml-exports.txt").read_text().split())
    assert exported == real, (sorted(exported - real)[:10], sorted(real - exported)[:10])
    # The export list is the stubs' source: held to NVIDIA's header, too.
    undeclared = set(nvidia_functions()) - exported
    assert not undeclared, sorted(undeclared)


def test_prototypes_are_nvidias():
    """Every function src/nvml/nvml_abi.h declares (the agent calls through
    them, the simulator defines them) has NVIDIA's return and parameter
    types; every symbol gpulet resolves is one NVIDIA declares."""
    nvidia = nvidia_functions()
    ours = prototypes((SOURCE / "src" / "nvml" / "nvml_abi.h").read_text())
    assert len(ours) > 50, "the parser found too few prototypes in nvml_abi.h"
    wrong = {n: (p, nvidia.get(n)) for n, p in ours.items() if nvidia.get(n) != p}
    assert not wrong, wrong
    resolved = set(re.findall(r'"(nvml\w+)"', (SOURCE / "src" / "nvml" / "nvml.h").read_text()))
    assert len(resolved) > 50 and not resolved - set(nvidia), sorted(resolved - set(nvidia))


CLIENT = textwrap.dedent("""
    import ctypes, sys
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    nvml.nvmlErrorString.restype = ctypes.c_char_p
    def check(rc):
        if rc != 0:
            raise SystemExit("NVML error %d: %s" % (rc, nvml.nvmlErrorString(rc).decode()))
    count = ctypes.c_uint()
    assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 1   # UNINITIALIZED
    assert nvml.nvmlShutdown() == 1
    check(nvml.nvmlInit_v2())
    check(nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)))
    buf = ctypes.create_string_buffer(96)
    check(nvml.nvmlSystemGetDriverVersion(buf, 96))
    print("driver", buf.value.decode())
    for i in range(count.value):
        h = ctypes.c_void_p()
        check(nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)))
        check(nvml.nvmlDeviceGetName(h, buf, 96))
        name = buf.value.decode()
        check(nvml.nvmlDeviceGetUUID(h, buf, 96))
        class Mem(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong),
                        ("reserved", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                        ("used", ctypes.c_ulonglong)]
        m = Mem(version=ctypes.sizeof(Mem) | (2 << 24))
        check(nvml.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(m)))
        print(i, name, buf.value.decode(), m.total >> 20)
    small = ctypes.create_string_buffer(4)
    assert nvml.nvmlDeviceGetUUID(h, small, 4) == 7    # INSUFFICIENT_SIZE
    assert nvml.nvmlDeviceGetFanSpeed(h, ctypes.byref(count)) == 3   # NOT_SUPPORTED
    check(nvml.nvmlShutdown())
""")


def test_third_party_program_loads_simulator(tmp_path, sim_env):
    """A ctypes program written against NVML's documented API, unaware of gpulet."""
    env = ctypes_env(dict(sim_env, LD_LIBRARY_PATH=str(Path(SIM_LIB).parent / "sim"),
                          GPULET_SIM_SCENARIO="l4-pcie"))
    p = subprocess.run(["/usr/bin/python3", "-c", CLIENT], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "driver 580.159.04"
    assert len(lines) == 5
    assert lines[1].startswith("0 NVIDIA L4 GPU-") and lines[1].endswith(" 23034")


C2C = textwrap.dedent("""
    import ctypes
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    assert nvml.nvmlInit_v2() == 0
    h = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
    c2c = ctypes.c_uint(7)
    print(nvml.nvmlDeviceGetC2cModeInfoV(h, ctypes.byref(c2c)), c2c.value)
    nvml.nvmlShutdown()
""")


def test_grace_hopper(gpulet, sim_env):
    """The gh200 preset: a GH200 480GB as nvidia-smi and NVML show it (name,
    memory, bus id, NVLink-C2C on), with its labels; other GPUs have no C2C."""
    env = ctypes_env(dict(sim_env, LD_LIBRARY_PATH=str(Path(SIM_LIB).parent / "sim")))
    for scenario, want in (("gh200", "0 1"), ("t4", "3 7")):  # SUCCESS enabled; NOT_SUPPORTED
        p = subprocess.run(["/usr/bin/python3", "-c", C2C], capture_output=True, text=True,
                           env=dict(env, GPULET_SIM_SCENARIO=scenario), timeout=60)
        assert p.returncode == 0 and p.stdout.split() == want.split(), (scenario, p.stdout, p.stderr)
    gpu = json.loads(gpulet("list", "--simulate", "gh200", "-o", "json").stdout)["gpus"][0]
    assert (gpu["name"], gpu["memory_total_mib"], gpu["pci_bus_id"]) == (
        "NVIDIA GH200 480GB", 97871, "00000009:01:00.0"), gpu
    labels = gpulet("labels", "--simulate", "gh200").stdout
    for want in ("accelerator=nvidia-gh200-480gb", "nvidia.com/gpu.product=NVIDIA-GH200-480GB",
                 "nvidia.com/gpu.memory=97871", "nvidia.com/gpu.family=hopper",
                 "nvidia.com/mig.capable=true"):
        assert want in labels, labels


MIG_STEP = textwrap.dedent("""
    import ctypes, sys
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    assert nvml.nvmlInit_v2() == 0
    h = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
    if sys.argv[1] == "on":
        status = ctypes.c_int()
        print(nvml.nvmlDeviceSetMigMode(h, 1, ctypes.byref(status)))
    else:
        current, pending = ctypes.c_uint(), ctypes.c_uint()
        assert nvml.nvmlDeviceGetMigMode(h, ctypes.byref(current), ctypes.byref(pending)) == 0
        print(current.value)
    nvml.nvmlShutdown()
""")


def test_state_file_carries_mig_from_process_to_process(tmp_path, sim_env):
    """GPULET_SIM_STATE: MIG mode set by one short NVML session (as
    nvidia-mig-parted works) is there in the next process; a file that does
    not fit the scenario fails nvmlInit, naming its line."""
    state = tmp_path / "mig.state"
    env = ctypes_env(dict(sim_env, LD_LIBRARY_PATH=str(Path(SIM_LIB).parent / "sim"),
                          GPULET_SIM_SCENARIO="hgx-h200", GPULET_SIM_STATE=str(state),
                          GPULET_SIM_CONTROL="off"))

    def step(what):
        return subprocess.run(["/usr/bin/python3", "-c", MIG_STEP, what], capture_output=True, text=True,
                              env=env, timeout=60)
    assert step("mode").stdout.split() == ["0"]  # no file yet: the scenario's MIG off
    assert step("on").stdout.split() == ["0"]    # SUCCESS: Hopper changes at once
    assert "gpu 0 mig on pending 0" in state.read_text()
    assert step("mode").stdout.split() == ["1"]  # another process: still on
    state.write_text("gpu 0 mig on pending 0 generation 1\ninstance 0 9g.99gb 0 1 0 1 0\n")
    p = step("mode")
    assert p.returncode != 0 and f"GPULET_SIM_STATE {state}:2: the GPU has no such MIG profile" in p.stderr, p.stderr
