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

With work (--claims 8, issue 53): each node also gets 8 ResourceClaims,
allocated to its GPUs as the scheduler would and reserved for 9 pods (the
last claim shared by two), which this script prepares through each agent's
DRA socket as the kubelet would (one NodePrepareResources a claim), and a
stand-in kubelet PodResources List per node that reports the pods' claims
(as 1.34 and later do; --fallback: as 1.32 does, none). Requests are then
also counted per claim prepared and unprepared, at rest with the claims
held (--rest, 300 s or more for the issue's figure), and in the burst of
all N agents restarting at once (its peak second from the API server's
count, sampled each second).

    sudo bench/fleet.py --nodes 10,100 [--rest 60] [--claims 8 [--fallback]] [--kit ../shared/k8s-next]

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
from concurrent import futures
from datetime import datetime
from pathlib import Path

import grpc

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


# What gpulet reads and writes; with the kit's kubelet, scheduler and
# controller manager stopped, nothing else touches them.
OURS = ("nodes", "resourceslices", "resourceclaims", "pods", "configmaps", "events")


def metrics(env, only=None):
    """apiserver_request_total summed (completed requests), and the watches
    open; only: of those resources."""
    text = kubectl(env, "get", "--raw", "/metrics")
    def total(pattern):
        return sum(float(v) for labels, v in re.findall(pattern, text, re.M)
                   if only is None or re.search(r'(?:^|,)resource="(\w*)"', labels)[1] in only)
    done = total(r"^apiserver_request_total\{([^}]*)\} (\S+)$")
    open_watches = total(r'^apiserver_longrunning_requests\{([^}]*verb="WATCH"[^}]*)\} (\S+)$')
    return done, open_watches


def requests_now(env, only=None):
    done, watches = metrics(env, only)
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


DRA_V1 = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"


def stubs(work):
    """The DRA and PodResources messages, generated from proto/."""
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from kubelet import load_podresources_stubs
    pr_pb, pr_grpc = load_podresources_stubs(work / "stubs")
    shutil.copy(ROOT / "proto" / "dra" / "v1beta1" / "api.proto", work / "stubs" / "dra.proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{work / 'stubs'}",
                    f"--python_out={work / 'stubs'}", "dra.proto"], check=True)
    import dra_pb2
    return dra_pb2, pr_pb, pr_grpc


class Work:
    """One node's claims: 8 ResourceClaims on its GPUs 0-7, held by pods
    p0..p6 one each and the last by p7 and p8; a stand-in PodResources
    List that says so once the claims are prepared (unless fallback)."""

    def __init__(self, node, d, claims, stubs, fallback):
        self.node, self.claims, self.fallback = node, claims, fallback
        self.dra_pb, self.pr_pb, pr_grpc = stubs
        self.sock = d / "kubelet" / "plugins" / "gpu.nvidia.com" / "dra.sock"
        self.uids = {}
        self.held = False
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        pr_grpc.add_PodResourcesListerServicer_to_server(self, self.server)
        (d / "kubelet" / "pod-resources").mkdir(parents=True, exist_ok=True)
        self.server.add_insecure_port(f"unix://{d / 'kubelet' / 'pod-resources' / 'kubelet.sock'}")
        self.server.start()

    def pods(self):
        """(pod, claim index) for each pod: the last claim has two."""
        out = [(f"{self.node}-p{k}", k) for k in range(self.claims)]
        return out + [(f"{self.node}-p{self.claims}", self.claims - 1)] if self.claims else out

    def List(self, request, context):
        out = self.pr_pb.ListPodResourcesResponse()
        if not self.held or self.fallback:
            return out
        for pod, k in self.pods():
            c = out.pod_resources.add(name=pod, namespace="default").containers.add(name="c")
            r = c.dynamic_resources.add(claim_name=f"{self.node}-c{k}", claim_namespace="default")
            r.claim_resources.add(driver_name="gpu.nvidia.com", pool_name=self.node, device_name=f"gpu-{k}")
        return out

    def objects(self):
        return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": f"{self.node}-c{k}", "namespace": "default"},
                 "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}
                for k in range(self.claims)]

    def status(self, claim):
        """The claim as the scheduler leaves it: allocated, reserved for its pods."""
        k = int(claim["metadata"]["name"].rsplit("-c", 1)[1])
        self.uids[k] = claim["metadata"]["uid"]
        claim["status"] = {"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": self.node,
                                     "device": f"gpu-{k}"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [self.node]}]}]}},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}
                            for pod, i in self.pods() if i == k]}
        return claim

    def call(self, what, k):
        req = getattr(self.dra_pb, f"{what}Request")(claims=[self.dra_pb.Claim(
            namespace="default", uid=self.uids[k], name=f"{self.node}-c{k}")])
        resp = getattr(self.dra_pb, f"{what}Response")
        with grpc.insecure_channel(f"unix://{self.sock}") as ch:
            r = ch.unary_unary(DRA_V1 + what, request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=resp.FromString)(req, timeout=60)
        err = r.claims[self.uids[k]].error
        if err:
            raise SystemExit(f"{what} {self.node}-c{k}: {err}")

    def prepare_all(self):
        for k in range(self.claims):
            self.call("NodePrepareResources", k)
        self.held = True

    def unprepare_all(self):
        self.held = False
        for k in range(self.claims):
            self.call("NodeUnprepareResources", k)

    def stop(self):
        self.server.stop(0)


def make_claims(env, works):
    """The claims created, then allocated and reserved (their status), in
    two kubectl calls; before any window is measured."""
    items = [o for w in works for o in w.objects()]
    kubectl(env, "create", "-f", "-", data=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    listed = json.loads(kubectl(env, "get", "resourceclaims", "-n", "default", "-o", "json"))["items"]
    by_node = {w.node: w for w in works}
    done = []
    for c in listed:
        node = c["metadata"]["name"].rsplit("-c", 1)[0]
        if node in by_node:
            done.append(by_node[node].status(c))
    kubectl(env, "replace", "--subresource=status", "-f", "-",
            data=json.dumps({"apiVersion": "v1", "kind": "List", "items": done}))


def each(works, fn):
    """fn on every node's work, 16 at a time, as 100 kubelets would at once."""
    with futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(fn, works))


def agent_requests(agents):
    """Each agent's own count of API requests (its status socket)."""
    out = []
    for _, d, _ in agents:
        m = re.search(r"requests (\d+)", status(d / "status.sock", "api"))
        out.append(int(m.group(1)) if m else 0)
    return out


def log_time(line):
    return datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f").timestamp()


def run(n, args, env, gpulet, port, apiserver_pid, work, dra_stubs):
    nodes = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"fleet-{i}"}} for i in range(n)]}
    kubectl(env, "apply", "-f", "-", data=json.dumps(nodes))
    kubectl(env, "apply", "-f", "-", data=kubectl(
        env, "create", "configmap", "gpulet-fleet", "-n", "default", f"--from-literal=default={CONFIGS}",
        "--dry-run=client", "-o", "yaml"))
    works = [Work(f"fleet-{i}", work / f"n{n}-{i}", args.claims, dra_stubs, args.fallback)
             for i in range(n)] if args.claims else []
    if works:
        make_claims(env, works)
    time.sleep(2)
    base_t, base = time.monotonic(), requests_now(env)
    time.sleep(20)
    noise = (requests_now(env) - base - 1) / (time.monotonic() - base_t)  # the API server's own
    def start_all(again=False):
        started = []
        for i in range(n):
            d = work / f"n{n}-{i}"
            d.mkdir(parents=True, exist_ok=True)
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
    if works:
        # The claims prepared, as the kubelets would at once.
        r0, a0, t_prep = requests_now(env), agent_requests(agents), time.monotonic()
        each(works, Work.prepare_all)
        time.sleep(10)  # the PodResources List after a prepare, and anything the agent does then
        per_prepare = (requests_now(env) - r0 - noise * (time.monotonic() - t_prep)) / (n * args.claims)
        agent_per_prepare = (sum(agent_requests(agents)) - sum(a0)) / (n * args.claims)
    # At rest.
    a_rest = agent_requests(agents)
    cpu0 = [proc_cpu(p.pid) for p, _, _ in agents]
    api_cpu0 = proc_cpu(apiserver_pid)
    ours0 = requests_now(env, OURS)
    r0, t_rest = requests_now(env), time.monotonic()
    time.sleep(args.rest)
    rest_s = time.monotonic() - t_rest
    rest = (requests_now(env) - r0 - noise * rest_s) / n / (rest_s / 60)
    rest_ours = (requests_now(env, OURS) - ours0) / n / (rest_s / 60)
    agent_rest = (sum(agent_requests(agents)) - sum(a_rest)) / n / (rest_s / 60)
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
    per_second, last = [], r0
    while time.monotonic() - t_again < 30:
        time.sleep(1)
        now = requests_now(env)
        per_second.append(now - last - 1)  # less the sample's own GET
        last = now
    restart = (requests_now(env) - r0 - len(per_second) - 1 - noise * (time.monotonic() - t_again)) / n
    if works:
        r0, a0, t_un = requests_now(env), agent_requests(agents), time.monotonic()
        each(works, Work.unprepare_all)
        time.sleep(10)
        per_unprepare = (requests_now(env) - r0 - noise * (time.monotonic() - t_un)) / (n * args.claims)
        agent_per_unprepare = (sum(agent_requests(agents)) - sum(a0)) / (n * args.claims)
    for p, _, _ in agents:
        p.send_signal(signal.SIGTERM)
    for p, _, _ in agents:
        p.wait(timeout=60)
    kubectl(env, "delete", "nodes", *[f"fleet-{i}" for i in range(n)], "--wait=false")
    for w in works:
        w.stop()
    if works:
        kubectl(env, "delete", "resourceclaims", "-n", "default", "--all", "--wait=false")
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
    if works:
        print(f"claims: {args.claims} a node, the last shared by two pods; PodResources "
              f"{'without' if args.fallback else 'with'} DRA claims")
        print(f"requests per claim prepared: {per_prepare:.2f} (the agents' own count: {agent_per_prepare:.2f})")
        print(f"requests per claim unprepared: {per_unprepare:.2f} (the agents' own count: "
              f"{agent_per_unprepare:.2f})")
    print(f"requests per minute at rest ({rest_s:.0f} s): {rest:.3f}, less the API server's background; "
          f"of {', '.join(OURS)} alone: {rest_ours:.3f}; the agents' own count: {agent_rest:.3f}")
    print(f"requests for a fault on every node at once: {fault:.2f}")
    print(f"requests at a restart of all {n}, nothing changed, in 30 s: {restart:.2f}; the burst's peak "
          f"second: {max(per_second):.0f} requests ({max(per_second) / n:.2f} a node)")
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
    ap.add_argument("--claims", type=int, default=0, help="prepared claims a node (issue 53: 8)")
    ap.add_argument("--fallback", action="store_true", help="PodResources reports no DRA claims (as 1.32)")
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
    dra_stubs = stubs(work) if args.claims else None
    version = json.loads(kubectl(env, "version", "-o", "json"))["serverVersion"]["gitVersion"]
    print(f"{datetime.now():%Y-%m-%d}, {os.cpu_count()} cores, kit {kit.name} ({version})")
    try:
        for n in [int(x) for x in args.nodes.split(",")]:
            run(n, args, env, args.gpulet, port, pids["kube-apiserver"], work, dra_stubs)
    finally:
        subprocess.run([str(kit / "cluster.sh"), "down", str(base)], capture_output=True, timeout=300)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
