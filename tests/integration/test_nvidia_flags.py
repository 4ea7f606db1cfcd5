"""Every flag and variable of NVIDIA's device plugin v0.17.4 and GPU
feature discovery v0.7.0 and as v0.17.4 ships it (their --help,
cmd/*/main.go at those tags) is
taken by `gpulet agent`: with NVIDIA's meaning, or taken and logged once as
not needed. A DaemonSet's arguments copied from NVIDIA's run unchanged."""
import subprocess

import pytest

from conftest import GPULET
from test_metrics import free_port

# NVIDIA's device plugin v0.17.4: each flag with its aliases, and its variables.
DEVICE_PLUGIN = [
    (["mig-strategy"], ["MIG_STRATEGY"], "none"),
    (["fail-on-init-error"], ["FAIL_ON_INIT_ERROR"], "true"),
    (["driver-root", "nvidia-driver-root"], ["NVIDIA_DRIVER_ROOT"], "/"),
    (["dev-root", "nvidia-dev-root"], ["NVIDIA_DEV_ROOT"], "/"),
    (["pass-device-specs"], ["PASS_DEVICE_SPECS"], "false"),
    (["device-list-strategy"], ["DEVICE_LIST_STRATEGY"], "envvar"),
    (["device-id-strategy"], ["DEVICE_ID_STRATEGY"], "uuid"),
    (["gds-enabled"], ["GDS_ENABLED"], "false"),
    (["mofed-enabled"], ["MOFED_ENABLED"], "false"),
    (["kubelet-socket"], ["KUBELET_SOCKET"], "{kubelet}/device-plugins/kubelet.sock"),
    (["config-file"], ["CONFIG_FILE"], "{config}"),
    (["cdi-annotation-prefix"], ["CDI_ANNOTATION_PREFIX"], "cdi.k8s.io/"),
    (["nvidia-cdi-hook-path", "nvidia-ctk-path"], ["NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"],
     "/usr/bin/nvidia-ctk"),
    (["driver-root-ctr-path", "container-driver-root"], ["DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"],
     "{tmp}"),
    (["mps-root"], ["MPS_ROOT"], "{tmp}/mps"),
    (["device-discovery-strategy"], ["DEVICE_DISCOVERY_STRATEGY"], "auto"),
    (["imex-channel-ids"], ["IMEX_CHANNEL_IDS"], ""),
    (["imex-required"], ["IMEX_REQUIRED"], "false"),
]
# GFD v0.7.0.
FEATURE_DISCOVERY = [
    (["mig-strategy"], ["GFD_MIG_STRATEGY", "MIG_STRATEGY"], "none"),
    (["fail-on-init-error"], ["GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"], "true"),
    (["oneshot"], ["GFD_ONESHOT"], "false"),
    (["no-timestamp"], ["GFD_NO_TIMESTAMP"], "false"),
    (["sleep-interval"], ["GFD_SLEEP_INTERVAL"], "60s"),
    (["output-file", "output", "o"], ["GFD_OUTPUT_FILE"], "{tmp}/gfd"),
    (["machine-type-file"], ["GFD_MACHINE_TYPE_FILE"], "{tmp}/product_name"),
    (["config-file"], ["GFD_CONFIG_FILE", "CONFIG_FILE"], "{config}"),
    # GFD as the device plugin v0.17.4 ships it (and v0.19, where it is on
    # by default): NFD's NodeFeature API (true: labels on the Node) or its file.
    (["use-node-feature-api"], ["GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API"], "false"),
]
# Read from the environment alone, by the device plugin.
ENV_ONLY = {"DP_DISABLE_HEALTHCHECKS": "48", "DP_ENABLE_HEALTHCHECKS": "31"}
# Taken and logged once as not needed, when given.
NOT_NEEDED = ["nvidia-cdi-hook-path", "imex-required", "sleep-interval"]


@pytest.fixture
def paths(tmp_path):
    (tmp_path / "config.yaml").write_text("version: v1\nflags:\n  migStrategy: none\n")
    (tmp_path / "product_name").write_text("DGX H100\n")
    return {"tmp": str(tmp_path), "config": str(tmp_path / "config.yaml"),
            "kubelet": str(tmp_path / "kubelet")}


def common(tmp_path):
    return ["--simulate", "t4", "--status-socket", str(tmp_path / "status.sock"),
            "--kubelet-root", str(tmp_path / "kubelet"), "--cdi-spec-dir", str(tmp_path / "cdi"),
            "--metrics-listen", f"127.0.0.1:{free_port()}"]


def test_help_names_every_flag_and_variable():
    text = subprocess.run([GPULET, "agent", "--help"], capture_output=True, text=True,
                          check=True).stdout
    for names, envs, _ in DEVICE_PLUGIN + FEATURE_DISCOVERY:
        for name in names:
            assert (f"--{name}" if len(name) > 1 else f"-{name}") in text, name
        for env in envs:
            assert env in text, env
    for env in ENV_ONLY:
        assert env in text, env
    for flag in ("--help", "--version"):
        assert flag in text
    for flag in ("--version", "-v"):
        assert subprocess.run([GPULET, "agent", flag], capture_output=True, text=True,
                              check=True).stdout.startswith("gpulet ")


@pytest.mark.parametrize("table", ["device-plugin", "feature-discovery"])
@pytest.mark.parametrize("form", [0, -1])  # the flag's name, its last alias
def test_every_flag_runs(agent, tmp_path, paths, table, form):
    rows = DEVICE_PLUGIN if table == "device-plugin" else FEATURE_DISCOVERY
    args = common(tmp_path)
    for names, _, value in rows:
        name = names[form]
        value = value.format(**paths)
        args += [f"-{name}" if len(name) == 1 else f"--{name}", value] if value or len(name) == 1 \
            else [f"--{name}="]
    a = agent(*args)
    a.wait_log("agent running")
    log = a.log()
    assert " error " not in log, log
    for flag in NOT_NEEDED:
        given = any(flag == names[0] for names, _, _ in rows)
        assert (f"--{flag} taken, not needed" in log) == given, (flag, log)
    assert log.count("taken, not needed") == sum(
        1 for names, _, _ in rows if names[0] in NOT_NEEDED), log


def test_every_variable_runs(agent, sim_env, tmp_path, paths):
    env = dict(sim_env, **ENV_ONLY)
    for names, envs, value in DEVICE_PLUGIN + FEATURE_DISCOVERY:
        for var in envs:
            env[var] = value.format(**paths)
    a = agent(*common(tmp_path), env=env)
    a.wait_log("agent running")
    log = a.log()
    assert " error " not in log, log
    for flag in NOT_NEEDED:
        assert log.count(f"--{flag} taken, not needed") == 1, (flag, log)


def test_variables_in_nvidias_order(agent, sim_env, tmp_path):
    """GFD's own variable wins over the device plugin's, as in GFD; the
    first of NVIDIA's two hook variables is the one read."""
    env = dict(sim_env, GFD_MIG_STRATEGY="single", MIG_STRATEGY="mixed",
               NVIDIA_CTK_PATH="/opt/nvidia-ctk")
    a = agent(*common(tmp_path), env=env)
    a.wait_log("agent running")
    assert "migStrategy=single" in a.log()
    assert "--nvidia-cdi-hook-path taken, not needed" in a.log()


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_oneshot_labels_once_and_exits(gpulet, sim_env, tmp_path, how):
    """GFD's --oneshot (or GFD_ONESHOT): the labels written once to the
    output file, and an exit: no daemon, nothing served."""
    out = tmp_path / "features.d" / "gfd"
    args = ["agent", *common(tmp_path), "-o", str(out)]
    env = dict(sim_env)
    if how == "flag":
        args.append("--oneshot")
    else:
        env["GFD_ONESHOT"] = "true"
    p = gpulet(*args, env=env)
    assert p.returncode == 0, p.stderr
    assert "nvidia.com/gpu.product=Tesla-T4" in out.read_text().splitlines()
    assert f"the labels are in {out}" in p.stderr
    assert not (tmp_path / "kubelet").exists() and not (tmp_path / "status.sock").exists()
    assert sorted(x.name for x in out.parent.iterdir()) == ["gfd"]  # no temporary left


BAD = [
    (["--device-discovery-strategy", "tegra"], "must be one of auto, nvml, not 'tegra'"),
    (["--imex-channel-ids", "0"], "IMEX channels are not supported yet"),
    (["--sleep-interval", "soon"], "--sleep-interval 'soon' is not a duration"),
    (["--kubelet-socket", "/tmp/kubelet.sock"], "a path ending in /device-plugins/kubelet.sock"),
    (["--kubelet-socket", "/a/device-plugins/kubelet.sock", "--kubelet-root", "/b"],
     "is not under --kubelet-root /b"),
    (["--fail-on-init-error=yes"], "--fail-on-init-error must be true or false, not 'yes'"),
    # GFD says "required flag node-name not set"; the labels' Node is needed
    (["--use-node-feature-api=true"], "--use-node-feature-api=true needs the Node's name"),
]


@pytest.mark.parametrize("args,error", BAD)
def test_values_gpulet_cannot_take(gpulet, tmp_path, args, error):
    """A value gpulet cannot honour is one line and exit 2, before anything
    is served."""
    p = gpulet("agent", *common(tmp_path), *args)
    assert p.returncode == 2, p.stderr
    assert error in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_options_that_take_no_effect_say_so(agent, sim_env, tmp_path):
    """An option given without the setting it needs is said once at start,
    naming it and why (issue 49, item 8); the same options with what they
    need say nothing."""
    env = dict(sim_env, GPULET_FAULT_TAINT_ON="xid")
    a = agent(*common(tmp_path), "--dra-mig", "0", "--dra-evict-on", "xid", "--fault-taint", env=env)
    a.wait_log("agent running")
    log = a.log()
    for flag, var, why in [("dra-mig", "GPULET_DRA_MIG", "DRA is off"),
                           ("dra-evict-on", "GPULET_DRA_EVICT_ON", "DRA is off"),
                           ("fault-taint", "GPULET_FAULT_TAINT", "the fault report is off"),
                           ("fault-taint-on", "GPULET_FAULT_TAINT_ON", "the fault report is off")]:
        assert log.count(f"--{flag} ({var}) takes no effect: {why}") == 1, (flag, log)
    assert log.count("takes no effect") == 4, log
    assert a.stop() == 0
    b = agent(*common(tmp_path))
    b.wait_log("agent running")
    assert "takes no effect" not in b.log()
