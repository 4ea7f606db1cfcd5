"""Faults an operator meets, on the simulator: a GPU that hangs (its calls
block) is hung within the bound while the other GPUs' metrics stay fresh,
and recovers; a lost GPU keeps its XID gauge; the control plane hears of
both (the Node condition, events, the opt-in taint) through a stand-in API
server that can go down; no thread leaks from a hang."""
import os
import re
import subprocess
import time

import pytest

from conftest import GPULET, SANITIZED, tool
from fakeapi import FakeAPI
from test_metrics import free_port, get, parse
from test_plugin import devices, sim, wait_health


def series(url):
    status, _, body = get(url + "/metrics")
    assert status == 200
    return parse(body)


def value(s, name, gpu, **labels):
    """The value of the GPU's series name (with those labels), or None."""
    for lab, v, _ in s.get(name, []):
        if lab.get("gpu") == str(gpu) and all(lab.get(k) == w for k, w in labels.items()):
            return float(v)
    return None


def threads(pid):
    return len(os.listdir(f"/proc/{pid}/task"))


def until(fn, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not (v := fn()):
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(0.05)
    return v


@pytest.fixture
def faulty(plugin_agent, sim_env):
    """An agent on dgx-h100 with metrics at 200 ms and a 2 s hang bound;
    returns (agent, metrics url)."""
    def start(*args):
        port = free_port()
        a = plugin_agent("--simulate", "dgx-h100", "--metrics-listen", f"127.0.0.1:{port}",
                         "--metrics-interval-ms", "200", "--hang-seconds", "2",
                         "--health-probe-ms", "200", *args)
        a.wait_log("metrics ready")
        return a, f"http://127.0.0.1:{port}"
    return start


def health_line(env, gpu):
    """GPU gpu's row of `gpulet health`, its columns one space apart."""
    out = subprocess.run([GPULET, "health"], capture_output=True, text=True, env=env).stdout
    return next((" ".join(l.split()) for l in out.splitlines() if l.startswith(f"{gpu} ")), "")


def test_hung_gpu(faulty, kubelet, sim_env, tmp_path):
    """GPU 3 hangs: the others' series stay fresh (energy moves on), GPU 3's
    DCGM series go (its XID gauge stays); within the bound it is Unhealthy,
    reason hung, naming the call, in ListAndWatch, `gpulet health`,
    `gpulet list` and metrics; a reset brings it and its series back."""
    a, url = faulty()
    env = dict(sim_env, GPULET_STATUS_SOCKET=str(tmp_path / "status.sock"))
    channel, stub, stream, first = devices(kubelet)
    base = threads(a.proc.pid)
    assert value(series(url), "DCGM_FI_DEV_GPU_TEMP", 3) is not None
    sim(sim_env, "hang", "3")
    t0 = time.monotonic()
    wait_health(stream, 3, "Unhealthy", timeout=5)
    took = time.monotonic() - t0
    assert 1.5 < took < 4.5, took
    line = health_line(env, 3)
    assert re.search(r"^3 Unhealthy GPU-\S+ hung: nvmlDevice\w+ has not returned for 2 s", line), line
    listed = subprocess.run([GPULET, "list", "--simulate", "dgx-h100"], capture_output=True,
                            text=True, env=env).stdout
    assert "Unhealthy (hung: nvmlDevice" in listed, listed
    # /metrics is rendered once an interval: it may trail ListAndWatch by one.
    until(lambda: value(series(url), "gpulet_gpu_up", 3) == 0, "metrics show GPU 3 hung", timeout=2)
    s1 = series(url)
    time.sleep(0.6)
    s2 = series(url)
    for s in (s1, s2):
        assert value(s, "DCGM_FI_DEV_GPU_TEMP", 3) is None
        assert value(s, "DCGM_FI_DEV_XID_ERRORS", 3) == 0
        assert value(s, "gpulet_gpu_health", 3, reason="hung") == 0
        assert value(s, "gpulet_gpu_up", 3) == 0
    # The others are read afresh each interval, whatever GPU 3 does.
    for gpu in (0, 7):
        assert value(s2, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu) > \
            value(s1, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu)
        assert time.time() - value(s2, "gpulet_gpu_last_sample_timestamp_seconds", gpu) < 1.5
    assert time.time() - value(s2, "gpulet_gpu_last_sample_timestamp_seconds", 3) > 1.5
    sim(sim_env, "recover", "3")
    wait_health(stream, 3, "Healthy", timeout=5)
    until(lambda: value(series(url), "DCGM_FI_DEV_GPU_TEMP", 3) is not None, "GPU 3's series")
    assert health_line(env, 3).startswith("3 Healthy")
    # Hangs and recoveries leave no thread behind.
    for _ in range(3):
        sim(sim_env, "hang", "5")
        wait_health(stream, 5, "Unhealthy", timeout=5)
        sim(sim_env, "recover", "5")
        wait_health(stream, 5, "Healthy", timeout=5)
    assert threads(a.proc.pid) == base
    stream.cancel()
    assert "is unhealthy: hung: nvmlDevice" in a.log()
    assert a.stop() == 0


def test_hung_gpu_without_metrics(plugin_agent, kubelet, sim_env):
    """Probes alone find a hang where metrics are off."""
    plugin_agent("--simulate", "t4", "--hang-seconds", "1", "--health-probe-ms", "200")
    channel, stub, stream, first = devices(kubelet)
    sim(sim_env, "hang", "0")
    wait_health(stream, 0, "Unhealthy", timeout=4)
    sim(sim_env, "recover", "0")
    wait_health(stream, 0, "Healthy", timeout=4)
    stream.cancel()


def test_hung_at_shutdown(faulty, kubelet, sim_env):
    """A GPU still hung when the agent stops: it stops at once all the same."""
    a, url = faulty()
    sim(sim_env, "hang", "2")
    time.sleep(0.5)
    t0 = time.monotonic()
    assert a.stop() == 0
    assert time.monotonic() - t0 < 3
    assert "still in an NVML call at exit" in a.log()


def test_lost_gpu_keeps_its_xid_gauge(faulty, kubelet, sim_env):
    a, url = faulty()
    sim(sim_env, "xid", "2", "79")
    until(lambda: value(series(url), "gpulet_gpu_up", 2) == 0, "GPU 2 lost")
    until(lambda: value(series(url), "DCGM_FI_DEV_GPU_TEMP", 2) is None, "GPU 2's series go")
    s = series(url)
    assert value(s, "DCGM_FI_DEV_XID_ERRORS", 2) == 79
    assert value(s, "DCGM_FI_DEV_XID_ERRORS", 2, err_code="79") == 79
    assert value(s, "gpulet_gpu_health", 2, reason="lost") == 0
    assert value(s, "DCGM_FI_DEV_GPU_TEMP", 1) is not None


# --- the control plane ------------------------------------------------------------------


@pytest.fixture
def api():
    a = FakeAPI(node="n1")
    yield a
    a.stop()


def reported(plugin_agent, api, tmp_path, *args, env=None):
    kc = api.kubeconfig(tmp_path / "kubeconfig")
    a = plugin_agent("--simulate", "dgx-h100", "--kubeconfig", str(kc), "--node-name", "n1",
                     "--labels", "none", "--health-probe-ms", "200", "--xid-recovery-seconds", "0",
                     *args, env=env)
    api.wait_for(lambda: api.condition(), "the condition at start")
    return a


def events(api, reason):
    return [e for e in api.node_events.values() if e["reason"] == reason]


def test_condition_and_events(plugin_agent, kubelet, api, sim_env, tmp_path):
    a = reported(plugin_agent, api, tmp_path)
    c = api.condition()
    assert (c["status"], c["reason"]) == ("False", "GPUsHealthy")
    assert c["message"] == "all 8 GPUs gpulet serves are healthy"
    healthy_since = c["lastTransitionTime"]
    t0 = time.monotonic()
    sim(sim_env, "xid", "2", "79")
    c = api.wait_for(lambda: (x := api.condition())["status"] == "True" and x, "condition True")
    assert time.monotonic() - t0 < 3.0   # as it happens: there is no periodic resync
    assert c["reason"] == "XID79"
    assert re.match(r"1 of 8 GPUs unhealthy: GPU 2 \(GPU-[0-9a-f-]+\): XID 79: fallen off the bus$",
                    c["message"]), c["message"]
    ev = api.wait_for(lambda: events(api, "GPUUnhealthy"), "the Warning event")[0]
    assert ev["type"] == "Warning" and ev["involvedObject"] == {
        "kind": "Node", "apiVersion": "v1", "name": "n1", "uid": "n1"}
    assert ev["message"].startswith("GPU 2 (GPU-") and ev["source"]["component"] == "gpulet"
    # A worse fault on another GPU: the reason follows the worst, both listed.
    sim(sim_env, "hang", "5")
    c = api.wait_for(lambda: "GPU 5" in (x := api.condition())["message"] and x, "two GPUs",
                     timeout=15)
    assert c["reason"] == "XID79" and c["message"].startswith("2 of 8 GPUs unhealthy")
    for g in ("2", "5"):
        sim(sim_env, "recover", g)
    c = api.wait_for(lambda: (x := api.condition())["status"] == "False" and x, "condition False",
                     timeout=5)
    assert c["reason"] == "GPUsHealthy" and c["lastTransitionTime"] >= healthy_since
    assert api.wait_for(lambda: len(events(api, "GPUHealthy")) == 2, "two Normal events")
    assert a.stop() == 0


def test_flapping_gpu_is_aggregated_and_rate_limited(plugin_agent, kubelet, api, sim_env,
                                                     tmp_path):
    reported(plugin_agent, api, tmp_path)
    for _ in range(40):
        sim(sim_env, "xid", "4", "79")
        api.wait_for(lambda: api.condition()["status"] == "True", "down")
        sim(sim_env, "recover", "4")
        api.wait_for(lambda: api.condition()["status"] == "False", "up", timeout=5)
    time.sleep(1)
    with api.cond:
        evs = list(api.node_events.values())
        posts = sum(1 for m, p, _ in api.requests if m == "POST" and p.endswith("/events"))
    # Two distinct events (unhealthy, healthy), their counts bumped, within the burst.
    assert len(evs) == 2, evs
    assert sum(e["count"] for e in evs) <= 25
    assert posts == 2


def test_event_name_taken_is_not_sent(plugin_agent, kubelet, api, sim_env, tmp_path):
    """Events are named <node>.<hex> (the form deploy/'s policy keeps to the
    node); a create answered 409 (the name taken by another writer) is not
    counted as sent: the event goes again under another name (issue 50,
    item 4). The namespace is default, whatever gpulet's own."""
    a = reported(plugin_agent, api, tmp_path, env={**sim_env, "POD_NAMESPACE": "gpulet-ops"})
    api.events_taken = 2
    sim(sim_env, "xid", "3", "79")
    ev = api.wait_for(lambda: events(api, "GPUUnhealthy"), "the event under another name",
                      timeout=10)[0]
    assert ev["metadata"]["namespace"] == "default"
    assert re.fullmatch(r"n1\.[0-9a-f]+", ev["metadata"]["name"]), ev["metadata"]
    assert (ev["source"], ev["reportingInstance"]) == ({"component": "gpulet", "host": "n1"}, "n1")
    with api.cond:
        posts = [p for m, p, _ in api.requests if m == "POST" and p.endswith("/events")]
    assert posts == ["/api/v1/namespaces/default/events"] * 3, posts
    assert "the name n1." in a.log() and "is taken" in a.log()
    assert a.stop() == 0


def test_api_server_down(plugin_agent, kubelet, api, sim_env, tmp_path):
    """The API server answers 503: the device plugin serves on; once it
    answers again the condition and the event catch up at the next retry
    (the backoff: 0.25 s doubling, jittered by a fifth)."""
    a = reported(plugin_agent, api, tmp_path)
    channel, stub, stream, first = devices(kubelet)
    api.fail = 503
    sim(sim_env, "xid", "6", "79")
    wait_health(stream, 6, "Unhealthy")
    time.sleep(2)
    assert api.condition()["status"] == "False"
    api.fail = 0
    t0 = time.monotonic()
    api.wait_for(lambda: api.condition()["status"] == "True", "caught up", timeout=5)
    assert time.monotonic() - t0 < 3.0
    api.wait_for(lambda: events(api, "GPUUnhealthy"), "the event caught up", timeout=5)
    stream.cancel()
    until(lambda: "fault report on Node n1: up to date again" in a.log(), a.log)
    assert "fault report on Node n1: not written: PATCH /api/v1/nodes/n1/status: HTTP 503" in a.log()


def test_taint(plugin_agent, kubelet, api, sim_env, tmp_path):
    """Opt-in: a listed fault taints the Node NoSchedule, recovery takes
    gpulet's taint off; others' taints stay, and one of gpulet's key that
    gpulet did not put on is never touched."""
    with api.cond:
        api.node["spec"] = {"taints": [{"key": "example.com/other", "effect": "NoSchedule"}]}
    reported(plugin_agent, api, tmp_path, "--fault-taint")
    taints = lambda: api.node.get("spec", {}).get("taints") or []
    sim(sim_env, "xid", "1", "13")  # an application's XID: no fault, no taint
    sim(sim_env, "xid", "1", "94")  # a fault, but not on the default list
    api.wait_for(lambda: api.condition()["reason"] == "XID94", "XID 94")
    assert [t["key"] for t in taints()] == ["example.com/other"]
    sim(sim_env, "xid", "3", "79")
    api.wait_for(lambda: len(taints()) == 2, "the taint")
    assert taints()[1] == {"key": "gpulet.io/gpu-fault", "value": "XID79", "effect": "NoSchedule"}
    assert api.node["metadata"]["annotations"]["gpulet.io/gpu-fault-taint"] == "XID79"
    sim(sim_env, "recover", "3")
    api.wait_for(lambda: len(taints()) == 1, "the taint off", timeout=5)
    assert taints()[0]["key"] == "example.com/other"
    assert "gpulet.io/gpu-fault-taint" not in api.node["metadata"].get("annotations", {})
    # Someone else's taint of gpulet's key stays, whatever gpulet thinks.
    with api.cond:
        api.node["spec"]["taints"].append({"key": "gpulet.io/gpu-fault", "value": "manual",
                                           "effect": "NoSchedule"})
    sim(sim_env, "xid", "3", "79")
    api.wait_for(lambda: api.condition()["reason"] == "XID79", "XID 79 again")
    sim(sim_env, "recover", "3")
    api.wait_for(lambda: "GPU 3" not in api.condition()["message"], "recovered", timeout=5)
    assert {"key": "gpulet.io/gpu-fault", "value": "manual", "effect": "NoSchedule"} in taints()


def test_fault_options(gpulet):
    p = gpulet("agent", "--fault-taint-on", "79,bogus")
    assert p.returncode == 2
    assert "--fault-taint-on: 'bogus' is neither an XID number nor lost, hung, ecc or xid" in p.stderr
    p = gpulet("agent", "--hang-seconds", "0")
    assert p.returncode == 2 and "--hang-seconds is out of range: from 1 to 3600, not '0'" in p.stderr
    p = gpulet("agent", "--dra-evict-on", "lost,sometimes")
    assert p.returncode == 2
    assert "--dra-evict-on: 'sometimes' is neither an XID number nor lost, hung, ecc or xid" in p.stderr


@pytest.mark.skipif(SANITIZED, reason="valgrind runs on the plain build")
@tool("valgrind")
def test_valgrind_faults(plugin_agent, kubelet, api, sim_env, tmp_path):
    """A hang, a recovery and the condition under valgrind: no leaks, no
    invalid accesses, lanes included."""
    kc = api.kubeconfig(tmp_path / "kubeconfig")
    a = plugin_agent("--simulate", "l4-pcie", "--kubeconfig", str(kc), "--node-name", "n1",
                     "--labels", "none", "--health-probe-ms", "200", "--hang-seconds", "2",
                     "--fault-taint",
                     prefix=("valgrind", "--error-exitcode=9", "--leak-check=full",
                             "--errors-for-leak-kinds=definite,indirect", "-q"))
    channel, stub, stream, first = devices(kubelet)
    sim(sim_env, "hang", "1")
    wait_health(stream, 1, "Unhealthy", timeout=20)
    api.wait_for(lambda: api.condition()["reason"] == "GPUHung", "hung", timeout=10)
    sim(sim_env, "recover", "1")
    wait_health(stream, 1, "Healthy", timeout=20)
    stream.cancel()
    assert a.stop(timeout=60) == 0, a.log()
