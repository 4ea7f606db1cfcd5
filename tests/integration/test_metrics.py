"""/metrics, /healthz and /readyz of the agent on the simulator: dcgm-exporter
names, types and labels; values against the simulator; XIDs and lost GPUs;
promtool and a real Prometheus server; pod labels from PodResources."""
import json
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import GPULET, SOURCE, plain, tool
from limits import limit

DEFAULT_FIELDS = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge"), ("DCGM_FI_DEV_MEM_CLOCK", "gauge"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge"), ("DCGM_FI_DEV_GPU_TEMP", "gauge"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge"), ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter"), ("DCGM_FI_DEV_GPU_UTIL", "gauge"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge"), ("DCGM_FI_DEV_ENC_UTIL", "gauge"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge"), ("DCGM_FI_DEV_XID_ERRORS", "gauge"),
    ("DCGM_FI_DEV_FB_FREE", "gauge"), ("DCGM_FI_DEV_FB_USED", "gauge"),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge"), ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter"), ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge"), ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge"), ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge"),
]
LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$')


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(url, method="GET", timeout=5):
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def parse(text):
    """{name: [(labels dict, value, label order)]} from the text format."""
    series = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        pairs = re.findall(r'([A-Za-z_]+)="((?:[^"\\]|\\.)*)"', m.group(2) or "")
        series.setdefault(m.group(1), []).append((dict(pairs), float(m.group(3)), [k for k, _ in pairs]))
    return series


def sim(env, *args):
    p = subprocess.run([GPULET, "sim", *args], capture_output=True, text=True, env=env, timeout=10)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture
def metrics_agent(agent, tmp_path):
    """Starts an agent with metrics on a free port; returns (agent, base url)."""
    def start(*args, ready=True):
        port = free_port()
        a = agent("--kubelet-root", str(tmp_path / "kubelet"), "--status-socket",
                  str(tmp_path / "status.sock"), "--metrics-listen", f"127.0.0.1:{port}",
                  "--metrics-interval-ms", "200", "--hostname", "node-1", *args)
        if ready:
            a.wait_log("metrics ready")
        return a, f"http://127.0.0.1:{port}"
    return start


def wait_for(fn, timeout=5.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_endpoints(metrics_agent):
    a, url = metrics_agent("--simulate", "t4")
    status, headers, body = get(url + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert get(url + "/healthz")[0] == 200
    assert get(url + "/readyz")[0] == 200
    assert get(url + "/")[0] == 200
    status, _, body = get(url + "/metricz")
    assert status == 404 and "not found: /metricz" in body
    for method in ("POST", "PUT", "DELETE"):
        status, headers, _ = get(url + "/metrics", method=method)
        assert status == 405 and headers["Allow"] == "GET, HEAD"
    status, _, body = get(url + "/metrics", method="HEAD")
    assert status == 200 and body == ""


def test_default_fields_labels_and_types(metrics_agent):
    a, url = metrics_agent("--simulate", "dgx-h100")
    # A GPU's rates (GPM, NVLink bandwidth) need two of its samples, each
    # class of fields its own: on a busy machine one GPU's lane may miss an
    # interval of one class, and those series come one later. The body
    # with every default field for every GPU is the one to check.
    def complete():
        b = get(url + "/metrics")[2]
        got = parse(b)
        return b if all(len(got.get(name, [])) == 8 for name, _ in DEFAULT_FIELDS) else None
    body = wait_for(complete, timeout=limit(15))
    assert body, "the default fields never appeared for all 8 GPUs"
    series = parse(body)
    for name, typ in DEFAULT_FIELDS:
        assert f"# TYPE {name} {typ}\n" in body, name
        assert len(series[name]) == 8, name
    labels, value, order = series["DCGM_FI_DEV_GPU_TEMP"][3]
    assert order == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                     "DCGM_FI_DRIVER_VERSION"]
    assert labels["gpu"] == "3" and labels["device"] == "nvidia3"
    assert labels["modelName"] == "NVIDIA H100 80GB HBM3" and labels["Hostname"] == "node-1"
    assert labels["DCGM_FI_DRIVER_VERSION"] == "580.159.04"
    xid = series["DCGM_FI_DEV_XID_ERRORS"][0]
    assert xid[1] == 0 and xid[0]["err_code"] == "0" and xid[0]["err_msg"] == "No Error"
    for labels, value, _ in series["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]:
        assert 0 <= value <= 1                       # a ratio, as DCGM reports it
    for labels, value, _ in series["DCGM_FI_DEV_FB_USED"]:
        assert 0 < value < 81559
    assert re.search(r'DCGM_FI_DEV_POWER_USAGE\{[^}]*\} \d+\.\d{6}\n', body)   # DCGM's double format


def test_values_follow_the_simulator(metrics_agent, sim_env):
    a, url = metrics_agent("--simulate", "dgx-h100")
    sim(sim_env, "set", "2", "temperature.gpu=77", "power.draw=123.5", "utilization.gpu=42",
        "memory.used=1000", "clocks.sm=1410", "pcie.replays=9")

    def pinned():
        s = parse(get(url + "/metrics")[2])
        v = {n: s[n][2][1] for n in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
                                     "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED",
                                     "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")}
        return v if v["DCGM_FI_DEV_GPU_TEMP"] == 77 and v["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == 9 else None
    v = wait_for(pinned, timeout=5)
    assert v, parse(get(url + "/metrics")[2])["DCGM_FI_DEV_GPU_TEMP"]
    assert v == {"DCGM_FI_DEV_GPU_TEMP": 77, "DCGM_FI_DEV_POWER_USAGE": 123.5,
                 "DCGM_FI_DEV_GPU_UTIL": 42, "DCGM_FI_DEV_FB_USED": 1000,
                 "DCGM_FI_DEV_SM_CLOCK": 1410, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 9}
    e1 = parse(get(url + "/metrics")[2])["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][2][1]
    time.sleep(0.5)
    e2 = parse(get(url + "/metrics")[2])["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][2][1]
    assert e2 > e1                                   # a counter that moves with power


def test_xid_and_lost_gpu(metrics_agent, sim_env):
    a, url = metrics_agent("--simulate", "dgx-h100", "--xid-recovery-seconds", "0",
                           "--health-probe-ms", "100")
    sim(sim_env, "xid", "1", "13")                   # not fatal, but counted
    sim(sim_env, "xid", "1", "94")
    sim(sim_env, "xid", "1", "94")

    def counted():
        s = parse(get(url + "/metrics")[2])
        c = {l["xid"]: v for l, v, _ in s.get("gpulet_xid_errors_total", []) if l["gpu"] == "1"}
        return s if c == {"13": 1, "94": 2} else None
    s = wait_for(counted)
    assert s, get(url + "/metrics")[2][-3000:]
    xid = s["DCGM_FI_DEV_XID_ERRORS"][1]
    assert xid[1] == 94 and xid[0]["err_code"] == "94" and xid[0]["err_msg"] == "Contained ECC error"
    health = {l["gpu"]: (v, l["reason"]) for l, v, _ in s["gpulet_gpu_health"]}
    assert health["1"] == (0, "xid") and health["0"] == (1, "")
    sim(sim_env, "lose", "3")

    def lost():
        s = parse(get(url + "/metrics")[2])
        gone = all(l["gpu"] != "3" for l, _, _ in s["DCGM_FI_DEV_GPU_TEMP"])
        up = {l["gpu"]: v for l, v, _ in s["gpulet_gpu_up"]}
        return s if gone and up["3"] == 0 else None
    s = wait_for(lost)
    assert s, "GPU 3 kept its series after it was lost"
    assert len(s["DCGM_FI_DEV_GPU_TEMP"]) == 7
    assert {l["gpu"]: l["reason"] for l, v, _ in s["gpulet_gpu_health"]}["3"] == "lost"
    sim(sim_env, "recover", "3")
    assert wait_for(lambda: len(parse(get(url + "/metrics")[2])["DCGM_FI_DEV_GPU_TEMP"]) == 8)


ALLOWED_LINT = ("should be written in 'snake_case' not 'camelCase'",
                "counter metrics should have \"_total\" suffix",
                "metric name should not include type 'counter'")


@tool("promtool")
def test_loop_lag_is_measured(metrics_agent):
    """gpulet_loop_lag_seconds: small while the loop is free; a loop held
    for a second (the process stopped) shows it at the next sample
    (issue 51: a stalled loop on a dashboard, not only in a benchmark)."""
    import signal
    a, url = metrics_agent("--simulate", "t4")

    def lag():
        rows = parse(get(url + "/metrics")[2]).get("gpulet_loop_lag_seconds")
        return rows[0][1] if rows else None
    assert wait_for(lambda: lag() is not None and lag() < 0.2), lag()
    a.proc.send_signal(signal.SIGSTOP)
    time.sleep(1.0)
    a.proc.send_signal(signal.SIGCONT)
    assert wait_for(lambda: (lag() or 0) >= 0.5), lag()  # 1 s less up to one period
    assert a.stop() == 0


def test_promtool_check_metrics(metrics_agent):
    a, url = metrics_agent("--simulate", "a100-2x4")
    body = get(url + "/metrics")[2]
    p = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True)
    # Exit 1 is a parse error. The only lint allowed is what dcgm-exporter's
    # own names bring (camelCase UUID/modelName, counters without _total).
    assert p.returncode in (0, 3), p.stderr
    bad = [l for l in (p.stdout + p.stderr).splitlines() if l.strip() and not any(a in l for a in ALLOWED_LINT)]
    assert not bad, bad
    assert not any(l.startswith("gpulet_") and "_total" in l and "suffix" in l
                   for l in (p.stdout + p.stderr).splitlines())


def test_collectors_file(metrics_agent, tmp_path):
    csv = tmp_path / "counters.csv"
    csv.write_text("# mine\nDCGM_FI_DEV_GPU_TEMP, gauge, Temperature.\n"
                   "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, DBE.\n"
                   "DCGM_FI_DEV_POWER_VIOLATION, counter, Power throttling (in ns).\n"
                   "DCGM_FI_PROF_SM_ACTIVE, gauge, SM active.\n"
                   "DCGM_FI_DEV_SERIAL, label, Serial\n")
    a, url = metrics_agent("--simulate", "dgx-h100", "--collectors", str(csv))
    body = wait_for(lambda: (lambda b: b if "DCGM_FI_PROF_SM_ACTIVE{" in b else None)(get(url + "/metrics")[2]))
    s = parse(body)
    assert set(n for n in s if n.startswith("DCGM")) == {
        "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_POWER_VIOLATION",
        "DCGM_FI_PROF_SM_ACTIVE"}
    assert s["DCGM_FI_DEV_GPU_TEMP"][0][2][-1] == "DCGM_FI_DEV_SERIAL"
    assert "# HELP DCGM_FI_DEV_GPU_TEMP Temperature.\n" in body


def test_bad_collectors_file(agent, tmp_path):
    csv = tmp_path / "bad.csv"
    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_WARP_DRIVE, gauge, w\n")
    a = agent("--simulate", "t4", "--kubelet-root", str(tmp_path / "k"), "--collectors", str(csv))
    assert a.proc.wait(timeout=10) == 1
    assert f"{csv}:2: unknown field 'DCGM_FI_DEV_WARP_DRIVE'" in a.log()


def test_metrics_off_and_port_busy(agent, tmp_path):
    a = agent("--simulate", "t4", "--kubelet-root", str(tmp_path / "k"), "--no-metrics", "true",
              "--status-socket", str(tmp_path / "s.sock"))
    a.wait_log("agent running")
    assert "metrics:" not in a.log()
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    b = agent("--simulate", "t4", "--kubelet-root", str(tmp_path / "k2"), "--status-socket",
              str(tmp_path / "s2.sock"), "--metrics-listen", f"127.0.0.1:{busy.getsockname()[1]}")
    b.wait_log("metrics are off: cannot listen on 127.0.0.1:")
    assert b.proc.poll() is None                     # the device plugin runs on
    busy.close()


def test_slow_clients_do_not_stall_scrapes(metrics_agent):
    a, url = metrics_agent("--simulate", "dgx-h100")
    port = int(url.rsplit(":", 1)[1])
    idle = []
    for i in range(100):                             # connect and say nothing, or half a request
        s = socket.create_connection(("127.0.0.1", port))
        if i % 2:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        idle.append(s)
    t0 = time.monotonic()
    for _ in range(20):
        assert get(url + "/metrics", timeout=2)[0] == 200
    assert time.monotonic() - t0 < 2.0
    for s in idle:
        s.close()


def test_pod_labels(metrics_agent, tmp_path, stubs, sim_env):
    from kubelet import FakePodResources, load_podresources_stubs
    pb, pbg = load_podresources_stubs(tmp_path / "prstubs")
    pods = FakePodResources(tmp_path / "kubelet", pb, pbg)
    uuids = json.loads(subprocess.run([GPULET, "list", "--simulate", "l4-pcie", "-o", "json"],
                                      capture_output=True, text=True, env=sim_env).stdout)["gpus"]
    uuids = [g["uuid"] for g in uuids]
    pods.pods = [("train-0", "ml", "main", "nvidia.com/gpu", [uuids[0], uuids[1]]),
                 ("nic-user", "ml", "x", "example.com/nic", ["nic0"]),
                 ("share-a", "dev", "a", "nvidia.com/gpu", [uuids[3] + "::0"]),
                 ("share-b", "dev", "b", "nvidia.com/gpu", [uuids[3] + "::1"])]
    pods.start()
    try:
        a, url = metrics_agent("--simulate", "l4-pcie", "--pod-resources-interval-ms", "1000")

        def labelled():
            s = parse(get(url + "/metrics")[2])
            t = {l["gpu"]: l for l, _, _ in s["DCGM_FI_DEV_GPU_TEMP"]}
            return s if t["0"].get("pod") == "train-0" else None
        s = wait_for(labelled)
        assert s, get(url + "/metrics")[2][:2000]
        t = {l["gpu"]: (l, order) for l, _, order in s["DCGM_FI_DEV_GPU_TEMP"]}
        assert t["1"][0]["pod"] == "train-0" and t["1"][0]["namespace"] == "ml"
        assert t["1"][0]["container"] == "main"
        assert t["1"][1][-3:] == ["container", "namespace", "pod"]
        assert "pod" not in t["2"][0]                # nobody holds GPU 2
        assert "pod" not in t["3"][0]                # shared: one series per sharer instead
        shares = sorted((l["pod"], l["UUID"]) for l, v, _ in s["gpulet_gpu_allocation"])
        assert shares == [("share-a", uuids[3]), ("share-b", uuids[3])]
        pods.pods = []                               # the pod ended
        assert wait_for(lambda: "pod=" not in get(url + "/metrics")[2], timeout=4)
        pods.stop()                                  # the kubelet is unreachable
        assert wait_for(lambda: parse(get(url + "/metrics")[2])
                        ["gpulet_podresources_errors_total"][0][1] >= 1, timeout=4)
        assert get(url + "/metrics")[0] == 200       # scrapes go on
    finally:
        pods.stop()


DASHBOARD_QUERIES = [                                 # grafana.com 12239's panels
    'DCGM_FI_DEV_GPU_TEMP{instance=~".+", gpu=~".+"}',
    'avg(DCGM_FI_DEV_GPU_TEMP{instance=~".+", gpu=~".+"})',
    'DCGM_FI_DEV_POWER_USAGE{instance=~".+", gpu=~".+"}',
    'sum(DCGM_FI_DEV_POWER_USAGE{instance=~".+", gpu=~".+"})',
    'DCGM_FI_DEV_SM_CLOCK{instance=~".+", gpu=~".+"} * 1000000',
    'DCGM_FI_DEV_GPU_UTIL{instance=~".+", gpu=~".+"}',
    'DCGM_FI_DEV_FB_USED{instance=~".+", gpu=~".+"}',
    'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~".+", gpu=~".+"}',
]


@tool("prometheus")
def test_real_prometheus(metrics_agent, sim_env, tmp_path):
    a, url = metrics_agent("--simulate", "dgx-h100", "--xid-recovery-seconds", "0")
    sim(sim_env, "set", "5", "temperature.gpu=66")
    sim(sim_env, "xid", "1", "94")                   # so the XID and health panels have data
    prom_port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(f"global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gpulet\n"
                   f"    static_configs:\n      - targets: ['{url[7:]}']\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = f"http://127.0.0.1:{prom_port}/api/v1/query?query="
    try:
        def query(q):
            status, _, body = get(api + urllib.request.quote(q), timeout=2)
            return json.loads(body)["data"]["result"] if status == 200 else None

        def ready():
            try:
                r = query('up{job="gpulet"}')
                return r and r[0]["value"][1] == "1" and query("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
            except (OSError, ValueError, KeyError):
                return None
        assert wait_for(ready, timeout=30), "Prometheus never scraped gpulet"
        for q in DASHBOARD_QUERIES:
            assert query(q), f"no data for dashboard query {q}"
        # Our own dashboard (deploy/grafana): every panel but the pod table,
        # which needs pods (covered by test_pod_labels).
        dash = json.loads((SOURCE / "deploy" / "grafana" / "gpulet-dashboard.json").read_text())
        time.sleep(2)                                # rate() and increase() need two samples
        for panel in dash["panels"]:
            if panel["type"] == "table":
                continue
            q = panel["targets"][0]["expr"].replace("$instance", ".+").replace("$gpu", ".+")
            assert wait_for(lambda: query(q), timeout=10), f"no data for gpulet dashboard panel {panel['title']}: {q}"
        temp = query('DCGM_FI_DEV_GPU_TEMP{gpu="5"}')
        assert temp[0]["value"][1] == "66"
        assert temp[0]["metric"]["modelName"] == "NVIDIA H100 80GB HBM3"
        assert len(query("DCGM_FI_DEV_GPU_TEMP")) == 8
        targets = json.loads(get(f"http://127.0.0.1:{prom_port}/api/v1/targets")[2])
        assert targets["data"]["activeTargets"][0]["health"] == "up"
    finally:
        prom.terminate()
        prom.wait(timeout=10)


def wrk(url, seconds=3):
    """200 connections for a few seconds; the number of requests served."""
    p = subprocess.run(["wrk", "-t2", "-c200", f"-d{seconds}s", url + "/metrics"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "Non-2xx" not in p.stdout and "Socket errors" not in p.stdout, p.stdout
    return int(re.search(r"(\d+) requests in", p.stdout).group(1))


@tool("wrk")
def test_wrk_load(metrics_agent):
    """Many connections at once (the 60 s, 500-connection run is in bench/)."""
    a, url = metrics_agent("--simulate", "dgx-h100")
    assert wrk(url) > 100
    assert get(url + "/metrics")[0] == 200


@pytest.mark.plain
@plain
@tool("wrk")
def test_wrk_load_memory(metrics_agent):
    """A second load costs no memory the first did not: what 200
    connections need is given back, nothing grows with the requests."""
    a, url = metrics_agent("--simulate", "dgx-h100")
    rss = lambda: int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{a.proc.pid}/status").read()).group(1))
    wrk(url, 2)
    before = rss()
    assert wrk(url) > 100
    assert rss() - before < 2 * 1024, (before, rss())   # KiB
