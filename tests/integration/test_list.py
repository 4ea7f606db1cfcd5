"""`gpulet list` on the simulator, and its errors for bad input."""
import json

import pytest



def test_list_dgx_h100_table(gpulet):
    p = gpulet("list", "--simulate", "dgx-h100")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["INDEX", "UUID", "PRODUCT", "MEMORY", "BUS", "ID", "NUMA", "HEALTH"]
    rows = lines[1:9]
    assert len(rows) == 8
    for i, row in enumerate(rows):
        assert row.startswith(str(i))
        assert "NVIDIA H100 80GB HBM3" in row and "81559 MiB" in row and row.endswith("Healthy")
    assert lines[9] == "8 GPUs, driver 580.159.04, CUDA 13.0"


def test_list_json_fields(gpulet):
    p = gpulet("list", "--simulate", "a100-2x4", "-o", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["count"] == 8 and doc["driver_version"] == "580.159.04"
    assert doc["cuda_driver_version"] == "13.0" and doc["nvml_version"] == "13.580.159.04"
    g = doc["gpus"][5]
    assert g["index"] == 5 and g["minor"] == 5
    assert g["name"] == "NVIDIA A100-SXM4-80GB" and g["memory_total_mib"] == 81920
    assert g["numa_node"] == 1 and g["compute_capability"] == "8.0"
    assert g["architecture"] == "ampere" and g["mig_mode"] == "disabled"
    assert g["uuid"].startswith("GPU-") and len(g["uuid"]) == 40
    links = {l["peer"]: l for l in g["links"]}
    assert links[4]["nvlinks"] == 4 and links[0]["nvlinks"] == 0
    assert links[4]["pcie"] == "PIX" and links[0]["pcie"] == "SYS"


def test_list_topology_matrix(gpulet):
    p = gpulet("list", "--simulate", "dgx-h100", "-o", "topology")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[1].split() == ["GPU0", "X"] + ["NV18"] * 7 + ["0"]
    assert lines[8].split()[-1] == "1"


def test_list_scenario_file(gpulet, tmp_path):
    f = tmp_path / "node.yaml"
    f.write_text("name: mine\ngpus:\n  - product: l4\n    count: 3\n")
    p = gpulet("list", "--simulate", str(f), "-o", "json")
    assert p.returncode == 0, p.stderr
    assert [g["name"] for g in json.loads(p.stdout)["gpus"]] == ["NVIDIA L4"] * 3


def one_error_line(p, code=1):
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_corrupt_scenario(gpulet, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("gpus:\n  - product: h100-sxm\n    count: [8\n")
    line = one_error_line(gpulet("list", "--simulate", str(f)))
    assert f"{f}:" in line and "gpulet list:" in line


def test_bad_value_in_scenario(gpulet, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("gpus:\n  - product: h100-sxm\n    count: 99\n")
    line = one_error_line(gpulet("list", "--simulate", str(f)))
    assert f"{f}:3:12: count must be between 1 and 64, not 99" in line


def test_unknown_preset(gpulet):
    # A name on the command line that names nothing: a bad command line.
    line = one_error_line(gpulet("list", "--simulate", "dgx-h1000"), code=2)
    assert "unknown simulator preset 'dgx-h1000'" in line


def test_missing_library(gpulet):
    line = one_error_line(gpulet("list", "--nvml", "/nonexistent/libnvidia-ml.so.1"))
    assert "cannot load NVML" in line and "/nonexistent/libnvidia-ml.so.1" in line


def test_no_driver_names_search_path(gpulet, sim_env):
    env = dict(sim_env, LD_LIBRARY_PATH="")
    p = gpulet("list", env=env)
    if p.returncode == 0:
        pytest.skip("this machine has an NVIDIA driver")
    line = one_error_line(p)
    for path in ("libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                 "/usr/local/nvidia/lib64/libnvidia-ml.so.1", "/run/nvidia/driver"):
        assert path in line
    assert "try `gpulet list --simulate dgx-h100` (simulated GPUs" in line


def test_not_nvml_library(gpulet):
    line = one_error_line(gpulet("list", "--nvml", "libm.so.6"))
    assert "lacks nvmlInit_v2" in line


@pytest.mark.parametrize("args,text", [
    (["list", "-o", "yaml"], "output format must be table, wide, json or topology, not 'yaml'"),
    (["list", "--bogus"], "unknown option '--bogus'"),
    (["list", "--simulat", "t4"], "unknown option '--simulat'"),
    (["list", "--sim=t4"], "unknown option '--sim'"),
    (["agent", "--simulat", "t4"], "unknown option '--simulat'"),
    (["agent", "--kubelet-roo", "/x"], "unknown option '--kubelet-roo'"),
    (["health", "--status-sock", "x"], "unknown option '--status-sock'"),
    (["health", "clear"], "expected no command or 'clear GPU'"),
    (["health", "clear", "bad gpu"], "is not a GPU index or UUID"),
    (["health", "-o", "yaml"], "output format must be table, wide or json, not 'yaml'"),
    (["list", "--simulate"], "unknown or incomplete option"),
    (["list", "extra"], "unexpected argument 'extra'"),
    (["list", "--simulate", "t4", "--nvml", "x"], "cannot be combined"),
    (["agent", "--log-level", "loud"], "--log-level must be one of debug, info, warn, error"),
    (["frobnicate"], "unknown command 'frobnicate'"),
    (["sim"], "usage: gpulet sim"),
    (["sim", "show"], "show needs exactly one argument"),
    # a bad line to the simulator is a usage error, before its socket is dialled
    (["sim", "xid"], "xid takes GPU XID [GI]"),
    (["sim", "xid", "3", "abc"], "xid: 'abc' is not a number"),
    (["sim", "ecc", "1", "2"], "ecc takes GPU"),
    (["sim", "ping", "x"], "ping takes no arguments"),
])
def test_usage_errors(gpulet, args, text):
    p = gpulet(*args)
    assert p.returncode == 2, p.stderr
    assert text in p.stderr


def test_options_after_the_command(gpulet, tmp_path):
    """Options may follow a command's words: the socket named is the one tried."""
    sock = tmp_path / "agent.sock"
    p = gpulet("health", "clear", "3", "--status-socket", str(sock))
    assert p.returncode == 1 and f"cannot reach {sock}" in p.stderr


def test_help_and_version(gpulet):
    for args in (["--help"], ["list", "--help"], ["agent", "--help"], ["sim", "--help"],
                 ["labels", "--help"]):
        p = gpulet(*args)
        assert p.returncode == 0 and "usage:" in p.stdout
    assert gpulet("version").stdout.startswith("gpulet ")


def test_sim_presets_show_check(gpulet, tmp_path):
    p = gpulet("sim", "presets")
    assert p.stdout.split() == ["dgx-h100", "hgx-h200", "h200x4-vm", "gh200", "a100-2x4", "a100-mig-mixed",
                                "h100-mig-single", "h100-mig-empty", "h200-mig-mixed", "l4-pcie", "t4",
                                "mixed-pcie", "scale-64"]
    shown = gpulet("sim", "show", "l4-pcie").stdout
    f = tmp_path / "copy.yaml"
    f.write_text(shown)
    p = gpulet("sim", "check", str(f))
    assert p.returncode == 0 and "l4-pcie: 4 GPUs" in p.stdout
    f.write_text(shown + "bogus: 1\n")
    line = one_error_line(gpulet("sim", "check", str(f)))
    assert "unknown key 'bogus'" in line


def test_sim_without_target(gpulet):
    line = one_error_line(gpulet("sim", "xid", "0", "79"))
    assert "cannot reach" in line and "is a process running with --simulate?" in line


def test_scale_64(gpulet):
    p = gpulet("list", "--simulate", "scale-64", "-o", "json")
    doc = json.loads(p.stdout)
    assert doc["count"] == 64
    assert len({g["uuid"] for g in doc["gpus"]}) == 64
    assert len({g["pci_bus_id"] for g in doc["gpus"]}) == 64


def test_list_wide(gpulet):
    """-o wide adds what README says list shows beyond the table: the minor
    number, compute capability, architecture and MIG mode."""
    out = gpulet("list", "--simulate", "a100-mig-mixed", "-o", "wide").stdout.splitlines()
    assert out[0].split()[-5:] == ["MINOR", "CC", "ARCH", "MIG", "HEALTH"], out[0]
    gpu0 = out[1].split()
    assert gpu0[-5:] == ["0", "8.0", "ampere", "Enabled", "Healthy"], out[1]
    whole = next(line for line in out if line.startswith("7 "))
    assert whole.split()[-5:] == ["7", "8.0", "ampere", "Disabled", "Healthy"], whole
