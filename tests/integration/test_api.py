"""The agent's one client of the API server (issue 30), against the stand-in
API server: one connection for the requests beside the watches, nothing
read to decide a write (the Node comes from a watch), no write where the
server already holds what is wanted, a change by another repaired from the
watch, a relist on 410 Gone, and an API server that stops answering delays
nothing but API work."""
import time
import urllib.request

import pytest

from fakeapi import FakeAPI
from test_dra import DRA, call, claim, dra_stubs
from test_metrics import free_port
from test_plugin import devices, sim

SLICE = "n1-gpu.nvidia.com"
HELD = 30.0   # seconds the hung API server holds each answer


@pytest.fixture
def api():
    a = FakeAPI("n1")
    yield a
    a.stop()


def writes(reqs):
    return [(m, p) for m, p, _ in reqs if m in ("PATCH", "POST", "PUT", "DELETE")]


def since(api, n):
    with api.cond:
        return list(api.requests[n:])


def start_dra(agent, api, tmp_path, *args):
    return agent("--simulate", "dgx-h100", "--dra", "all", "--kubelet-root", str(tmp_path / "kubelet"),
                 "--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig")), "--node-name", "n1",
                 "--status-socket", str(tmp_path / "status.sock"), "--health-probe-ms", "200",
                 "--xid-recovery-seconds", "0", *args)


def settled(api):
    """The slice, gpulet's labels and the condition are on the server."""
    api.wait_for(lambda: len(api.slices.get(SLICE, {}).get("spec", {}).get("devices", [])) == 8,
                 "a slice of 8 devices", timeout=30)
    api.wait_for(lambda: "nvidia.com/gpu.count" in api.node["metadata"]["labels"], "labels")
    api.wait_for(lambda: api.condition(), "the condition")


def quiet(api, seconds=1.0):
    """Waits until no request came for `seconds`; returns how many there were."""
    n = len(api.requests)
    while True:
        time.sleep(seconds)
        if len(api.requests) == n:
            return n
        n = len(api.requests)


def test_one_client_no_polling_and_no_writes_when_equal(agent, api, tmp_path, sim_env):
    a = start_dra(agent, api, tmp_path, "--no-metrics")
    settled(api)
    n = quiet(api)
    first = since(api, 0)
    # What gpulet knows of its Node comes from its watch: no GET of it.
    assert not [r for r in first if r[0] == "GET" and r[1] == "/api/v1/nodes/n1"], first
    # Over HTTP/1.1 (this server; HTTP/2 shares one connection for all,
    # bench/fleet.py) each watch holds a connection, and requests in flight
    # together take one each (how many the start took depends on how its
    # requests overlapped); kept alive, they serve every later request.
    # At rest: nothing, not even a resync.
    time.sleep(2)
    assert len(api.requests) == n, since(api, n)
    # A fault: the condition, the slice, the labels and one Event, no read.
    sim(sim_env, "xid", "2", "79")
    api.wait_for(lambda: api.condition()["status"] == "True", "the condition True")
    api.wait_for(lambda: "taints" in api.slices[SLICE]["spec"]["devices"][2], "GPU 2 tainted")
    quiet(api)
    fault = since(api, n)
    assert all(m != "GET" for m, _, _ in fault), fault
    assert len(fault) <= 4, fault
    # A label of gpulet's removed by another: put back from the watch's news.
    n = len(api.requests)
    connections = api.connections
    api.set_label("nvidia.com/gpu.count", None)
    api.wait_for(lambda: api.node["metadata"]["labels"].get("nvidia.com/gpu.count") == "8",
                 "the label put back")
    assert [m for m, _, _ in since(api, n)] == ["PATCH"], since(api, n)
    # One request, with the fault's connections idle since: no new one.
    assert api.connections == connections, (connections, api.connections)
    # Killed and started again with nothing changed (the simulator starts
    # healthy with the agent): it reads, and writes nothing.
    sim(sim_env, "recover", "2")
    api.wait_for(lambda: api.condition()["status"] == "False", "the condition False")
    api.wait_for(lambda: len(api.slices[SLICE]["spec"]["devices"]) == 8, "GPU 2 back")
    quiet(api)
    a.proc.kill()
    a.proc.wait()
    n = len(api.requests)
    start_dra(agent, api, tmp_path, "--no-metrics")
    api.wait_for(lambda: any(m == "GET" and "watch=1" in p and "resourceslices" in p
                             for m, p, _ in api.requests[n:]), "the slice watched", timeout=30)
    quiet(api)
    again = since(api, n)
    assert writes(again) == [], again
    assert len(again) <= 6, again


def compact_and_wait_for_a_list(agent, api, tmp_path, timeout, hold=False):
    """The server forgets every version gpulet could watch from and ends the
    watches (with hold, the stream that then carries the 410 stays open):
    gpulet lists the Node again within timeout."""
    start_dra(agent, api, tmp_path, "--no-metrics")
    settled(api)
    quiet(api)
    n = len(api.requests)
    api.hold_after_410 = hold
    api.compacted = api.version + 1
    api.end_watches()
    api.wait_for(lambda: sum(1 for m, p, _ in api.requests[n:]
                             if m == "GET" and "watch=1" not in p and "nodes" in p) >= 1,
                 "the Node listed again", timeout=timeout)


def test_watch_relists_after_410(agent, api, tmp_path):
    """gpulet lists again, and goes on watching."""
    compact_and_wait_for_a_list(agent, api, tmp_path, 15)
    api.compacted = 0
    api.set_label("nvidia.com/gpu.count", None)
    api.wait_for(lambda: api.node["metadata"]["labels"].get("nvidia.com/gpu.count") == "8",
                 "the label put back after the relist", timeout=15)


def test_watch_relists_on_the_410_itself(agent, api, tmp_path):
    """The 410 ERROR event alone makes gpulet list again: the stream that
    carried it stays open here, so a client that let the ERROR pass and
    waited for the stream's end (and then its backoff) would not list for a
    minute."""
    compact_and_wait_for_a_list(agent, api, tmp_path, 5, hold=True)
    api.compacted = 0


def test_token_file_read_again_off_the_loop(agent, api, tmp_path, sim_env):
    """A kubeconfig's tokenFile (a projected token, which the kubelet
    rotates) is read at start and then again on a timer (a minute; 300 ms
    here), off the loop, not on every request: a rotated token is used from
    its next read; a file gone keeps the token read before, said once."""
    token = tmp_path / "token"
    token.write_text("one\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{api.port}'}}}}]\n"
        f"users: [{{name: u, user: {{tokenFile: '{token}'}}}}]\n")
    a = agent("--simulate", "t4", "--kubeconfig", str(kubeconfig), "--node-name", "n1",
              "--no-metrics", env=dict(sim_env, GPULET_TOKEN_REREAD_MS="300"))
    api.wait_for(lambda: "nvidia.com/gpu.count" in api.node["metadata"]["labels"], "labels")
    with api.cond:
        assert set(api.bearers) == {"one"}, api.bearers
    token.write_text("two\n")
    time.sleep(0.8)  # a read or two
    n = len(api.bearers)
    api.end_watches()  # the next requests: a new watch
    api.wait_for(lambda: len(api.bearers) > n, "a request after the rotation")
    with api.cond:
        assert set(api.bearers[n:]) == {"two"}, api.bearers
    token.unlink()
    a.wait_log("keeping the token read before")
    time.sleep(0.8)
    n = len(api.bearers)
    api.end_watches()
    api.wait_for(lambda: len(api.bearers) > n, "a request after the file went")
    with api.cond:
        assert set(api.bearers[n:]) == {"two"}, api.bearers
    assert a.log().count("keeping the token read before") == 1, a.log()
    token.write_text("three\n")
    a.wait_log(f"API server credentials: {token} read again")


def test_api_outage_delays_nothing_else(agent, api, tmp_path, sim_env):
    """An API server that takes 30 s to answer anything: a prepare answered
    from the checkpoint and a metrics scrape answer at once; the fault that
    came meanwhile is on the Node soon after the API server answers again."""
    port = free_port()
    start_dra(agent, api, tmp_path, "--metrics-listen", f"127.0.0.1:{port}")
    settled(api)
    pb, _ = dra_stubs(tmp_path / "stubs")
    sock = tmp_path / "kubelet" / "plugins" / "gpu.nvidia.com" / "dra.sock"
    api.claims[("ns", "c-one")] = claim("one", "gpu-3")
    req = pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid="one", name="c-one")])
    first = call(sock, DRA + "NodePrepareResources", req, pb.NodePrepareResourcesResponse)
    assert not first.claims["one"].error
    api.hold = HELD
    try:
        sim(sim_env, "xid", "6", "79")  # its writes now wait on the API server
        time.sleep(0.5)
        t0 = time.monotonic()
        again = call(sock, DRA + "NodePrepareResources", req, pb.NodePrepareResourcesResponse)
        assert again.claims["one"] == first.claims["one"]
        assert time.monotonic() - t0 < HELD / 6   # not the hold, whatever the machine's load
        t0 = time.monotonic()
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        assert time.monotonic() - t0 < HELD / 6   # not the hold, whatever the machine's load
    finally:
        api.hold = 0.0
    api.wait_for(lambda: api.condition()["status"] == "True", "the fault after the outage",
                 timeout=40)


def test_api_outage_delays_no_allocate(plugin_agent, kubelet, api, tmp_path, sim_env):
    plugin_agent("--simulate", "dgx-h100", "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")),
                 "--node-name", "n1", "--health-probe-ms", "200")
    api.wait_for(lambda: api.condition(), "the condition")
    channel, stub, stream, first = devices(kubelet)
    api.hold = HELD
    try:
        sim(sim_env, "xid", "1", "79")
        time.sleep(0.5)
        t0 = time.monotonic()
        pb = kubelet.pb
        r = stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[first.devices[0].ID])]), timeout=5)
        assert r.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == first.devices[0].ID
        assert time.monotonic() - t0 < HELD / 6   # not the hold, whatever the machine's load
    finally:
        api.hold = 0.0
        channel.close()
    api.wait_for(lambda: api.condition()["status"] == "True", "the fault after the outage",
                 timeout=40)


def test_api_requests_on_metrics(agent, api, tmp_path):
    """The bill on a dashboard (issue 53): each request gpulet made to the
    API server counted by method, resource and code, and timed, as client-go's
    rest_client metrics are; the counts match what the API server saw."""
    from test_metrics import parse
    port = free_port()
    a = start_dra(agent, api, tmp_path, "--metrics-listen", f"127.0.0.1:{port}",
                  "--metrics-interval-ms", "200")
    settled(api)
    quiet(api)
    with api.cond:
        patches = sum(1 for m, p, _ in api.requests if m == "PATCH" and p.startswith("/api/v1/nodes/n1/status"))

    def rows():
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        return parse(text)
    for _ in range(50):
        got = rows().get("gpulet_api_requests_total", [])
        status = [v for l, v, _ in got if l == {"method": "PATCH", "resource": "nodes/status", "code": "200"}]
        if status and status[0] == patches:
            break
        time.sleep(0.1)
    assert status == [patches], got
    r = rows()
    assert any(l["resource"] == "resourceslices" and l["method"] in ("PATCH", "POST")
               for l, _, _ in r["gpulet_api_requests_total"]), r["gpulet_api_requests_total"]
    count = [v for l, v, _ in r["gpulet_api_request_duration_seconds_count"]
             if l == {"method": "PATCH", "resource": "nodes/status"}]
    inf = [v for l, v, _ in r["gpulet_api_request_duration_seconds_bucket"]
           if l == {"method": "PATCH", "resource": "nodes/status", "le": "+Inf"}]
    assert count == inf == [patches], (count, inf)
    assert a.stop() == 0
