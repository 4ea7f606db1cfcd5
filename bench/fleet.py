#!/usr/bin/python3
"""What a fleet of gpulet agents costs one API server (issue 30).

Brings up a Kubernetes kit (../shared/k8s-v1 unless --kit), keeps only its
etcd and kube-apiserver (the kubelet, scheduler and controller manager are
stopped: no Node but ours changes), makes N Node objects and starts N
simulated agents at once, each its own Node with labels, the fault report,
`--dra all` and a per-node config from one ConfigMap, all against the one
API server. Counts come from the API server's own metrics
(apiserver_request_total; a watch is counted there when it ends, so the
watches open, apiserver_longrunning_requests, are added), connections from
the kernel's socket table (ss), CPU and memory from /proc.

    sudo bench/fleet.py --nodes 10,100 [--rest 60] [--kit ../shared/k8s-next]

Needs root (the kit). Prints one table per N; docs/benchmarks.md keeps them."""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = """version: v1
flags:
  migStrategy: none
"""


def kubectl(env, *args, data=None):
    r = subprocess.run(["kubectl", *args], input=data, capture_output=True, text=True, env=env,
                       timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)}: {r.stderr}")
    return r.stdout


def metrics(env):
    """apiserver_request_total summed (completed requests), and the watches open."""
    text = kubectl(env, "get", "--raw", "/metrics")
    done = sum(float(v) for v in re.findall(r"^apiserver_request_total\{[^}]*\} (\S+)$", text, re.M))
    open_watches = sum(float(v) for v in re.findall(
        r'^apiserver_longrunning_requests\{[^}]*verb="WATCH"[^}]*\} (\S+)$', text, re.M))
    return done, open_watches


def requests_now(env):
    done, watches = metrics(env)
    return done + watches


def proc_cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def connections(port):
    """Established connections to the API server's port, by client pid."""
    out = subprocess.run(["ss", "-tnpH", "state", "established", f"( dport = :{port} )"],
                         capture_output=True, text=True).stdout
    by_pid = {}
    for pid in re.findall(r"pid=(\d+)", out):
        by_pid[int(pid)] = by_pid.get(int(pid), 0) + 1
    return by_pid


def status(sock, what):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(sock))
        s.sendall(what.encode() + b"\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data.decode()


def log_time(line):
    return datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f").timestamp()


def run(n, args, env, gpulet, port, apiserver_pid, work):
    nodes = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"fleet-{i}"}} for i in range(n)]}
    kubectl(env, "apply", "-f", "-", data=json.dumps(nodes))
    kubectl(env, "apply", "-f", "-", data=kubectl(
        env, "create", "configmap", "gpulet-fleet", "-n", "default", f"--from-literal=default={CONFIGS}",
        "--dry-run=client", "-o", "yaml"))
    time.sleep(2)
    base_t, base = time.monotonic(), requests_now(env)
    time.sleep(5)
    noise = (requests_now(env) - base) / (time.monotonic() - base_t)  # the API server's own
    def start_all(again=False):
        started = []
        for i in range(n):
            d = work / f"n{n}-{i}"
            d.mkdir(parents=True, exist_ok=again)
            aenv = dict(os.environ, GPULET_SIM_CONTROL=str(d / "sim.sock"), GPULET_LOG_LEVEL="info")
            log = open(d / ("agent2.log" if again else "agent.log"), "w")
            p = subprocess.Popen([gpulet, "agent", "--simulate", "dgx-h100", "--dra", "all",
                                  "--kubeconfig", env["KUBECONFIG"], "--node-name", f"fleet-{i}",
                                  "--kubelet-root", str(d / "kubelet"), "--cdi-spec-dir", str(d / "cdi"),
                                  "--status-socket", str(d / "status.sock"), "--no-metrics",
                                  "--config-map", "default/gpulet-fleet", "--labels", "api"],
                                 stdout=log, stderr=subprocess.STDOUT, env=aenv)
            started.append((p, d, aenv))
        return started

    before = requests_now(env)
    t0 = time.monotonic()
    agents = start_all()
    # The slice published, from each agent's start (its first log line).
    published = []
    deadline = time.monotonic() + 120
    while len(published) < n and time.monotonic() < deadline:
        published = []
        for p, d, _ in agents:
            lines = (d / "agent.log").read_text().splitlines()
            hit = [l for l in lines if "ResourceSlice published" in l]
            if lines and hit:
                published.append(log_time(hit[0]) - log_time(lines[0]))
        time.sleep(0.5)
    time.sleep(max(0.0, 60 - (time.monotonic() - t0)))
    first_minute = requests_now(env) - before - noise * (time.monotonic() - t0)
    conns = connections(port)
    held = [conns.get(p.pid, 0) for p, _, _ in agents]
    opened = []
    for p, d, _ in agents:
        m = re.search(r"connections (\d+)", status(d / "status.sock", "api"))
        opened.append(int(m.group(1)) if m else -1)
    # At rest.
    cpu0 = [proc_cpu(p.pid) for p, _, _ in agents]
    api_cpu0 = proc_cpu(apiserver_pid)
    r0, t_rest = requests_now(env), time.monotonic()
    time.sleep(args.rest)
    rest_s = time.monotonic() - t_rest
    rest = (requests_now(env) - r0 - noise * rest_s) / n / (rest_s / 60)
    agent_cpu = [(proc_cpu(p.pid) - c) * 300 / rest_s for (p, _, _), c in zip(agents, cpu0)]
    api_cpu = (proc_cpu(apiserver_pid) - api_cpu0) / rest_s
    rss = [proc_rss_mib(p.pid) for p, _, _ in agents]
    api_rss = proc_rss_mib(apiserver_pid)
    # A fault on every node at once (GPU 2, XID 79).
    r0, t_fault = requests_now(env), time.monotonic()
    for p, d, aenv in agents:
        subprocess.run([gpulet, "sim", "xid", "2", "79"], env=aenv, capture_output=True, timeout=30)
    time.sleep(15)
    fault = (requests_now(env) - r0 - noise * (time.monotonic() - t_fault)) / n
    # Every agent killed and started again, the GPUs as they were (the
    # simulator starts healthy: the fault is first taken back): a restart
    # that finds everything in place.
    for p, d, aenv in agents:
        subprocess.run([gpulet, "sim", "recover", "2"], env=aenv, capture_output=True, timeout=30)
    time.sleep(10)
    for p, _, _ in agents:
        p.kill()
        p.wait()
    r0, t_again = requests_now(env), time.monotonic()
    agents = start_all(again=True)
    time.sleep(30)
    restart = (requests_now(env) - r0 - noise * (time.monotonic() - t_again)) / n
    for p, _, _ in agents:
        p.send_signal(signal.SIGTERM)
    for p, _, _ in agents:
        p.wait(timeout=60)
    kubectl(env, "delete", "nodes", *[f"fleet-{i}" for i in range(n)], "--wait=false")
    published.sort()
    print(f"\n## {n} agents (per node unless said)")
    print(f"slices published: {len(published)} of {n}")
    if published:
        print(f"slice published from the agent's start: p50 {statistics.median(published):.2f} s, "
              f"max {published[-1]:.2f} s")
    print(f"requests in the first minute: {first_minute / n:.2f}")
    print(f"TCP+TLS connections opened by the agent's client (its count): "
          f"median {statistics.median(opened)}, max {max(opened)}")
    print(f"connections held to the API server at rest (ss): median {statistics.median(held)}, "
          f"max {max(held)}")
    print(f"requests per minute at rest ({rest_s:.0f} s): {rest:.3f}")
    print(f"requests for a fault on every node at once: {fault:.2f}")
    print(f"requests at a restart of all {n}, nothing changed, in 30 s: {restart:.2f}")
    print(f"agent CPU at rest, per 5 minutes: median {statistics.median(agent_cpu):.3f} s")
    print(f"agent RSS: median {statistics.median(rss):.1f} MiB")
    print(f"kube-apiserver: RSS {api_rss:.0f} MiB, CPU at rest {api_cpu * 100:.1f} % of a core "
          f"(its own background: {noise * 60:.1f} requests a minute, taken out above)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="10,100")
    ap.add_argument("--rest", type=float, default=60.0, help="seconds at rest measured")
    ap.add_argument("--kit", default=str(ROOT.parent / "shared" / "k8s-v1"))
    ap.add_argument("--gpulet", default=str(ROOT / "build-release" / "gpulet"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (the kit's cluster.sh)")
    kit = Path(args.kit).resolve()
    up = subprocess.run([str(kit / "cluster.sh"), "up", "--gpus", "0"], capture_output=True, text=True,
                        timeout=300)
    if up.returncode != 0:
        raise SystemExit(f"cluster.sh up failed:\n{up.stderr[-3000:]}")
    env = dict(os.environ)
    for line in up.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    base = Path(env["K8S_BASE"])
    pids = {}
    for line in (base / "pids").read_text().splitlines():
        pid, name = line.split()[:2]
        pids[name] = int(pid)
    for name in ("kubelet", "kube-scheduler", "kube-controller-manager"):
        try:
            os.kill(pids[name], signal.SIGTERM)
        except (KeyError, ProcessLookupError):
            pass
    server = kubectl(env, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
    port = int(server.rsplit(":", 1)[1])
    work = Path(tempfile.mkdtemp(prefix="gpulet-fleet-"))
    version = json.loads(kubectl(env, "version", "-o", "json"))["serverVersion"]["gitVersion"]
    print(f"{datetime.now():%Y-%m-%d}, {os.cpu_count()} cores, kit {kit.name} ({version})")
    try:
        for n in [int(x) for x in args.nodes.split(",")]:
            run(n, args, env, args.gpulet, port, pids["kube-apiserver"], work)
    finally:
        subprocess.run([str(kit / "cluster.sh"), "down", str(base)], capture_output=True, timeout=300)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
