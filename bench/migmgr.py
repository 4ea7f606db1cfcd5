"""The MIG manager built in (--mig-parted-config, docs/mig.md): on the
simulated hgx-h200 (8 H200s, MIG off), the time from the Node's label
nvidia.com/mig.config to nvidia.com/mig.config.state=success, and to the
kubelet stand-in's registration of the new resource with all its devices,
for a round of layouts (all-1g.18gb: MIG on and 56 MIG devices;
all-balanced: 32; all-disabled: MIG off, 8 whole GPUs). The median of
--runs rounds each (docs/benchmarks.md).

usage: bench/migmgr.py [--gpulet build/gpulet] [--runs 5]"""
import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "integration"))
from fakeapi import FakeAPI  # noqa: E402
from kubelet import FakeKubelet, load_stubs  # noqa: E402

LAYOUTS = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.18gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.18gb": 7}
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
"""
# the layout, the resource that shows it, and its devices on 8 GPUs
ROUND = [("all-1g.18gb", "nvidia.com/mig-1g.18gb", 56), ("all-balanced", "nvidia.com/mig-1g.18gb", 16),
         ("all-disabled", "nvidia.com/gpu", 8)]


def devices(kubelet, name):
    """The device count the last registration of name lists, or -1."""
    regs = [r for _, r in kubelet.registrations if r.resource_name == name]
    if not regs:
        return -1
    try:
        channel, stub = kubelet.plugin(regs[-1].endpoint)
        n = len(next(stub.ListAndWatch(kubelet.pb.Empty(), timeout=2)).devices)
        channel.close()
        return n
    except Exception:
        return -1


def done(api, since):
    """gpulet wrote state success after the label's change (a Node version
    after since + 1, the label's own; called with api.cond held). A fast
    change goes from pending to success within one write: the labels'
    changes fold (kube/sync.c)."""
    return any(v > since + 1 and coll == "/api/v1/nodes" and
               o["metadata"]["labels"].get("nvidia.com/mig.config.state") == "success"
               for v, coll, _, _, o in api.events)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpulet", default="build/gpulet")
    ap.add_argument("--runs", type=int, default=5)
    o = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpulet-migmgr-") as tmp:
        tmp = pathlib.Path(tmp)
        pb, pb_grpc = load_stubs(tmp / "stubs")
        kubelet = FakeKubelet(tmp / "kubelet", pb, pb_grpc)
        kubelet.start()
        api = FakeAPI("n1")
        (tmp / "layouts.yaml").write_text(LAYOUTS)
        p = subprocess.Popen([o.gpulet, "agent", "--simulate", "hgx-h200", "--mig-strategy", "mixed",
                              "--mig-parted-config", str(tmp / "layouts.yaml"), "--kubelet-root",
                              str(tmp / "kubelet"), "--kubeconfig", str(api.kubeconfig(tmp / "kc")),
                              "--node-name", "n1", "--no-metrics", "--status-socket", str(tmp / "s.sock")],
                             stderr=open(tmp / "agent.log", "w"), env=dict(os.environ, GPULET_SIM_CONTROL=str(tmp / "sim")))
        kubelet.wait_registrations(1, timeout=20)
        times = {name: ([], []) for name, _, _ in ROUND}
        try:
            for _ in range(o.runs):
                for name, resource, want in ROUND:
                    with api.cond:
                        since = api.version
                    t0 = time.monotonic()
                    api.set_label("nvidia.com/mig.config", name)
                    api.wait_for(lambda: done(api, since), name, timeout=30)
                    t1 = time.monotonic()
                    while devices(kubelet, resource) != want:
                        if time.monotonic() - t0 > 30:
                            raise SystemExit(f"{name}: {resource} never listed {want} devices")
                        time.sleep(0.005)
                    t2 = time.monotonic()
                    times[name][0].append((t1 - t0) * 1000)
                    times[name][1].append((t2 - t0) * 1000)
        finally:
            if os.environ.get("GPULET_BENCH_LOG"):
                print((tmp / "agent.log").read_text()[-6000:])
            p.terminate()
            p.wait()
            kubelet.stop()
            api.stop()
    print(f"{'layout':14} {'label->success ms':>18} {'label->advertised ms':>21}")
    for name, _, _ in ROUND:
        s, a = times[name]
        print(f"{name:14} {statistics.median(s):18.0f} {statistics.median(a):21.0f}")


if __name__ == "__main__":
    main()
