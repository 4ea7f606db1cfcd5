"""MPS on a real GPU: gpulet starts the real nvidia-cuda-mps-control for a
2-replica MPS resource; two clients, each launched with exactly the
environment and mounts of its own Allocate response (a private mount
namespace applies the mounts), allocate up to their pinned limit, fail
beyond it, and run a torch job at once; gpulet stops the daemon on exit.
Never changes the GPU's compute mode. usage: mps_check.py GPULET"""
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from kubelet import FakeKubelet, load_stubs  # noqa: E402

gpulet = sys.argv[1]
here = Path(__file__).resolve().parent
ok = True


def check(what, cond, detail=""):
    global ok
    ok &= bool(cond)
    print(f"{'PASS' if cond else 'FAIL'}  {what}  {detail}", flush=True)


def mps_processes():
    out = subprocess.run(["pgrep", "-a", "nvidia-cuda-mps"], capture_output=True, text=True).stdout
    return out.strip().splitlines()


def client(resp, name, seconds):
    """The client as the container runtime would start it: the response's
    mounts in a private mount namespace, its environment, nothing else."""
    binds = []
    for m in resp.mounts:
        binds.append(f"mkdir -p {shlex.quote(m.container_path)} && "
                     f"mount --bind {shlex.quote(m.host_path)} {shlex.quote(m.container_path)}")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in resp.envs.items())
    script = " && ".join(binds + [f"exec env {env} python3 {here / 'mps_client.py'} {name} {seconds}"])
    return subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


with tempfile.TemporaryDirectory() as tmp:
    check("no MPS daemon before", not mps_processes(), str(mps_processes()))
    pb, pbg = load_stubs(Path(tmp) / "stubs")
    k = FakeKubelet(Path(tmp) / "kubelet", pb, pbg)
    k.start()
    cfg = Path(tmp) / "config.yaml"
    cfg.write_text("version: v1\nsharing:\n  mps:\n    resources:\n"
                   "    - {name: nvidia.com/gpu, replicas: 2}\n")
    root = Path(tmp) / "mps"
    agent = subprocess.Popen([gpulet, "agent", "--kubelet-root", str(k.root), "--no-metrics",
                              "--labels", "none", "--status-socket", f"{tmp}/status.sock",
                              "--config-file", str(cfg), "--mps-root", str(root)],
                             stderr=open(f"{tmp}/agent.log", "w"))
    k.wait_registrations(1, timeout=30)
    channel, stub = k.plugin()
    stream = stub.ListAndWatch(pb.Empty())
    t0 = time.monotonic()
    devs = next(stream).devices
    while any(d.health != "Healthy" for d in devs):
        devs = next(stream).devices
    print(f"MPS resource healthy {(time.monotonic() - t0) * 1000:.0f} ms after ListAndWatch opened")
    check("two replicas", len(devs) == 2, str([d.ID for d in devs]))
    check("daemon running", any("nvidia-cuda-mps-control" in p for p in mps_processes()),
          str(mps_processes()))
    resps = [stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
        devices_ids=[d.ID])])).container_responses[0] for d in devs]
    for r in resps:
        print("Allocate:", dict(r.envs), [(m.host_path, m.container_path) for m in r.mounts])
    limit_mib = int(resps[0].envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].split("=")[1].rstrip("M"))
    # Alone first: what stops it is the limit, not the GPU's memory (half is free).
    alone = client(resps[0], "alone", 0).communicate(timeout=300)[0]
    print(alone)
    got = [l for l in alone.splitlines() if "allocated" in l]
    gib = int(got[0].split("allocated ")[1].split(" GiB")[0]) if got else -1
    check(f"a client alone stops at its pinned limit ({limit_mib} MiB), not at the GPU's memory",
          got and limit_mib / 1024 - 3 <= gib <= limit_mib / 1024, got[0] if got else alone)
    procs = [client(r, f"client{i}", 8) for i, r in enumerate(resps)]
    time.sleep(10)
    smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout
    print("nvidia-smi compute apps while both run:\n" + smi)
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for i, out in enumerate(outs):
        print(out)
        got = [l for l in out.splitlines() if "allocated" in l]
        gib = int(got[0].split("allocated ")[1].split(" GiB")[0]) if got else -1
        check(f"client{i} stops at its pinned limit ({limit_mib} MiB)",
              got and 0 < gib <= limit_mib / 1024 and gib >= limit_mib / 1024 - 3, got[0] if got else out)
        check(f"client{i} ran its job", "matmuls" in out)
    check("clients ran through MPS", "mps-server" in smi or "nvidia-cuda-mps-server" in
          " ".join(mps_processes()), smi)
    stream.cancel()
    channel.close()
    agent.terminate()
    agent.wait(timeout=30)
    time.sleep(1)
    check("agent exit 0", agent.returncode == 0)
    check("no MPS daemon after", not mps_processes(), str(mps_processes()))
    k.stop()
    print(open(f"{tmp}/agent.log").read())
print("ALL PASS" if ok else "SOME CHECKS FAILED")
sys.exit(0 if ok else 1)
