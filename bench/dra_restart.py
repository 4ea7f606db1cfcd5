"""What a restart costs the DRA driver with prepared claims on disk: the
time from gpulet's start to its DRA service serving, and to the
checkpoint's claims being in (read off the loop meanwhile; a prepare that
comes before waits for them), with an empty checkpoint and with 1,000
claims, on the simulated dgx-h100 with a stand-in API server. The median
of --runs starts each (docs/benchmarks.md).

usage: bench/dra_restart.py [--gpulet build/gpulet] [--runs 20] [--claims 0,1000]"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "integration"))
from fakeapi import FakeAPI  # noqa: E402


def checkpoint(path, gpulet, n):
    gpus = json.loads(subprocess.run([gpulet, "list", "--simulate", "dgx-h100", "-o", "json"],
                                     capture_output=True, text=True, check=True).stdout)["gpus"]
    claims = [{"uid": f"u{i}", "namespace": "ns", "name": f"c{i}",
               "devices": [{"request": "gpu", "device": f"gpu-{i % 8}", "uuid": gpus[i % 8]["uuid"]}],
               "consumers": [{"pod": f"p{i}", "namespace": "ns", "container": "c"}]}
              for i in range(n)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"claims": claims}))


def start_ms(gpulet, root, kubeconfig, n):
    t0 = time.monotonic()
    p = subprocess.Popen([gpulet, "agent", "--simulate", "dgx-h100", "--dra", "all", "--kubelet-root",
                          str(root / "k"), "--kubeconfig", str(kubeconfig), "--node-name", "n1",
                          "--labels", "none", "--no-metrics", "--fault-report", "none",
                          "--status-socket", str(root / "s.sock")],
                         stderr=subprocess.PIPE, text=True, env=dict(os.environ, GPULET_SIM_CONTROL="off"))
    serving = claims = None
    for line in p.stderr:
        if "DRA: gpu.nvidia.com serving on" in line:
            serving = (time.monotonic() - t0) * 1000
            if not n:
                break
        if "prepared claim(s) from" in line:
            claims = (time.monotonic() - t0) * 1000
            break
    p.kill()
    p.wait()
    return serving, claims if n else serving


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpulet", default="build/gpulet")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--claims", default="0,1000")
    o = ap.parse_args()
    api = FakeAPI("n1")
    try:
        print("| prepared claims | start to serving, p50 ms | p90 ms | start to claims in, p50 ms | p90 ms |")
        print("|---|---|---|---|---|")
        for n in (int(x) for x in o.claims.split(",")):
            with tempfile.TemporaryDirectory() as tmp:
                root = pathlib.Path(tmp)
                kubeconfig = api.kubeconfig(root / "kc")
                ck = root / "k" / "plugins" / "gpu.nvidia.com" / "checkpoint.json"
                times = []
                for _ in range(o.runs):
                    checkpoint(ck, o.gpulet, n)  # as the last run's agent may have rewritten it
                    times.append(start_ms(o.gpulet, root, kubeconfig, n))
                row = [f"| {n} "]
                for k in (0, 1):
                    t = sorted(x[k] for x in times if x[k] is not None)
                    row.append(f"| {statistics.median(t):.1f} | {t[int(len(t) * 0.9) - 1]:.1f} ")
                print("".join(row) + "|")
    finally:
        api.stop()


if __name__ == "__main__":
    main()
