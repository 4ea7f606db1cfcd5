"""Containers without the toolkit, on a real GPU (issues 12 and 21): a CUDA
program and nvidia-smi run in a root file system holding only the C
library, given exactly what gpulet gives it.

The edits come from a driver-mounts Allocate response (the grpcio kubelet)
and from `gpulet cdi generate`'s edits for device "0". The roots:
- debian: this machine's glibc, laid out as Debian and Ubuntu lay it out
  (multiarch, merged /usr);
- redhat: a glibc built as the Red Hat family builds it (/lib64 and
  /usr/lib64 its system directories; RH_GLIBC=DIR, made by
  tests/realgpu/rh_glibc.sh), merged /usr as on Fedora and UBI.
Each has an ld.so.cache made by its own ldconfig, and the environment an
image that is not CUDA-based has: PATH=/usr/bin:/bin, no LD_LIBRARY_PATH.
Once more with the CUDA images' environment, as before. Then what fails:
the old layout (--driver-layout nvidia) in such an image, and no edits.
The process runs in new mount and PID namespaces, chrooted.
usage: [GPULET_LIBS=DIR] RH_GLIBC=DIR inject_check.py GPULET CUDA_PROBE"""
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
RH_GLIBC = Path(os.environ["RH_GLIBC"])
PLAIN_ENV = {"PATH": "/usr/bin:/bin"}
CUDA_ENV = {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
            "PATH": "/usr/local/nvidia/bin:/usr/bin:/bin"}
GLIBC_LIBS = ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1")
LOADER = "ld-linux-x86-64.so.2"
AGENT_ENV = dict(os.environ, LD_LIBRARY_PATH=os.environ.get("GPULET_LIBS", ""))
ok = True


def check(what, cond, detail=""):
    global ok
    ok &= bool(cond)
    print(f"{'PASS' if cond else 'FAIL'}  {what}  {detail}", flush=True)


def merged_usr(root):
    """/bin, /lib and /lib64 as relative links into /usr, as merged-/usr
    distributions have them (relative: the host's tools stay in root)."""
    for d in ("usr/bin", "usr/lib", "usr/lib64", "etc", "dev", "proc", "tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "lib", "lib64"):
        (root / link).symlink_to(f"usr/{link}")
    shutil.copy2(PROBE, root / "usr/bin/cuda_probe")


def debian_root(root):
    merged_usr(root)
    libdir = root / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir()
    for lib in GLIBC_LIBS + (LOADER,):
        src = Path("/usr/lib/x86_64-linux-gnu") / lib
        if src.exists():
            shutil.copy2(src.resolve(), libdir / lib)
    (root / "usr/lib64" / LOADER).symlink_to(f"../lib/x86_64-linux-gnu/{LOADER}")
    subprocess.run(["ldconfig", "-r", str(root)], check=True, capture_output=True)


def redhat_root(root):
    merged_usr(root)
    for lib in GLIBC_LIBS + (LOADER,):
        shutil.copy2(RH_GLIBC / "usr/lib64" / lib, root / "usr/lib64" / lib)
    subprocess.run([str(RH_GLIBC / "sbin/ldconfig"), "-r", str(root)], check=True,
                   capture_output=True)


ROOTS = {"debian": debian_root, "redhat": redhat_root}


def make_root(tmp, name, layout):
    root = Path(tmp) / name
    ROOTS[layout](root)
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    print(f"{layout} root {root}: {files}")
    return root


def run_in(root, devices, mounts, env, argv):
    """argv in new mount and PID namespaces, chrooted at root, with the
    device nodes (host, container), read-only mounts (host, container) and
    environment given, as a runtime applies them."""
    lines = ["set -e"]
    for host, ctr in devices + mounts:
        target = shlex.quote(f"{root}{ctr}")
        lines.append(f'mkdir -p "$(dirname {target})" && touch {target}')
        lines.append(f"mount --bind {shlex.quote(host)} {target}")
    for host, ctr in mounts:
        lines.append(f"mount -o remount,bind,ro {shlex.quote(f'{root}{ctr}')}")
    lines.append(f"mount -t proc proc {shlex.quote(str(root))}/proc")
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    # env -i clears the environment, then the host's chroot enters root.
    lines.append(f"exec env -i {envs} {shutil.which('chroot')} {shlex.quote(str(root))} "
                 + " ".join(shlex.quote(a) for a in argv))
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "sh", "-c",
                        "\n".join(lines)], capture_output=True, text=True, timeout=120)
    return r.returncode, (r.stdout + r.stderr).strip()


def prove(tag, tmp, layout, edits, env):
    devices, mounts, given = edits
    root = make_root(tmp, f"root-{tag}-{layout}-{len(env)}".replace(" ", "_").replace(",", ""), layout)
    env = {**env, **given}
    print(f"--- {tag} in the {layout} root: {len(devices)} device node(s), {len(mounts)} mount(s), "
          f"env {env}")
    rc, out = run_in(root, devices, mounts, env, ["nvidia-smi", "-L"])
    print(out)
    smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip()
    check(f"{tag}, {layout} root, PATH {env['PATH']}: nvidia-smi -L lists the GPU",
          rc == 0 and out.strip() == smi, f"rc {rc}")
    rc, out = run_in(root, devices, mounts, env, ["/usr/bin/cuda_probe"])
    print(out)
    check(f"{tag}, {layout} root: the CUDA program runs", rc == 0 and "all correct" in out,
          f"rc {rc}")


def envs(r):
    """The response's envs map, whichever protobuf runtime reads it (the
    pure-Python one, for stubs of another version, sees its entries)."""
    return dict(r.envs.items()) if hasattr(r.envs, "items") else {e.key: e.value for e in r.envs}


def allocate(tmp):
    pb, pbg = load_stubs(Path(tmp) / "stubs")
    k = FakeKubelet(Path(tmp) / "kubelet", pb, pbg)
    k.start()
    agent = subprocess.Popen([GPULET, "agent", "--kubelet-root", str(k.root), "--no-metrics",
                              "--labels", "none", "--status-socket", f"{tmp}/status.sock",
                              "--device-list-strategy", "driver-mounts"],
                             stderr=open(f"{tmp}/agent.log", "w"), env=AGENT_ENV)
    try:
        k.wait_registrations(1, timeout=30)
        channel, stub = k.plugin()
        devs = next(stub.ListAndWatch(pb.Empty())).devices
        req = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
            devices_ids=[devs[0].ID])])
        r = stub.Allocate(req).container_responses[0]
        print(f"Allocate with driver-mounts: {len(r.mounts)} mounts, {len(r.devices)} device specs")
        channel.close()
    finally:
        agent.terminate()
        agent.wait(timeout=30)
        k.stop()
    print(open(f"{tmp}/agent.log").read()[-1500:])
    return ([(d.host_path, d.container_path) for d in r.devices],
            [(m.host_path, m.container_path) for m in r.mounts], envs(r))


def cdi(tmp, *flags):
    t = time.perf_counter()
    p = subprocess.run([GPULET, "cdi", "generate", "--format", "json", *flags],
                       capture_output=True, text=True, env=AGENT_ENV)
    print(f"gpulet cdi generate {' '.join(flags)}: {(time.perf_counter() - t) * 1e3:.1f} ms wall, "
          f"rc {p.returncode} {p.stderr.strip()}")
    spec = json.loads(p.stdout)
    dev = next(d for d in spec["devices"] if d["name"] == "0")
    common = spec["containerEdits"]
    nodes = common.get("deviceNodes", []) + dev["containerEdits"]["deviceNodes"]
    devices = [(n.get("hostPath", n["path"]), n["path"]) for n in nodes]
    mounts = [(m["hostPath"], m["containerPath"]) for m in common.get("mounts", [])]
    env = dict(e.split("=", 1) for e in common.get("env", []))
    print(f"CDI spec: {len(spec['devices'])} devices, {len(mounts)} mounts")
    return devices, mounts, env


with tempfile.TemporaryDirectory() as tmp:
    rh = make_root(tmp, "rh-loader", "redhat")
    rc, out = run_in(rh, [], [], PLAIN_ENV, [f"/lib64/{LOADER}", "--help"])
    print("the redhat root's loader:\n" + out[out.find("Shared library search path"):][:400])
    check("the redhat root's loader searches /lib64 and /usr/lib64 only",
          "/lib64 (system search path)" in out and "/usr/lib64 (system search path)" in out
          and "x86_64-linux-gnu" not in out, f"rc {rc}")
    edits = {"Allocate": allocate(tmp), "CDI": cdi(tmp)}
    for tag, e in edits.items():
        for layout in ROOTS:
            prove(tag, tmp, layout, e, PLAIN_ENV)
    prove("Allocate, CUDA image", tmp, "debian", edits["Allocate"], CUDA_ENV)
    # What fails: the old layout in an image that is not CUDA-based, and nothing.
    devices, mounts, env = cdi(tmp, "--driver-layout", "nvidia")
    print(f"the nvidia layout: {len(mounts)} mounts, the system layout {len(edits['CDI'][1])}")
    for layout in ROOTS:
        root = make_root(tmp, f"root-old-{layout}", layout)
        rc, out = run_in(root, devices, mounts, {**PLAIN_ENV, **env}, ["/usr/bin/cuda_probe"])
        print(out)
        check(f"the nvidia layout, {layout} root, no LD_LIBRARY_PATH: no driver",
              rc != 0 and "no driver" in out, f"rc {rc}")
        rc, out = run_in(root, [], [], PLAIN_ENV, ["/usr/bin/cuda_probe"])
        check(f"no edits, {layout} root: no driver", rc != 0 and "no driver" in out, f"rc {rc}")
print("ALL PASS" if ok else "SOME CHECKS FAILED")
sys.exit(0 if ok else 1)
