"""gpulet doctor on the real GPU machine, read-only: first as the machine is
(no kubelet, no agent), then beside a grpcio kubelet, its PodResources and
a running agent on the real NVML. Prints both reports and the wall time of
20 runs. usage: doctor_check.py GPULET OUT"""
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from kubelet import FakeKubelet, FakePodResources, load_podresources_stubs, load_stubs  # noqa: E402

gpulet, out = sys.argv[1], Path(sys.argv[2])


def doctor(*args, fmt="text"):
    t = time.perf_counter()
    p = subprocess.run([gpulet, "doctor", "-o", fmt, *args], capture_output=True, text=True,
                       timeout=120)
    return p, time.perf_counter() - t


p, _ = doctor()
print(p.stdout, p.stderr, f"exit {p.returncode}", sep="\n")
(out / "doctor-bare.txt").write_text(p.stdout)

with tempfile.TemporaryDirectory() as tmp:
    k = FakeKubelet(Path(tmp) / "kubelet", *load_stubs(Path(tmp) / "stubs"))
    k.start()
    pr = FakePodResources(Path(tmp) / "kubelet", *load_podresources_stubs(Path(tmp) / "pr"))
    pr.start()
    # One pod holding the real GPU, for the PodResources List check.
    uuid = json.loads(subprocess.run([gpulet, "list", "-o", "json"], capture_output=True,
                                     text=True, check=True).stdout)["gpus"][0]["uuid"]
    pr.pods = [("train-0", "ml", "main", "nvidia.com/gpu", [uuid])]
    agent = subprocess.Popen([gpulet, "agent", "--kubelet-root", str(k.root), "--no-metrics",
                              "--status-socket", f"{tmp}/status.sock", "--labels", "none"],
                             stderr=open(f"{tmp}/agent.log", "w"))
    k.wait_registrations(1, timeout=30)
    time.sleep(0.5)
    args = ["--kubelet-root", str(k.root), "--status-socket", f"{tmp}/status.sock"]
    p, _ = doctor(*args)
    print(p.stdout, p.stderr, f"exit {p.returncode}", sep="\n")
    (out / "doctor-node.txt").write_text(p.stdout)
    p, _ = doctor(*args, fmt="json")
    (out / "doctor-node.json").write_text(p.stdout)
    times = [doctor(*args)[1] * 1000 for _ in range(20)]
    checks = {c["id"]: round(c["seconds"] * 1000, 2) for c in json.loads(p.stdout)["checks"]}
    print(f"doctor wall time, 20 runs: median {statistics.median(times):.1f} ms, "
          f"min {min(times):.1f}, max {max(times):.1f}")
    print("per check (ms):", checks)
    agent.terminate()
    agent.wait(timeout=10)
    k.stop()
    pr.stop()
