#!/usr/bin/python3
"""GPU fault -> label change visible through the API server, on the real
Kubernetes of ../shared/k8s (needs root).

gpulet runs on the simulated dgx-h100 with --labels api; a watch on the Node
(the API server's own stream, over TLS with the admin client certificate)
timestamps every change of gpulet.io/gpu.healthy. Each round injects XID 79
on one GPU (`gpulet sim xid`), waits for the watch to show 7 healthy GPUs,
then recovers the GPU and waits for 8. The latency runs from just before the
injecting `gpulet sim` process starts (so it includes that process) to the
watch event's arrival. Also counts the Node writes gpulet made: the label
changes the watch saw.

usage: bench/labels_latency.py [--faults 50] [--gpulet build/gpulet]"""
import argparse
import http.client
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
K8S = Path(os.environ.get("GPULET_K8S", ROOT.parent / "shared" / "k8s"))


class Watch(threading.Thread):
    """Streams the Node's watch events; keeps (arrival, healthy) per change."""

    def __init__(self, env):
        super().__init__(daemon=True)
        pki = Path(env["K8S_BASE"]) / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        server = subprocess.run(["kubectl", "config", "view", "--minify", "-o",
                                 "jsonpath={.clusters[0].cluster.server}"], env=env,
                                capture_output=True, text=True, check=True).stdout
        host, port = server.removeprefix("https://").rsplit(":", 1)
        self.conn = http.client.HTTPSConnection(host, int(port), context=ctx)
        self.node = env["K8S_NODE"]
        self.changes = []
        self.cond = threading.Condition()

    def run(self):
        self.conn.request("GET", f"/api/v1/nodes?watch=1&fieldSelector=metadata.name={self.node}")
        resp = self.conn.getresponse()
        last = None
        while True:
            line = resp.readline()
            if not line:
                return
            now = time.monotonic()
            node = json.loads(line)["object"]
            healthy = node["metadata"].get("labels", {}).get("gpulet.io/gpu.healthy")
            if healthy != last:
                with self.cond:
                    self.changes.append((now, healthy))
                    self.cond.notify_all()
                last = healthy

    def wait(self, value, after, timeout=10.0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for t, v in self.changes:
                    if t >= after and v == value:
                        return t
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SystemExit(f"no change to {value} within {timeout} s")
                self.cond.wait(left)


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--faults", type=int, default=50)
    ap.add_argument("--gpulet", default=str(ROOT / "build" / "gpulet"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("labels_latency: the real kubelet needs root")
    up = subprocess.run([str(K8S / "cluster.sh"), "up", "--gpus", "8"], capture_output=True,
                        text=True, timeout=300)
    if up.returncode != 0:
        sys.exit(up.stderr)
    env = dict(os.environ)
    for line in up.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    base = env["K8S_BASE"]
    env["GPULET_SIM_CONTROL"] = f"{base}/sim.sock"
    log = open(f"{base}/gpulet.log", "w")
    agent = subprocess.Popen(
        [args.gpulet, "agent", "--simulate", "dgx-h100", "--kubelet-root", "/var/lib/kubelet",
         "--status-socket", f"{base}/gpulet.sock", "--no-metrics", "--health-probe-ms", "50",
         "--labels", "api", "--kubeconfig", env["KUBECONFIG"], "--node-name", env["K8S_NODE"]],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        watch = Watch(env)
        watch.start()
        watch.wait("8", 0, timeout=30)
        lat = []
        for i in range(args.faults):
            gpu = str(i % 8)
            t0 = time.monotonic()
            subprocess.run([args.gpulet, "sim", "xid", gpu, "79"], env=env, check=True,
                           capture_output=True)
            lat.append((watch.wait("7", t0) - t0) * 1000)
            t1 = time.monotonic()
            subprocess.run([args.gpulet, "sim", "recover", gpu], env=env, check=True,
                           capture_output=True)
            watch.wait("8", t1)
        writes = len(watch.changes) - 1
        print(f"{args.faults} faults: fault -> label visible through the API server "
              f"p50 {statistics.median(lat):.1f} ms, p99 {percentile(lat, 99):.1f} ms, "
              f"max {max(lat):.1f} ms; {writes} label changes seen for {2 * args.faults} "
              f"health changes")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)
        log.close()
        subprocess.run([str(K8S / "cluster.sh"), "down", base], capture_output=True, timeout=300)


if __name__ == "__main__":
    main()
