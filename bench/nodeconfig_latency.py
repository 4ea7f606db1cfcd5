#!/usr/bin/python3
"""Node label change -> the kubelet sees the new config's devices.

gpulet runs on the simulated l4-pcie with --config-map, against the
stand-in API server of tests/integration (list and watch by name) and the
grpcio kubelet. Each round flips the Node's nvidia.com/device-plugin.config
label between two named configs (whole GPUs, 4 time-slicing replicas) and
times from the label change (the API object updated, its watch event
queued) to the kubelet's next Register; then to the first ListAndWatch
answer with the new device count. Also the same for a ConfigMap change.

usage: bench/nodeconfig_latency.py [--rounds 20] [--gpulet build/gpulet]"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from fakeapi import FakeAPI  # noqa: E402
from kubelet import FakeKubelet, load_stubs  # noqa: E402

LABEL = "nvidia.com/device-plugin.config"
TS = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {{name: nvidia.com/gpu, replicas: {}}}\n"


def devices(k):
    channel, stub = k.plugin()
    try:
        return len(next(stub.ListAndWatch(k.pb.Empty(), timeout=5)).devices)
    finally:
        channel.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--gpulet", default=str(ROOT / "build" / "gpulet"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpulet-ncb-"))
    k = FakeKubelet(tmp / "kubelet", *load_stubs(tmp / "stubs"))
    k.start()
    api = FakeAPI(labels={LABEL: "whole"})
    api.set_configmap("gpulet", "cfg", {"whole": "version: v1\n", "ts4": TS.format(4)})
    env = dict(os.environ, GPULET_SIM_CONTROL=str(tmp / "sim.sock"))
    env.setdefault("GPULET_SIM_LIB", str(Path(args.gpulet).parent / "libgpulet-nvml-sim.so"))
    agent = subprocess.Popen(
        [args.gpulet, "agent", "--simulate", "l4-pcie", "--kubelet-root", str(k.root),
         "--status-socket", str(tmp / "s.sock"), "--no-metrics", "--labels", "none",
         "--kubeconfig", str(api.kubeconfig(tmp / "kc")), "--node-name", "n1",
         "--config-map", "gpulet/cfg", "--cdi-spec-dir", str(tmp / "cdi"),
         "--proc-root", str(tmp / "proc")], stderr=open(tmp / "agent.log", "w"), env=env)
    k.wait_registrations(1, timeout=30)
    reg, seen = [], []
    try:
        for r in range(args.rounds):
            want, n = ("ts4", 16) if r % 2 == 0 else ("whole", 4)
            before = len(k.registrations)
            t0 = time.monotonic()
            if r == args.rounds - 1:
                # The last round changes the ConfigMap instead: the config in
                # use (ts4, set by the round before) becomes 2 replicas.
                api.set_configmap("gpulet", "cfg", {"whole": "version: v1\n", "ts4": TS.format(2)})
                n = 8
            else:
                api.set_label(LABEL, want)
            t_reg, _ = k.wait_registrations(before + 1, timeout=30)
            while devices(k) != n:
                time.sleep(0.001)
            reg.append((t_reg - t0) * 1000)
            seen.append((time.monotonic() - t0) * 1000)
    finally:
        agent.terminate()
        agent.wait(timeout=10)
        k.stop()
        api.stop()
    q = lambda xs: f"median {statistics.median(xs):.1f} ms, p90 {sorted(xs)[int(len(xs) * 0.9) - 1]:.1f}, max {max(xs):.1f}"
    print(f"{args.rounds} config changes ({args.rounds - 1} by the Node label, 1 by the ConfigMap)")
    print(f"  change -> Register:                 {q(reg)}")
    print(f"  change -> ListAndWatch new devices: {q(seen)}")


if __name__ == "__main__":
    main()
