"""Issue 10 on a real GPU: time-slicing with 4 replicas. gpulet advertises 4
replicas of the GPU; four CUDA processes, each started with the GPU of its
own Allocate response and placed in its own pod container's cgroup (a real
kubepods cgroup where the machine lets us make one, else a /proc tree of
cgroup files), share the GPU; the per-container series show each one's
memory, matching nvidia-smi --query-compute-apps, and leave when the
processes end. Then the cost of per-process sampling with 100 processes,
and what NVML reports across PID namespaces.
usage: [GPULET_LIBS=DIR] share_check.py GPULET CUDA_HOLD (GPULET_LIBS: where the
agent alone finds libmicrohttpd, on a machine without it)"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from kubelet import FakeKubelet, load_stubs  # noqa: E402

GPULET, HOLD = sys.argv[1], sys.argv[2]
METRICS = "127.0.0.1:19410"
AGENT_ENV = dict(os.environ, LD_LIBRARY_PATH=os.environ.get("GPULET_LIBS", ""))
CGROUP = Path("/sys/fs/cgroup")
LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$')
ok = True


def check(what, cond, detail=""):
    global ok
    ok &= bool(cond)
    print(f"{'PASS' if cond else 'FAIL'}  {what}  {detail}", flush=True)


class Pods:
    """Pod containers for processes: real kubepods cgroups (v2) where we
    may make them, else cgroup files in a /proc tree of our own."""

    def __init__(self, tmp):
        self.tmp = Path(tmp)
        self.logs = self.tmp / "containers"
        self.logs.mkdir()
        self.made = []
        self.real = (CGROUP / "cgroup.controllers").exists() and not (CGROUP / "kubepods").exists()
        if self.real:
            try:
                (CGROUP / "kubepods").mkdir()
                self.made.append(CGROUP / "kubepods")
            except OSError as e:
                print(f"cannot make a real kubepods cgroup ({e}): using a /proc tree of files")
                self.real = False
        self.proc_root = "/proc" if self.real else str(self.tmp / "proc")

    def start(self, name, argv, env):
        """Starts argv held before exec, places it in pod `name`, lets it run."""
        uid, cid = str(uuid.uuid4()), uuid.uuid4().hex + uuid.uuid4().hex
        p = subprocess.Popen(["sh", "-c", 'read x; exec "$@"', "sh", *argv], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.real:
            d = CGROUP / "kubepods" / f"pod{uid}" / cid
            d.mkdir(parents=True)
            self.made += [d.parent, d]
            (d / "cgroup.procs").write_text(str(p.pid))
        else:
            f = Path(self.proc_root) / str(p.pid) / "cgroup"
            f.parent.mkdir(parents=True)
            f.write_text(f"0::/kubepods/pod{uid}/{cid}\n")
        (self.logs / f"{name}_default_main-{cid}.log").symlink_to("/nonexistent")
        p.stdin.write("go\n")
        p.stdin.flush()
        return p

    def cleanup(self):
        for d in reversed(self.made):
            try:
                d.rmdir()
            except OSError as e:
                print(f"left {d}: {e}")


def scrape():
    try:
        text = urllib.request.urlopen(f"http://{METRICS}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m and m.group(1).startswith("gpulet_container_gpu_"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            out.setdefault(labels.get("pod", ""), {})[m.group(1)] = float(m.group(3))
        elif m and m.group(1) == "gpulet_process_sample_duration_seconds":
            out["_seconds"] = float(m.group(3))
    return out


def smi_apps():
    rows = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                           "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    return {int(r.split(",")[0]): int(r.split(",")[1]) for r in rows.strip().splitlines() if r}


def wait_for(fn, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.25)
    return fn()


def timeslicing(tmp):
    pb, pbg = load_stubs(Path(tmp) / "stubs")
    k = FakeKubelet(Path(tmp) / "kubelet", pb, pbg)
    k.start()
    cfg = Path(tmp) / "config.yaml"
    cfg.write_text("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                   "    - {name: nvidia.com/gpu, replicas: 4}\n")
    pods = Pods(tmp)
    print(f"pod containers: {'real cgroup v2 under ' + str(CGROUP / 'kubepods') if pods.real else 'a /proc tree of files'}")
    agent = subprocess.Popen([GPULET, "agent", "--kubelet-root", str(k.root), "--labels", "none",
                              "--status-socket", f"{tmp}/status.sock", "--config-file", str(cfg),
                              "--metrics-listen", METRICS, "--proc-root", pods.proc_root,
                              "--container-log-dir", str(pods.logs)],
                             stderr=open(f"{tmp}/agent.log", "w"), env=AGENT_ENV)
    procs = []
    try:
        k.wait_registrations(1, timeout=30)
        channel, stub = k.plugin()
        devs = next(stub.ListAndWatch(pb.Empty())).devices
        check("4 replicas advertised", len(devs) == 4, str([d.ID for d in devs]))
        for i, d in enumerate(devs):
            r = stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
                devices_ids=[d.ID])])).container_responses[0]
            gpu = r.envs["NVIDIA_VISIBLE_DEVICES"]
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
            procs.append(pods.start(f"share-{i}", [HOLD, str(1024 * (i + 1)), "1"], env))
        pids = [int(p.stdout.readline().split()[1]) for p in procs]
        print("client pids", pids)
        want = {f"share-{i}" for i in range(4)}
        got = wait_for(lambda: (lambda s: s if want <= set(s) else None)(scrape()), 15)
        smi = smi_apps()
        got = scrape()
        print("nvidia-smi --query-compute-apps (pid: MiB):", smi)
        for i, pid in enumerate(pids):
            series = got.get(f"share-{i}", {})
            mib = series.get("gpulet_container_gpu_memory_used_bytes", -1) / 2**20
            check(f"share-{i} (pid {pid}) memory matches nvidia-smi", pid in smi and abs(mib - smi[pid]) <= 1,
                  f"gpulet {mib:.0f} MiB, nvidia-smi {smi.get(pid)} MiB, "
                  f"SM {series.get('gpulet_container_gpu_utilization_ratio')}, "
                  f"processes {series.get('gpulet_container_gpu_processes')}")
        print(f"gpulet_process_sample_duration_seconds {got.get('_seconds')}")
        check("no unattributed process", "" not in got, str(got.get("")))
        for p in procs:
            p.stdin.write("q")
            p.stdin.flush()
            p.wait(timeout=30)
        left = wait_for(lambda: (lambda s: s if not (want & set(s)) else None)(scrape()), 5)
        check("ended processes leave the series", left is not None and not (want & set(left)), str(left))
        channel.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        agent.terminate()
        agent.wait(timeout=30)
        pods.cleanup()
        k.stop()
        print(open(f"{tmp}/agent.log").read()[-3000:])
    check("agent exit 0", agent.returncode == 0)


NVML_PIDS = """
import pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
print(sorted(p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)))
"""


def pid_namespaces():
    """What NVML says of PIDs when the caller and the process are in
    different PID namespaces (hostPID or not, for the DaemonSet)."""
    if not shutil.which("unshare"):
        print("no unshare: PID namespace check skipped")
        return
    outside = subprocess.Popen([HOLD, "64"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    outside.stdout.readline()
    host = subprocess.run([sys.executable, "-c", NVML_PIDS], capture_output=True, text=True)
    inner = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", NVML_PIDS],
                           capture_output=True, text=True)
    print(f"process {outside.pid} in the host's namespace: NVML called from the host lists "
          f"{host.stdout.strip()}; from a new PID namespace, {inner.stdout.strip() or inner.stderr.strip()[-300:]}")
    outside.stdin.write("q")
    outside.stdin.flush()
    outside.wait(timeout=30)
    script = (f"sleep 60 | {HOLD} 64 & sleep 4; echo inner-pid $!; "
              f"{sys.executable} -c '{NVML_PIDS}'; sleep 4; kill $!")
    inside = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(6)
    host = subprocess.run([sys.executable, "-c", NVML_PIDS], capture_output=True, text=True)
    out = inside.communicate(timeout=60)[0]
    print(f"a process in a new PID namespace: from inside, {' '.join(out.split())}; "
          f"from the host, {host.stdout.strip()}")


def read_cpu(pid):
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def agent_run(tmp, pods, extra, seconds=12):
    """Runs the agent alone on the GPU; returns the samples it reported and
    its CPU seconds per wall second after the first sample."""
    agent = subprocess.Popen([GPULET, "agent", "--kubelet-root", f"{tmp}/kubelet-none", "--labels", "none",
                              "--status-socket", f"{tmp}/status2.sock", "--metrics-listen", METRICS,
                              "--proc-root", pods.proc_root, "--container-log-dir", str(pods.logs), *extra],
                             stderr=open(f"{tmp}/agent2.log", "w"), env=AGENT_ENV)
    try:
        first = wait_for(lambda: (lambda s: s if s.get("_total") else None)(scrape_all()), 20)
        if not first:
            raise AssertionError(open(f"{tmp}/agent2.log").read()[-2000:])
        cpu0, t0 = read_cpu(agent.pid), time.monotonic()
        samples = []
        while time.monotonic() - t0 < seconds:
            samples.append(scrape_all())
            time.sleep(1)
        cpu = (read_cpu(agent.pid) - cpu0) / (time.monotonic() - t0)
        return first, samples, cpu
    finally:
        agent.terminate()
        agent.wait(timeout=30)


def scrape_all():
    try:
        text = urllib.request.urlopen(f"http://{METRICS}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    out = {"_pods": set()}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        if m.group(1) == "gpulet_process_sample_duration_seconds":
            out["_procs"] = float(m.group(3))
        elif m.group(1) == "gpulet_sample_duration_seconds":
            out["_total"] = float(m.group(3))
        elif m.group(1) == "gpulet_container_gpu_memory_used_bytes":
            pod = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")).get("pod", "")
            out["_pods"].add(pod)
            out.setdefault("_mem", {})[pod] = float(m.group(3))
    return out


def nvml_cost(n_expected):
    """The two NVML calls per GPU per sample, with the processes running."""
    import ctypes
    nv = ctypes.CDLL("libnvidia-ml.so.1")
    nv.nvmlInit_v2()
    h = ctypes.c_void_p()
    nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))

    class Info(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("mem", ctypes.c_ulonglong), ("gi", ctypes.c_uint),
                    ("ci", ctypes.c_uint)]

    class Util(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("ts", ctypes.c_ulonglong), ("sm", ctypes.c_uint),
                    ("mem", ctypes.c_uint), ("enc", ctypes.c_uint), ("dec", ctypes.c_uint)]
    infos, utils = (Info * 512)(), (Util * 4096)()
    count = ctypes.c_uint(512)
    rc = nv.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(count), infos)
    print(f"nvmlDeviceGetComputeRunningProcesses_v3: rc {rc}, {count.value} processes (want {n_expected})")
    t = time.perf_counter()
    for _ in range(200):
        count.value = 512
        nv.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(count), infos)
    procs_us = (time.perf_counter() - t) / 200 * 1e6
    ucount = ctypes.c_uint(0)
    rc0 = nv.nvmlDeviceGetProcessUtilization(h, None, ctypes.byref(ucount), ctypes.c_ulonglong(0))
    print(f"nvmlDeviceGetProcessUtilization(NULL): rc {rc0}, count {ucount.value}")
    last = 0
    ucount.value = 4096
    rc = nv.nvmlDeviceGetProcessUtilization(h, utils, ctypes.byref(ucount), ctypes.c_ulonglong(0))
    print(f"nvmlDeviceGetProcessUtilization(since 0): rc {rc}, {ucount.value} samples")
    if ucount.value:
        last = max(utils[i].ts for i in range(ucount.value))
    time.sleep(1)
    t = time.perf_counter()
    rcs = {}
    for _ in range(200):
        ucount.value = 4096
        rc = nv.nvmlDeviceGetProcessUtilization(h, utils, ctypes.byref(ucount), ctypes.c_ulonglong(last))
        rcs[rc] = rcs.get(rc, 0) + 1
    util_us = (time.perf_counter() - t) / 200 * 1e6
    print(f"per call through ctypes: GetComputeRunningProcesses_v3 {procs_us:.1f} us, "
          f"GetProcessUtilization {util_us:.1f} us (return codes {rcs})")
    nv.nvmlShutdown()


def cost(tmp, n=100):
    """Per-process sampling at 1 s with n processes, each in its own pod."""
    pods = Pods(tmp)
    procs = []
    try:
        t0 = time.monotonic()
        procs = [pods.start(f"p{i:03d}", [HOLD, "8"], dict(os.environ)) for i in range(n)]
        pids = [int(p.stdout.readline().split()[1]) for p in procs]
        print(f"{len(pids)} CUDA processes up in {time.monotonic() - t0:.1f} s")
        nvml_cost(n)
        # on, off, on: the order of the runs must not decide the difference
        for label, extra in (("on", []), ("off", ["--process-metrics", "false"]), ("on again", [])):
            first, runs, cpu = agent_run(tmp, pods, extra)
            steady = sorted(s["_procs"] for s in runs if "_procs" in s)
            total = sorted(s["_total"] for s in runs if "_total" in s)
            print(f"process metrics {label}: process part median "
                  f"{steady[len(steady) // 2] * 1e3 if steady else 0:.2f} ms (first {first.get('_procs', 0) * 1e3:.2f} ms), "
                  f"whole sample median {total[len(total) // 2] * 1e3:.2f} ms "
                  f"(min {total[0] * 1e3:.2f}, max {total[-1] * 1e3:.2f}), agent CPU {cpu * 100:.2f}%")
            if label != "on":
                continue
            named = runs[-1]["_pods"] - {""}
            check(f"{n} containers named", len(named) == n,
                  f"{len(named)} named, unattributed: {'' in runs[-1]['_pods']}")
            smi = smi_apps()
            mem = runs[-1].get("_mem", {})
            diffs = [abs(mem.get(f"p{i:03d}", -1) / 2**20 - smi.get(pid, -2)) for i, pid in enumerate(pids)]
            check(f"all {n} agree with nvidia-smi", max(diffs) <= 1, f"largest difference {max(diffs):.1f} MiB")
    finally:
        for p in procs:
            try:
                p.stdin.write("q")
                p.stdin.flush()
            except OSError:
                pass
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        pods.cleanup()


with tempfile.TemporaryDirectory() as tmp:
    timeslicing(tmp)
print("\n=== per-process sampling cost with 100 processes")
with tempfile.TemporaryDirectory() as tmp:
    cost(tmp)
print("\n=== PID namespaces")
pid_namespaces()
print("ALL PASS" if ok else "SOME CHECKS FAILED")
sys.exit(0 if ok else 1)
