"""The device plugin on a real GPU: gpulet agent against the driver's NVML,
driven by the grpcio fake kubelet. Checks registration, the GPUs' UUIDs and
NUMA nodes in ListAndWatch against nvidia-smi, and that Allocate's device
specs name device nodes that exist. usage: plugin_check.py GPULET"""
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from kubelet import FakeKubelet, load_stubs  # noqa: E402

gpulet = sys.argv[1]
ok = True


def check(what, cond, detail=""):
    global ok
    ok &= bool(cond)
    print(f"{'PASS' if cond else 'FAIL'}  {what}  {detail}")


with tempfile.TemporaryDirectory() as tmp:
    pb, pbg = load_stubs(Path(tmp) / "stubs")
    k = FakeKubelet(Path(tmp) / "kubelet", pb, pbg)
    k.start()
    t0 = time.monotonic()
    agent = subprocess.Popen([gpulet, "agent", "--kubelet-root", str(k.root), "--pass-device-specs",
                              "true", "--status-socket", f"{tmp}/status.sock"],
                             stderr=open(f"{tmp}/agent.log", "w"))
    t_reg, req = k.wait_registrations(1, timeout=30)
    print(f"start -> registered: {(t_reg - t0) * 1000:.1f} ms (real NVML)")
    check("Register", req.version == "v1beta1" and req.resource_name == "nvidia.com/gpu"
          and req.endpoint == "gpulet-nvidia-gpu.sock" and req.options.get_preferred_allocation_available,
          str(req).replace("\n", " "))
    smi = list(csv.reader(subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                                         capture_output=True, text=True).stdout.splitlines()))
    topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True).stdout
    channel, stub = k.plugin()
    stream = stub.ListAndWatch(pb.Empty())
    t_law = time.monotonic()
    devs = next(stream).devices
    # The agent registers once it knows the device IDs; NUMA nodes (memory
    # affinity costs ~9 ms on an H200) follow as a ListAndWatch update.
    while not all(d.topology.nodes for d in devs):
        devs = next(stream).devices
    print(f"NUMA nodes in ListAndWatch {(time.monotonic() - t_law) * 1000:.1f} ms after it opened")
    check("device count", len(devs) == len(smi), f"{len(devs)} vs nvidia-smi {len(smi)}")
    for d, row in zip(devs, smi):
        numa = [n.ID for n in d.topology.nodes]
        check(f"GPU {row[0]} ID", d.ID == row[1].strip(), f"{d.ID} vs {row[1].strip()}")
        check(f"GPU {row[0]} health/NUMA", d.health == "Healthy" and numa == [0],
              f"{d.health} NUMA {numa} (nvidia-smi topo NUMA Affinity: see below)")
    r = stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
        devices_ids=[devs[0].ID])])).container_responses[0]
    print("Allocate:", dict(r.envs), [(s.container_path, s.host_path, s.permissions) for s in r.devices])
    check("NVIDIA_VISIBLE_DEVICES", r.envs["NVIDIA_VISIBLE_DEVICES"] == devs[0].ID)
    for s in r.devices:
        check(f"device node {s.host_path} exists", os.path.exists(s.host_path))
    p = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=[d.ID for d in devs],
                                               allocation_size=1)]))
    check("GetPreferredAllocation", list(p.container_responses[0].deviceIDs) == [devs[0].ID])
    stream.cancel()
    k.restart()
    k.wait_registrations(2, timeout=5)
    check("re-registered after a kubelet restart", True)
    agent.terminate()
    agent.wait(timeout=10)
    check("SIGTERM exit 0 and socket removed", agent.returncode == 0 and
          not (k.dir / "gpulet-nvidia-gpu.sock").exists())
    k.stop()
    print(topo.splitlines()[0])
    print(topo.splitlines()[1])
    print(open(f"{tmp}/agent.log").read())
print("ALL PASS" if ok else "SOME CHECKS FAILED")
sys.exit(0 if ok else 1)
