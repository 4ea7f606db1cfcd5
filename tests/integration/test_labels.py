"""Node labels: `gpulet labels`, and the agent keeping NFD's feature file
current, on change only, as a fault happens (its latency is
bench/labels_latency.py's; the Node through the real API server is
tests/e2e's)."""
import json
import shutil
import signal
import time

import pytest

from conftest import SANITIZED, check_clean, STREAM_S


def read_nfd(path):
    """The feature file as NFD's local source reads it: key=value lines; a
    key without a prefix gets NFD's feature.node.kubernetes.io/."""
    labels = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        if "/" not in key:
            key = "feature.node.kubernetes.io/" + key
        labels[key] = value
    return labels


def text_labels(out):
    return dict(line.split("=", 1) for line in out.splitlines())


def wait_file(path, pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if path.exists():
            last = read_nfd(path)
            if pred(last):
                return last
        time.sleep(0.01)
    raise AssertionError(f"{path}: {last}")


def test_labels_text_and_json(gpulet):
    p = gpulet("labels", "--simulate", "dgx-h100")
    assert p.returncode == 0, p.stderr
    text = text_labels(p.stdout)
    assert text["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert text["nvidia.com/gpu.machine"] == "DGX-H100"
    assert text["accelerator"] == "nvidia-h100-80gb"
    assert "nvidia.com/gfd.timestamp" not in text
    p = gpulet("labels", "--simulate", "dgx-h100", "-o", "json")
    assert json.loads(p.stdout) == text
    p = gpulet("labels", "--simulate", "t4", "--no-timestamp", "false",
               "--accelerator-label", "cloud.google.com/gke-accelerator")
    text = text_labels(p.stdout)
    assert abs(int(text["nvidia.com/gfd.timestamp"]) - time.time()) < 60
    assert text["cloud.google.com/gke-accelerator"] == "nvidia-tesla-t4"


def test_labels_bad_input(gpulet, tmp_path, sim_env):
    for args, what in ((["-o", "yaml"], "output format must be text or json"),
                       (["--accelerator-label", "bad key!"], "not a valid label key"),
                       (["--labels", "bogus"], "--labels must be one of"),
                       (["-o"], "-o needs a value")):
        p = gpulet("labels", "--simulate", "t4", *args)
        assert p.returncode == 2 and what in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1
    # No machine type file (a VM, a container): the label says so, no more.
    env = dict(sim_env, GFD_MACHINE_TYPE_FILE=str(tmp_path / "absent"))
    p = gpulet("labels", "--simulate", "t4", env=env)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert "nvidia.com/gpu.machine=unknown" in p.stdout
    # One that cannot be read: one warning, the labels still come.
    env = dict(sim_env, GFD_MACHINE_TYPE_FILE=str(tmp_path))
    p = gpulet("labels", "--simulate", "t4", env=env)
    assert p.returncode == 0 and "machine type file" in p.stderr and "read error" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "nvidia.com/gpu.machine=unknown" in p.stdout


def test_agent_without_a_machine_type_file(plugin_agent, kubelet, tmp_path, sim_env):
    """A node with no DMI product name (a VM, a container) is no fault: the
    agent says so once, at info, where it publishes labels, and not again
    at a reload."""
    env = dict(sim_env, GFD_MACHINE_TYPE_FILE=str(tmp_path / "absent"))
    out = tmp_path / "features.d" / "gfd"
    a = plugin_agent("--simulate", "t4", "--labels", "file", "--output-file", str(out), env=env)
    wait_file(out, lambda l: l.get("nvidia.com/gpu.machine") == "unknown")
    a.proc.send_signal(signal.SIGHUP)
    kubelet.wait_registrations(2, timeout=10)
    said = [l for l in a.log().splitlines() if "machine type file" in l]
    assert len(said) == 1 and " info " in said[0], said


def test_agent_stops_while_its_feature_file_is_written(plugin_agent, tmp_path, sim_env, slow_fsync):
    """Every fsync 300 ms slower: a stop that comes while the feature file
    is being written waits for that write, removes the file after it, and
    frees everything (the sanitized build's leak check runs at exit)."""
    out = tmp_path / "features.d" / "gfd"
    a = plugin_agent("--simulate", "t4", "--labels", "file", "--output-file", str(out),
                     env=slow_fsync(sim_env, 300))
    wait_file(out, lambda l: l)
    a.proc.send_signal(signal.SIGHUP)  # new labels on their way to the disk...
    a.wait_log("SIGHUP")
    assert a.stop() == 0               # ...and a stop meanwhile
    assert not out.exists()


def test_agent_feature_file(plugin_agent, gpulet, tmp_path, sim_env):
    out = tmp_path / "features.d" / "gfd"
    a = plugin_agent("--simulate", "l4-pcie", "--labels", "file", "--output-file", str(out))
    labels = wait_file(out, lambda l: l)
    # The agent publishes what `gpulet labels` prints (the same config).
    printed = text_labels(gpulet("labels", "--simulate", "l4-pcie").stdout)
    assert labels == read_nfd_like(printed)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4"
    assert labels["feature.node.kubernetes.io/accelerator"] == "nvidia-l4"
    assert labels["gpulet.io/gpu.healthy"] == "4"
    mtime = out.stat().st_mtime_ns
    # A fault reaches the file as it happens, not at the next rewrite (60 s
    # on); recovery puts it back.
    t0 = time.monotonic()
    assert gpulet("sim", "xid", "2", "79").returncode == 0
    wait_file(out, lambda l: l["gpulet.io/gpu.healthy"] == "3", timeout=3.0)
    assert time.monotonic() - t0 < 3.0
    assert gpulet("sim", "recover", "2").returncode == 0
    assert gpulet("health", "clear", "2", "--status-socket", str(tmp_path / "status.sock")).returncode == 0
    wait_file(out, lambda l: l["gpulet.io/gpu.healthy"] == "4")
    # Nothing changes: nothing is written.
    mtime = out.stat().st_mtime_ns
    time.sleep(1.5)
    assert out.stat().st_mtime_ns == mtime
    assert not (out.parent / ".gpulet-tmp").exists()
    assert a.stop() == 0
    assert not out.exists()  # removed on exit


def read_nfd_like(printed):
    return {("feature.node.kubernetes.io/" + k if "/" not in k else k): v
            for k, v in printed.items()}


def test_agent_reload_and_keep(plugin_agent, tmp_path, sim_env):
    out = tmp_path / "gfd"
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\n")
    a = plugin_agent("--simulate", "t4", "--labels", "file", "--output-file", str(out),
                     "--keep-labels-file", "--config-file", str(cfg))
    wait_file(out, lambda l: "nvidia.com/mig.strategy" not in l)
    cfg.write_text("version: v1\nflags:\n  migStrategy: mixed\n  gfd:\n    noTimestamp: false\n")
    a.proc.send_signal(signal.SIGHUP)
    labels = wait_file(out, lambda l: l.get("nvidia.com/mig.strategy") == "mixed")
    assert "nvidia.com/gfd.timestamp" in labels
    # A bad config on SIGHUP: the running labels stay.
    cfg.write_text("version: v1\nflags: {gfd: {outputFile: [1]}}\n")
    a.proc.send_signal(signal.SIGHUP)
    a.wait_log("config not reloaded")
    assert a.stop() == 0
    assert read_nfd(out)["nvidia.com/mig.strategy"] == "mixed"  # --keep-labels-file


def test_agent_api_trouble_keeps_serving(plugin_agent, agent, tmp_path, kubelet):
    """An API server that is not there, and a kubeconfig that is broken:
    one clear error each, and the device plugin serves on."""
    kc = tmp_path / "kubeconfig"
    kc.write_text("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
                  "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n")
    a = plugin_agent("--simulate", "t4", "--labels", "api", "--kubeconfig", str(kc),
                     "--node-name", "n1")
    a.wait_log("watch Node n1: GET https://127.0.0.1:1/api/v1/nodes?fieldSelector=metadata.name"
               "%3Dn1: Failed to connect")
    time.sleep(2)  # several retries, one line
    assert a.log().count("watch Node n1:") == 1
    channel, stub = kubelet.plugin()
    first = next(stub.ListAndWatch(kubelet.pb.Empty(), timeout=STREAM_S))
    assert len(first.devices) == 1
    channel.close()
    assert a.stop() == 0
    # A kubeconfig that cannot be read is bad input: one line, exit 1, nothing served.
    kc.write_text("current-context: x\n")
    b = agent("--simulate", "t4", "--labels", "api", "--kubeconfig", str(kc), "--node-name", "n1",
              "--no-metrics", "--kubelet-root", str(tmp_path / "k"), "--status-socket",
              str(tmp_path / "b.sock"))
    assert b.proc.wait(timeout=10) == 1
    assert "--labels api needs the API server:" in b.log() and "contexts must be a list" in b.log()
    assert "agent running" not in b.log()


def test_agent_api_needs_node_name(agent, tmp_path):
    """What needs the API server, without a node name or credentials: one line
    naming the setting, and an exit before anything is served."""
    a = agent("--simulate", "t4", "--labels", "api", "--no-metrics")
    assert a.proc.wait(timeout=10) == 2  # the command line's
    assert "--labels api needs the Node's name: set NODE_NAME" in a.log()
    check_clean(a.log())
    # Each one line and exit 2, as --labels api's (it was three lines and
    # exit 1): the command line's, or the environment's (no credentials).
    for args, said in ((["--labels", "api", "--node-name", "n1"], "--labels api needs the API server, "
                        "and there are no credentials"),
                       (["--dra", "all"], "--dra all needs the Node's name")):
        b = agent("--simulate", "t4", "--no-metrics", "--kubelet-root", str(tmp_path / "k"),
                  "--status-socket", str(tmp_path / "s.sock"), *args)
        assert b.proc.wait(timeout=10) == 2, b.log()
        assert said in b.log() and len(b.log().strip().splitlines()) == 1, b.log()


def test_per_model_resources(plugin_agent, kubelet, tmp_path):
    """resources.gpus: nvidia.com/h100 and nvidia.com/l4, each its own socket,
    registration, device list and Allocate; metrics say which GPU serves which."""
    import grpc
    import socket
    import urllib.request
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\nresources:\n  gpus:\n"
                   "  - {pattern: 'NVIDIA H100*', name: h100}\n"
                   "  - {pattern: 'NVIDIA L4', name: nvidia.com/l4}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    a = plugin_agent("--simulate", "mixed-pcie", "--config-file", str(cfg),
                     "--metrics-listen", f"127.0.0.1:{port}", wait=False)
    kubelet.wait_registrations(2, timeout=30)
    regs = {r.resource_name: r.endpoint for _, r in kubelet.registrations}
    assert regs == {"nvidia.com/h100": "gpulet-nvidia-h100.sock",
                    "nvidia.com/l4": "gpulet-nvidia-l4.sock"}
    ids = {}
    for name, endpoint in regs.items():
        channel, stub = kubelet.plugin(endpoint)
        ids[name] = [d.ID for d in next(stub.ListAndWatch(kubelet.pb.Empty(), timeout=STREAM_S)).devices]
        channel.close()
    assert len(ids["nvidia.com/h100"]) == 2 and len(ids["nvidia.com/l4"]) == 4
    # An L4 asked of the H100 resource is not one of its devices.
    channel, stub = kubelet.plugin(regs["nvidia.com/h100"])
    pb = kubelet.pb
    req = pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[ids["nvidia.com/l4"][0]])])
    try:
        stub.Allocate(req, timeout=5)
        raise AssertionError("allocated an L4 as an H100")
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    ok = stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[ids["nvidia.com/h100"][1]])]), timeout=5)
    assert ok.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == ids["nvidia.com/h100"][1]
    channel.close()
    a.wait_log("agent running")
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    served = [l for l in text.splitlines() if l.startswith("gpulet_gpu_resource{")]
    assert len(served) == 6
    assert sum('resource="nvidia.com/h100"' in l for l in served) == 2
    assert a.stop() == 0


def test_per_model_resources_bad(plugin_agent, agent, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\nresources:\n  gpus:\n  - {pattern: 'NVIDIA H100*', name: h100}\n")
    a = agent("--simulate", "mixed-pcie", "--config-file", str(cfg), "--no-metrics",
              "--kubelet-root", str(tmp_path / "k"), "--status-socket", str(tmp_path / "s.sock"))
    assert a.proc.wait(timeout=10) == 1
    assert "GPU 2 (NVIDIA L4" in a.log() and "matches no resources.gpus pattern" in a.log()
    check_clean(a.log())


def test_api_only_on_change_and_catch_up(plugin_agent, gpulet, tmp_path):
    """Against a stand-in API server: the Node listed and watched once, then
    one PATCH per change and no request when nothing changed; an outage is
    logged once, and the labels catch up when the API returns. (The fault report, which writes the same
    Node, is off: its requests are test_faults.py's.)"""
    from fakeapi import FakeAPI
    api = FakeAPI(labels={"example.com/keep": "yes"})
    try:
        kc = api.kubeconfig(tmp_path / "kubeconfig")
        a = plugin_agent("--simulate", "l4-pcie", "--labels", "api", "--kubeconfig", str(kc),
                         "--node-name", "n1", "--health-probe-ms", "100", "--fault-report", "none")
        api.wait(lambda l: l.get("gpulet.io/gpu.healthy") == "4")
        assert sorted(m for m, _, _ in api.requests) == ["GET", "GET", "PATCH"]
        patch = next(r for r in api.requests if r[0] == "PATCH")
        assert patch[2] == "application/merge-patch+json"
        assert api.labels()["example.com/keep"] == "yes"
        time.sleep(1.5)
        assert len(api.requests) == 3  # nothing changed: no request
        gpulet("sim", "xid", "1", "79")
        api.wait(lambda l: l.get("gpulet.io/gpu.healthy") == "3")
        assert [m for m, _, _ in api.requests[3:]] == ["PATCH"]
        # The API goes away; the GPU recovers meanwhile; the Node catches up.
        api.fail = 503
        gpulet("sim", "recover", "1")
        a.wait_log("labels on Node n1: not written: PATCH /api/v1/nodes/n1: HTTP 503")
        time.sleep(1.0)
        assert a.log().count("not written") == 1
        api.fail = 0
        api.wait(lambda l: l.get("gpulet.io/gpu.healthy") == "4", timeout=35)
        a.wait_log("labels on Node n1: up to date again")
        assert a.log().count("labels: 29 published to Node n1") == 1
        assert a.stop() == 0
    finally:
        api.stop()


@pytest.mark.skipif(SANITIZED or not shutil.which("valgrind"), reason="valgrind runs on the plain build")
def test_valgrind_labels(plugin_agent, gpulet, tmp_path):
    """Labels through a stand-in API server and a SIGHUP to the file, under
    valgrind: no leaks, no invalid accesses (libcurl's threads included)."""
    from fakeapi import FakeAPI
    api = FakeAPI()
    try:
        kc = api.kubeconfig(tmp_path / "kubeconfig")
        cfg = tmp_path / "config.yaml"
        cfg.write_text("version: v1\n")
        a = plugin_agent("--simulate", "mixed-pcie", "--labels", "api", "--kubeconfig", str(kc),
                         "--node-name", "n1", "--config-file", str(cfg),
                         prefix=("valgrind", "--error-exitcode=9", "--leak-check=full",
                                 "--errors-for-leak-kinds=definite,indirect", "-q"))
        api.wait(lambda l: l.get("gpulet.io/gpu.healthy") == "6", timeout=30)
        gpulet("sim", "xid", "4", "79")
        api.wait(lambda l: l.get("gpulet.io/gpu.healthy") == "5", timeout=30)
        cfg.write_text("version: v1\nresources:\n  gpus:\n  - {pattern: 'NVIDIA H100*', name: h100}\n"
                       "  - {pattern: 'NVIDIA L4', name: l4}\n")
        a.proc.send_signal(signal.SIGHUP)
        a.wait_log("registered nvidia.com/l4", timeout=30)
        assert a.stop(timeout=60) == 0, a.log()
    finally:
        api.stop()
