#!/usr/bin/python3
"""A rollout of the gpulet DaemonSet, timed on the real Kubernetes 1.36 of
../shared/k8s-v1 (needs root and build-release/gpulet-image.tar, which
scripts/image.sh builds).

The DaemonSet of tests/e2e/test_upgrade.py (deploy/dra on a simulated
8-GPU node: GPUs 0-3 through DRA, 4-7 through the device plugin with MPS,
8 replicas) runs with an MPS job beside it (the simulator's client
stand-in, which fails for good if its daemon goes). Each round rolls the
DaemonSet to the other of two image tags (`kubectl set image`; deploy/'s
RollingUpdate with maxSurge, the new pod taking over from the old) and
waits for the new pod to be Ready. A watch on the Node (`kubectl get
--watch`) timestamps every change of the resource's allocatable and
capacity: the window per node in which the GPUs were not schedulable is
the time allocatable was below capacity. The node's ResourceSlice pool is
looked at every 0.2 s: how often it was absent. Also: the rollout's wall
time (set image -> new pod Ready), the new gpulet's own start-up (its
log's total), and the job's restarts.

usage: bench/rollout.py [--rounds 10]"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
K8S = Path(os.environ.get("GPULET_K8S", ROOT.parent / "shared" / "k8s-v1"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import drakit  # noqa: E402
from test_upgrade import OVERLAY, RES, config  # noqa: E402


class PoolWatch(threading.Thread):
    """The node's ResourceSlice pool every 0.2 s: its generation, or None."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster, self.seen, self.stop = cluster, [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            pool = drakit.pool_slices(self.cluster)
            self.seen.append(pool[0]["spec"]["pool"]["generation"] if pool else None)
            time.sleep(0.2)


class NodeWatch(threading.Thread):
    """The Node's watch events, as kubectl streams them: (arrival,
    allocatable, capacity) of RES."""

    def __init__(self, env, node):
        super().__init__(daemon=True)
        self.proc = subprocess.Popen(["kubectl", "get", "node", node, "--watch", "-o", "json"],
                                     env=env, stdout=subprocess.PIPE, text=True)
        self.events = []

    def run(self):
        buf, dec = "", json.JSONDecoder()
        for chunk in iter(lambda: self.proc.stdout.readline(), ""):
            buf += chunk
            try:
                obj, end = dec.raw_decode(buf.lstrip())
            except ValueError:
                continue
            buf = buf.lstrip()[end:]
            st = obj["status"]
            self.events.append((time.monotonic(), st["allocatable"].get(RES), st["capacity"].get(RES)))

    def below(self, since, until):
        """Seconds in [since, until] in which allocatable was below capacity."""
        total, low_at = 0.0, None
        for t, alloc, cap in self.events:
            if t > until:
                break
            if alloc != cap and low_at is None:
                low_at = max(t, since)
            elif alloc == cap and low_at is not None:
                total += max(0.0, t - low_at) if t >= since else 0.0
                low_at = None
        if low_at is not None:
            total += until - low_at
        return total


def stamp(logs, text):
    """The time of the first log line holding text, in seconds of the day."""
    m = re.search(r"^\S+T(\d+):(\d+):([\d.]+)Z \S+ +.*" + re.escape(text), logs, re.M)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)) if m else None


def unserved(logs):
    """ms from the old agent's having let go (the new one's "took over")
    to the new one's registering the device plugin's resource: the time
    the kubelet had no plugin for it."""
    a, b = stamp(logs, "took over from"), stamp(logs, f"registered {RES} with the kubelet")
    return (b - a) * 1000 if a is not None and b is not None else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    archive = ROOT / "build-release" / "gpulet-image.tar"
    if os.geteuid() != 0 or not archive.exists():
        sys.exit(f"needs root and {archive} (sudo scripts/image.sh localhost/gpulet:test {archive})")
    up = subprocess.run([str(K8S / "cluster.sh"), "up", "--gpus", "8"], capture_output=True,
                        text=True, timeout=300, check=True)
    env = dict(os.environ)
    for line in up.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    base, node = env["K8S_BASE"], env["K8S_NODE"]
    made = not drakit.CDI_DIR.exists()
    k = lambda *a, **kw: subprocess.run(["kubectl", *a], env=env, capture_output=True, text=True,
                                        timeout=180, **kw).stdout
    try:
        sock = f"{base}/containerd/containerd.sock"
        subprocess.run(["ctr", "--address", sock, "-n", "k8s.io", "images", "import", "--base-name",
                        "localhost/gpulet", str(archive)], check=True, capture_output=True)
        subprocess.run(["ctr", "--address", sock, "-n", "k8s.io", "images", "tag", "--force",
                        "localhost/gpulet:test", "localhost/gpulet:test2"], check=True,
                       capture_output=True)
        subprocess.run([str(ROOT / "build" / "gpulet"), "sim", "driver-root", f"{base}/driver"],
                       check=True, capture_output=True, env=env)
        overlay = Path(base) / "rollout-overlay"
        overlay.mkdir()
        server = k("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
        host, port = server.removeprefix("https://").rsplit(":", 1)
        (overlay / "kustomization.yaml").write_text(OVERLAY.format(
            deploy=os.path.relpath(ROOT / "deploy", overlay), base=base, api_host=host,
            api_port=port, config=config()))
        k("label", "node", node, "gpulet.io/gpu-node=true")
        k("apply", "-k", str(overlay))
        k("-n", "gpulet", "rollout", "status", "ds/gpulet", "--timeout=120s")
        client = (Path(base) / "driver/usr/bin/gpulet-mps-client").read_text()
        job = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mps-job"},
               "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "c", "image": env["K8S_BUSYBOX_IMAGE"],
                                        "command": ["sh", "-c", client],
                                        "resources": {"limits": {RES: 1}}}]}}
        k("apply", "-f", "-", input=json.dumps(job))
        k("wait", "--for=condition=Ready", "pod/mps-job", "--timeout=120s")
        watch = NodeWatch(env, node)
        watch.start()
        from conftest import Cluster
        pools = PoolWatch(Cluster(env))
        pools.start()
        time.sleep(12)
        rows = []
        for i in range(args.rounds):
            tag = "test2" if i % 2 == 0 else "test"
            t0 = time.monotonic()
            k("-n", "gpulet", "set", "image", "ds/gpulet", f"gpulet=localhost/gpulet:{tag}")
            k("-n", "gpulet", "rollout", "status", "ds/gpulet", "--timeout=120s")
            took = time.monotonic() - t0
            time.sleep(12)  # a node status update or more after it
            logs = k("-n", "gpulet", "logs", "ds/gpulet")
            startup = re.search(r"start-up: .* total ([0-9.]+) ms", logs)
            rows.append((took, watch.below(t0, time.monotonic()),
                         float(startup.group(1)) if startup else float("nan"),
                         "is up, adopted" in logs, unserved(logs)))
        pod = json.loads(k("get", "pod", "mps-job", "-o", "json"))["status"]
        restarts = pod["containerStatuses"][0]["restartCount"]
        pools.stop.set()
        pools.join()
        print(f"{args.rounds} rollouts of the gpulet DaemonSet on Kubernetes 1.36.3 (the kit), "
              f"one node, 8 MPS replicas and 4 DRA GPUs; node watch events: {len(watch.events)}; "
              f"the ResourceSlice pool looked at {len(pools.seen)} times: absent "
              f"{pools.seen.count(None)}, generations {sorted(set(g for g in pools.seen if g))}")
        print("| round | set image -> new pod Ready (s) | allocatable below capacity (s) | "
              "no plugin: hand-over -> registered (ms) | new gpulet's start-up (ms) | "
              "MPS daemon adopted |")
        print("|---|---|---|---|---|---|")
        for i, (took, low, startup, adopted, gap) in enumerate(rows, 1):
            print(f"| {i} | {took:.1f} | {low:.1f} | {gap:.1f} | {startup:.1f} | "
                  f"{'yes' if adopted else 'no'} |")
        lows = [r[1] for r in rows]
        print(f"rounds with a window: {sum(1 for x in lows if x > 0)} of {len(rows)}; "
              f"the job: {pod['phase']}, restarts {restarts}")
        watch.proc.kill()
    finally:
        subprocess.run([str(K8S / "cluster.sh"), "down", base], capture_output=True, timeout=300)
        subprocess.run(["pkill", "-f", f"{base}/driver/usr/bin/nvidia-cuda-mps-control"])
        for d in Path("/sys/fs/cgroup").glob("*/gpulet-mps"):
            subprocess.run(["rmdir", str(d)], capture_output=True)
        drakit.remove_cdi_specs(made)


if __name__ == "__main__":
    main()
