"""Issue 12's proof on a real GPU: a CUDA program runs in a root file system
holding only the C library, given exactly what gpulet gives it, and fails
without it. Twice: from a driver-mounts Allocate response (the grpcio
kubelet), and from `gpulet cdi generate`'s edits for device "0". The
process runs in new mount and PID namespaces, chrooted there, with the
environment a CUDA base image sets (LD_LIBRARY_PATH=/usr/local/nvidia/lib:
/usr/local/nvidia/lib64, PATH with /usr/local/nvidia/bin) and nothing else.
usage: [GPULET_LIBS=DIR] inject_check.py GPULET CUDA_PROBE"""
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from kubelet import FakeKubelet, load_stubs  # noqa: E402

GPULET, PROBE = sys.argv[1], sys.argv[2]
IMAGE_ENV = {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
             "PATH": "/usr/local/nvidia/bin:/usr/bin:/bin"}
ok = True


def check(what, cond, detail=""):
    global ok
    ok &= bool(cond)
    print(f"{'PASS' if cond else 'FAIL'}  {what}  {detail}", flush=True)


def libc_root(root):
    """A root file system with the C library (glibc's libraries and the
    loader) and the probe; no driver file."""
    for d in ("bin", "dev", "proc", "tmp", "lib64", "lib/x86_64-linux-gnu"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for lib in ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"):
        src = Path("/lib/x86_64-linux-gnu") / lib
        if src.exists():
            shutil.copy2(src.resolve(), root / "lib/x86_64-linux-gnu" / lib)
    shutil.copy2(Path("/lib64/ld-linux-x86-64.so.2").resolve(), root / "lib64/ld-linux-x86-64.so.2")
    shutil.copy2(PROBE, root / "bin/cuda_probe")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    print(f"root file system {root}: {files}")


def run_in(root, devices, mounts, env, argv):
    """argv in new mount and PID namespaces, chrooted at root, with the
    device nodes (host, container), read-only mounts (host, container) and
    environment given, as a runtime applies them."""
    lines = ["set -e"]
    for host, ctr in devices + mounts:
        target = shlex.quote(f"{root}{ctr}")
        lines.append(f"mkdir -p $(dirname {target}) && touch {target}")
        lines.append(f"mount --bind {shlex.quote(host)} {target}")
    for host, ctr in mounts:
        lines.append(f"mount -o remount,bind,ro {shlex.quote(f'{root}{ctr}')}")
    lines.append(f"mount -t proc proc {shlex.quote(str(root))}/proc")
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**IMAGE_ENV, **env}.items())
    # env -i clears the environment, then the host's chroot enters root.
    lines.append(f"exec env -i {envs} {shutil.which('chroot')} {shlex.quote(str(root))} "
                 + " ".join(shlex.quote(a) for a in argv))
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "sh", "-c",
                        "\n".join(lines)], capture_output=True, text=True, timeout=120)
    return r.returncode, (r.stdout + r.stderr).strip()


def prove(tag, tmp, devices, mounts, env):
    root = Path(tmp) / f"root-{tag}"
    libc_root(root)
    print(f"--- {tag}: {len(devices)} device node(s), {len(mounts)} mount(s), env {env}")
    for host, ctr in devices + mounts:
        print(f"    {host} -> {ctr}")
    rc, out = run_in(root, devices, mounts, env, ["/usr/local/nvidia/bin/nvidia-smi", "-L"])
    print(out)
    smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip()
    check(f"{tag}: nvidia-smi -L inside lists the GPU", rc == 0 and out.strip() == smi, f"rc {rc}")
    rc, out = run_in(root, devices, mounts, env, ["/bin/cuda_probe"])
    print(out)
    check(f"{tag}: the CUDA program runs inside", rc == 0 and "all correct" in out, f"rc {rc}")


def allocate(tmp):
    pb, pbg = load_stubs(Path(tmp) / "stubs")
    k = FakeKubelet(Path(tmp) / "kubelet", pb, pbg)
    k.start()
    env = dict(os.environ, LD_LIBRARY_PATH=os.environ.get("GPULET_LIBS", ""))
    agent = subprocess.Popen([GPULET, "agent", "--kubelet-root", str(k.root), "--no-metrics",
                              "--labels", "none", "--status-socket", f"{tmp}/status.sock",
                              "--device-list-strategy", "driver-mounts"],
                             stderr=open(f"{tmp}/agent.log", "w"), env=env)
    try:
        k.wait_registrations(1, timeout=30)
        channel, stub = k.plugin()
        devs = next(stub.ListAndWatch(pb.Empty())).devices
        t = time.perf_counter()
        r = stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
            devices_ids=[devs[0].ID])])).container_responses[0]
        print(f"Allocate with driver-mounts: {(time.perf_counter() - t) * 1e3:.2f} ms (first call)")
        lat = []
        for _ in range(200):
            t = time.perf_counter()
            stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
                devices_ids=[devs[0].ID])]))
            lat.append((time.perf_counter() - t) * 1e6)
        lat.sort()
        print(f"Allocate with driver-mounts, 200 calls: p50 {lat[100]:.0f} us, p99 {lat[198]:.0f} us, "
              f"{len(r.mounts)} mounts, {len(r.devices)} device specs")
        channel.close()
    finally:
        agent.terminate()
        agent.wait(timeout=30)
        k.stop()
    print(open(f"{tmp}/agent.log").read()[-1500:])
    return ([(d.host_path, d.container_path) for d in r.devices],
            [(m.host_path, m.container_path) for m in r.mounts], dict(r.envs))


def cdi(tmp):
    env = dict(os.environ, LD_LIBRARY_PATH=os.environ.get("GPULET_LIBS", ""))
    t = time.perf_counter()
    p = subprocess.run([GPULET, "cdi", "generate", "--format", "json"], capture_output=True,
                       text=True, env=env)
    print(f"gpulet cdi generate: {(time.perf_counter() - t) * 1e3:.1f} ms wall, rc {p.returncode} {p.stderr.strip()}")
    spec = json.loads(p.stdout)
    Path(tmp, "spec.json").write_text(p.stdout)
    dev = next(d for d in spec["devices"] if d["name"] == "0")
    common = spec["containerEdits"]
    nodes = common.get("deviceNodes", []) + dev["containerEdits"]["deviceNodes"]
    devices = [(n.get("hostPath", n["path"]), n["path"]) for n in nodes]
    mounts = [(m["hostPath"], m["containerPath"]) for m in common.get("mounts", [])]
    env = dict(e.split("=", 1) for e in common.get("env", []))
    print(f"CDI spec: {len(spec['devices'])} devices ({', '.join(d['name'] for d in spec['devices'])}), "
          f"{len(mounts)} mounts")
    return devices, mounts, env


with tempfile.TemporaryDirectory() as tmp:
    devices, mounts, env = allocate(tmp)
    prove("Allocate", tmp, devices, mounts, env)
    devices, mounts, env = cdi(tmp)
    prove("CDI", tmp, devices, mounts, env)
    root = Path(tmp) / "root-none"
    libc_root(root)
    rc, out = run_in(root, [], [], {}, ["/bin/cuda_probe"])
    print(out)
    check("without gpulet's edits the program finds no driver", rc != 0 and "no driver" in out, f"rc {rc}")
print("ALL PASS" if ok else "SOME CHECKS FAILED")
sys.exit(0 if ok else 1)
