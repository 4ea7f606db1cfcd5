"""Per-node configuration through a stand-in API server: the Node's label
chooses a named config from a ConfigMap; label and ConfigMap changes apply
live by the SIGHUP path (the kubelet sees the plugin register again with
the new devices); a bad config, or a label naming a missing one, keeps the
running config with one error and the gpulet_config_* series; SIGHUP keeps
the node's config; an API server that does not answer at start-up."""
import json
import shutil
import signal
import time
import urllib.request

import pytest

from conftest import SANITIZED
from fakeapi import FakeAPI
from test_metrics import free_port

LABEL = "nvidia.com/device-plugin.config"
TS = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {{name: nvidia.com/gpu, replicas: {}}}\n"
CONFIGS = {"default": "version: v1\n", "ts4": TS.format(4), "ts2": TS.format(2)}


def devices(kubelet):
    """How many devices the last registration's ListAndWatch sends first."""
    channel, stub = kubelet.plugin()
    try:
        return len(next(stub.ListAndWatch(kubelet.pb.Empty(), timeout=5)).devices)
    finally:
        channel.close()


def series(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {l.split(" ")[0]: l.split(" ")[1] for l in text.splitlines()
            if l.startswith("gpulet_config_")}


def wait_metric(port, name, value, timeout=5.0):
    deadline = time.monotonic() + timeout
    while series(port).get(name) != value:
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}: {series(port)}")
        time.sleep(0.1)


def start(plugin_agent, api, tmp_path, *args, wait=True, prefix=()):
    kc = api.kubeconfig(tmp_path / "kubeconfig")
    return plugin_agent("--simulate", "l4-pcie", "--labels", "api", "--kubeconfig", str(kc),
                        "--node-name", "n1", "--config-map", "gpulet/gpulet-config", *args,
                        wait=wait, prefix=prefix)


def test_label_and_configmap_apply_live(plugin_agent, kubelet, tmp_path):
    api = FakeAPI(labels={LABEL: "ts4"})
    api.set_configmap("gpulet", "gpulet-config", CONFIGS)
    port = free_port()
    try:
        a = start(plugin_agent, api, tmp_path, "--metrics-listen", f"127.0.0.1:{port}")
        assert "node config: applied 'ts4' from ConfigMap gpulet/gpulet-config (chosen by the " \
               "node label)" in a.log()
        assert devices(kubelet) == 16  # 4 GPUs, 4 replicas each: applied before registering
        api.wait(lambda l: l.get("nvidia.com/gpu.replicas") == "4")
        assert len(kubelet.registrations) == 1
        wait_metric(port, 'gpulet_config_info{config="ts4"}', "1")
        assert series(port)["gpulet_config_last_reload_successful"] == "1"

        # The label changes: applied as it happens, by a new registration
        # (bench/nodeconfig_latency.py times it).
        t0 = time.monotonic()
        api.set_label(LABEL, "ts2")
        kubelet.wait_registrations(2, timeout=10)
        took = time.monotonic() - t0
        assert devices(kubelet) == 8
        assert took < 3, took
        api.wait(lambda l: l.get("nvidia.com/gpu.replicas") == "2")  # labels follow

        # The ConfigMap changes under the same name.
        api.set_configmap("gpulet", "gpulet-config", {**CONFIGS, "ts2": TS.format(3)})
        kubelet.wait_registrations(3, timeout=10)
        assert devices(kubelet) == 12

        # A bad config: refused, the running one kept, one error, counted.
        api.set_configmap("gpulet", "gpulet-config", {**CONFIGS, "ts2": TS.format(1)})
        a.wait_log("node config: config 'ts2' not applied: ConfigMap gpulet/gpulet-config key "
                   "ts2:")
        wait_metric(port, "gpulet_config_last_reload_successful", "0")
        assert series(port)["gpulet_config_reload_failures_total"] == "1"
        assert 'gpulet_config_info{config="ts2"}' in series(port)  # the running one's name
        time.sleep(0.5)
        assert len(kubelet.registrations) == 3 and devices(kubelet) == 12
        # The Node changes for another reason (its labels): nothing is tried again.
        api.set_label("example.com/other", "x")
        time.sleep(0.5)
        assert a.log().count("not applied") == 1

        # A label naming a config that is not there: refused with the names there are.
        api.set_label(LABEL, "nope")
        a.wait_log("nvidia.com/device-plugin.config=nope: the node label names config 'nope', "
                   "which the ConfigMap does not have (it has: default, ts2, ts4)")
        wait_metric(port, "gpulet_config_reload_failures_total", "2")

        # The label goes: the config named default.
        api.set_label(LABEL, None)
        kubelet.wait_registrations(4, timeout=10)
        assert devices(kubelet) == 4
        a.wait_log("applied 'default' from ConfigMap gpulet/gpulet-config (chosen by the config "
                   "named default)")
        wait_metric(port, "gpulet_config_last_reload_successful", "1")

        # SIGHUP reloads the node's config, not the flags' alone.
        api.set_label(LABEL, "ts4")
        kubelet.wait_registrations(5, timeout=10)
        a.proc.send_signal(signal.SIGHUP)
        kubelet.wait_registrations(6, timeout=10)
        assert devices(kubelet) == 16

        # The ConfigMap is deleted: the named config cannot be read, so it stays.
        api.set_configmap("gpulet", "gpulet-config", None)
        a.wait_log("node config: ConfigMap gpulet/gpulet-config does not exist, and the node "
                   "label names config 'ts4'; keeping the running configuration")
        # Without the label either, no named config applies: flags alone (whole GPUs).
        api.set_label(LABEL, None)
        kubelet.wait_registrations(7, timeout=10)
        assert devices(kubelet) == 4
        a.wait_log("node config: none applies now (the ConfigMap does not exist)")
        assert a.stop() == 0
    finally:
        api.stop()


@pytest.mark.parametrize("fail_path, missing", [
    ("", "Node n1 and ConfigMap gpulet/gpulet-config"),
    # The ConfigMap answers, the Node does not: the choice waits for the
    # label rather than applying the ConfigMap's default and replacing it a
    # moment later (one re-registration, not two).
    ("/api/v1/nodes", "Node n1")])
def test_api_down_at_start(plugin_agent, kubelet, tmp_path, fail_path, missing):
    """No answer in 10 s: gpulet starts on its flags, says which object did
    not answer, and applies the node's config once both have."""
    api = FakeAPI(labels={LABEL: "ts4"})
    api.set_configmap("gpulet", "gpulet-config", CONFIGS)
    api.fail, api.fail_path = 503, fail_path
    try:
        a = start(plugin_agent, api, tmp_path, wait=False)
        kubelet.wait_registrations(1, timeout=20)
        assert f"node config: no answer from the API server in 10 s for {missing}; " in a.log()
        assert "HTTP 503" in a.log()
        assert devices(kubelet) == 4
        api.fail = 0
        kubelet.wait_registrations(2, timeout=40)
        a.wait_log("node config: applied 'ts4'", timeout=10)
        assert devices(kubelet) == 16
        time.sleep(1.5)
        assert len(kubelet.registrations) == 2
        assert "applied 'default'" not in a.log()
        assert a.stop() == 0
    finally:
        api.stop()


def test_bad_options(agent, tmp_path):
    a = agent("--simulate", "l4-pcie", "--config-map", "gpulet-config", "--no-metrics",
              "--kubelet-root", str(tmp_path / "k"), "--status-socket", str(tmp_path / "s.sock"))
    assert a.proc.wait(timeout=10) == 2  # options that do not go together
    assert "--config-map needs the Node's name: set NODE_NAME" in a.log()
    b = agent("--simulate", "l4-pcie", "--config-map", "gpulet-config", "--node-name", "n1",
              "--config-label", "bad label", "--no-metrics")
    assert b.proc.wait(timeout=10) == 2
    assert "--config-label 'bad label' is not a valid label key" in b.log()


@pytest.mark.skipif(SANITIZED or not shutil.which("valgrind"), reason="valgrind runs on the plain build")
def test_valgrind_nodeconfig(plugin_agent, kubelet, tmp_path):
    """The two watch threads, a live change and a refused config, under
    valgrind: no leaks, no invalid accesses."""
    api = FakeAPI(labels={LABEL: "ts4"})
    api.set_configmap("gpulet", "gpulet-config", CONFIGS)
    try:
        a = start(plugin_agent, api, tmp_path, prefix=(
            "valgrind", "--error-exitcode=9", "--leak-check=full",
            "--errors-for-leak-kinds=definite,indirect", "-q"))
        api.set_label(LABEL, "ts2")
        kubelet.wait_registrations(2, timeout=30)
        api.set_configmap("gpulet", "gpulet-config", {**CONFIGS, "ts2": TS.format(1)})
        a.wait_log("not applied", timeout=30)
        assert a.stop(timeout=60) == 0, a.log()
    finally:
        api.stop()


def test_doctor_reads_the_named_config(plugin_agent, gpulet, tmp_path):
    """gpulet doctor, given no agent options, checks what the agent runs
    with: here a named config from the ConfigMap that sets driver-mounts,
    which needs no NVIDIA runtime (its flags alone would say envvar)."""
    api = FakeAPI(labels={LABEL: "dm"})
    api.set_configmap("gpulet", "gpulet-config", {
        "default": "version: v1\n",
        "dm": "version: v1\nflags:\n  plugin:\n    deviceListStrategy: driver-mounts\n"})
    try:
        start(plugin_agent, api, tmp_path, "--labels", "none")
        # --root /: this host's runtime is checked for the named config's
        # strategy, though the agent's GPUs are simulated.
        p = gpulet("doctor", "-o", "json", "--root", "/", "--status-socket", str(tmp_path / "status.sock"),
                   timeout=60)
        checks = {c["id"]: c for c in json.loads(p.stdout)["checks"]}
        assert checks["runtime"]["status"] == "PASS", checks["runtime"]
        assert "driver-mounts" in checks["runtime"]["message"], checks["runtime"]
        assert checks["registration"]["status"] == "PASS", checks["registration"]
    finally:
        api.stop()
