#!/usr/bin/python3
"""A claim prepared: gpulet beside NVIDIA's DRA kubelet plugin (issue 53),
on a real Kubernetes 1.36 (../shared/k8s-v1, or --kit DIR), one simulated
DGX H100, one driver at a time, for each kind of claim:
- gpu: a whole GPU (DeviceClass gpu.nvidia.com);
- timeslice: a whole GPU with NVIDIA's GpuConfig, TimeSlicing, interval Long;
- mps: a whole GPU with NVIDIA's GpuConfig, MPS (gpulet only: NVIDIA's runs
  its MPS daemon as a Deployment of its own image, which this offline kit
  cannot pull);
- mig: a 1g.10gb MIG device made for the claim on an H100 in MIG mode with
  none (gpulet --dra-mig '*'; gpulet only: NVIDIA's, behind its gate
  DynamicMIG, makes the device, then builds its CDI edits from the host's
  /proc/driver/nvidia/capabilities and /proc/devices and names the host's
  /dev/nvidia-caps, which a simulated node cannot give it without writing
  to this machine's /dev).
N pods of each kind, one after another, a busybox container each.

Both drivers are measured the same way: each registers in a directory of
its own, and this script registers with the kubelet in its place, a proxy
that forwards every call to the driver's socket unchanged and times it
(the kubelet's NodePrepareResources in, the driver's answer out; one more
hop on a Unix socket, the same for both). Pod scheduled → container
started is from a watch of the pod: its nodeName first set, then its phase
Running. Both drivers see the same simulator (`gpulet sim driver-root`:
its NVML, its nvidia-smi stand-in, the kit's device nodes); NVIDIA's gets
a no-op nvidia-cdi-hook, which its CDI specs name.

    sudo bench/dra_prepare_bench.py --nvidia /path/to/gpu-kubelet-plugin [--pods 20] [--gpulet build-release/gpulet]

NVIDIA's plugin is not shipped here: docs/benchmarks.md says how it was
built from its v25.12.0 source. Without --nvidia, gpulet alone."""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
PREPARE_V1BETA1 = "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources"
UNPREPARE = ("/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
             "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources")
LONG = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}
MPS = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "10Gi"}}


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def registration_stubs(out):
    d = out / "stubs"
    d.mkdir(exist_ok=True)
    shutil.copy(ROOT / "proto" / "pluginregistration" / "v1" / "api.proto", d / "pluginregistration.proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{d}", f"--python_out={d}",
                    "pluginregistration.proto"], check=True)
    sys.path.insert(0, str(d))
    import pluginregistration_pb2
    return pluginregistration_pb2


class Proxy(grpc.GenericRpcHandler):
    """Registers with the kubelet in the driver's place and forwards each
    call to the driver's own socket, timing NodePrepareResources."""

    def __init__(self, reg_pb, driver_reg_dir, kubelet_reg_dir, sock):
        self.reg_pb, self.sock, self.prepares, self.unprepares = reg_pb, sock, [], 0
        deadline = time.monotonic() + 60
        while not (found := sorted(Path(driver_reg_dir).glob("*.sock"))):
            if time.monotonic() > deadline:
                raise SystemExit(f"no registration socket in {driver_reg_dir}")
            time.sleep(0.05)
        self.reg = grpc.insecure_channel(f"unix://{found[0]}")
        while True:  # the socket comes before its server answers
            try:
                info = self.raw(self.reg, "/pluginregistration.Registration/GetInfo",
                                reg_pb.InfoRequest().SerializeToString(), timeout=5)
                break
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.info = reg_pb.PluginInfo.FromString(info)
        self.backend = grpc.insecure_channel(f"unix://{self.info.endpoint}")
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        self.server.add_generic_rpc_handlers([self])
        self.server.add_insecure_port(f"unix://{sock}")
        self.reg_sock = Path(kubelet_reg_dir) / found[0].name
        self.server.add_insecure_port(f"unix://{self.reg_sock}")
        self.server.start()

    @staticmethod
    def raw(channel, method, body, timeout=60):
        return channel.unary_unary(method)(body, timeout=timeout)

    def service(self, details):
        method = details.method
        if method.endswith("/NodeWatchResources"):
            def stream(body, ctx):
                try:
                    yield from self.backend.unary_stream(method)(body)
                except grpc.RpcError as e:
                    ctx.abort(e.code(), e.details() or "")
            return grpc.unary_stream_rpc_method_handler(stream)

        def unary(body, ctx):
            channel = self.reg if method.startswith("/pluginregistration.") else self.backend
            t0 = time.monotonic()
            try:
                out = self.raw(channel, method, body)
            except grpc.RpcError as e:
                ctx.abort(e.code(), e.details() or "")
            if method in (PREPARE, PREPARE_V1BETA1):
                self.prepares.append(time.monotonic() - t0)
            self.unprepares += method in UNPREPARE
            if method.endswith("/GetInfo"):  # the kubelet is to call the proxy
                info = self.reg_pb.PluginInfo.FromString(out)
                info.endpoint = str(self.sock)
                out = info.SerializeToString()
            return out
        return grpc.unary_unary_rpc_method_handler(unary)

    def stop(self):
        self.server.stop(0).wait()
        self.reg_sock.unlink(missing_ok=True)
        Path(self.sock).unlink(missing_ok=True)


def sched_to_running(cluster, name, objects):
    """(create → scheduled, scheduled → Running) in seconds, from a watch."""
    watch = subprocess.Popen(["kubectl", "get", "pods", "-w", "--field-selector", f"metadata.name={name}",
                              "-o", "jsonpath={.spec.nodeName} {.status.phase}{\"\\n\"}"],
                             stdout=subprocess.PIPE, text=True, env=cluster.env)
    time.sleep(0.5)
    begun = time.monotonic()
    cluster.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    scheduled = None
    try:
        for line in watch.stdout:
            node, _, phase = line.strip().rpartition(" ")
            now = time.monotonic()
            if node and scheduled is None:
                scheduled = now
            if phase == "Running":
                return scheduled - begun, now - scheduled
            if phase in ("Failed", "Succeeded"):
                raise SystemExit(f"pod {name}: {phase}: {cluster.kubectl('describe', 'pod', name)}")
        raise SystemExit(f"the watch on {name} ended")
    finally:
        watch.kill()
        watch.wait()


def objects(cluster, drakit, name, kind):
    if kind == "mig":
        req = drakit.request("v1", "mig", "mig.nvidia.com", ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"])
    else:
        req = drakit.request("v1", "gpu", "gpu.nvidia.com")
    spec = {"devices": {"requests": [req]}}
    sharing = {"timeslice": LONG, "mps": MPS}.get(kind)
    if sharing:
        spec["devices"]["config"] = [{"requests": [req["name"]], "opaque": {"driver": "gpu.nvidia.com", "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing}}}]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
                    "containers": [{"name": "c", "image": cluster.env["K8S_BUSYBOX_IMAGE"],
                                    "command": ["sleep", "3600"], "resources": {"claims": [{"name": "gpu"}]}}]}}
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
             "spec": {"spec": spec}}, pod]


def fresh(d):
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    return d


class Gpulet:
    name = "gpulet"

    def __init__(self, cluster, drakit, gpulet, scenario, args):
        self.cluster, self.base = cluster, Path(cluster.base)
        self.reg_dir = fresh(self.base / "bench-reg-gpulet")
        self.driver = drakit.Driver(cluster, "bench", scenario, "--kubelet-registry-dir", str(self.reg_dir), *args)
        self.driver.start()

    def pid(self):
        return self.driver.proc.pid

    def log_tail(self):
        return self.driver.log()[-3000:]

    def stop(self):
        self.driver.stop()


class Nvidia:
    name = "NVIDIA v25.12.0"

    def __init__(self, cluster, drakit, binary, scenario, gates):
        self.base = Path(cluster.base)
        root = self.base / "nvidia-driver-root"
        if not root.exists():
            subprocess.run([drakit.GPULET, "sim", "driver-root", str(root)], check=True, timeout=30)
            (root / "dev").symlink_to(Path(cluster.env["K8S_DEV_ROOT"]) / "dev")
            hook = root / "usr" / "bin" / "nvidia-cdi-hook"
            hook.write_text("#!/bin/sh\nexit 0\n")
            hook.chmod(0o755)
        self.reg_dir = fresh(self.base / "bench-reg-nvidia")  # no socket of a run before
        plugins = self.base / "bench-plugins-nvidia"
        plugins.mkdir(exist_ok=True)
        env = dict(cluster.env, GPULET_SIM_SCENARIO=scenario, NODE_NAME=cluster.node, NAMESPACE="default",
                   GPULET_SIM_CONTROL=str(self.base / "sim-nvidia.sock"))
        log = open(self.base / "nvidia-plugin.log", "w")
        self.proc = subprocess.Popen(
            [binary, "--kubeconfig", cluster.env["KUBECONFIG"], "--node-name", cluster.node,
             "--cdi-root", "/var/run/cdi", "--nvidia-driver-root", str(root),
             "--container-driver-root", str(root),
             "--nvidia-cdi-hook-path", str(root / "usr" / "bin" / "nvidia-cdi-hook"),
             "--kubelet-plugins-directory-path", str(plugins),
             "--kubelet-registrar-directory-path", str(self.reg_dir), "--feature-gates", gates,
             "--image-name", cluster.env["K8S_BUSYBOX_IMAGE"]],  # its MPS daemons' only: not used here
            stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()

    def pid(self):
        return self.proc.pid

    def log_tail(self):
        return (self.base / "nvidia-plugin.log").read_text()[-3000:]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def measure(cluster, drakit, reg_pb, driver, kinds, pods):
    """Each kind's N pods through the driver (already started): a row each."""
    proxy = Proxy(reg_pb, driver.reg_dir, Path(cluster.base) / "kubelet" / "plugins_registry",
                  Path(cluster.base) / f"bench-proxy-{os.getpid()}.sock")
    rows = []
    try:
        drakit.wait("the driver's slices", lambda: drakit.slice_devices(cluster), timeout=90)
        time.sleep(2)  # registered with the kubelet through the proxy
        for kind in kinds:
            proxy.prepares.clear()
            proxy.unprepares = 0
            sched, run = [], []
            for i in range(pods):
                name = f"bench-{kind}-{i}"
                s, r = sched_to_running(cluster, name, objects(cluster, drakit, name, kind))
                sched.append(s)
                run.append(r)
                if r > 5:  # what held it: the pod's events
                    print(f"{name}: {r:.1f} s to Running:\n" +
                          "\n".join(cluster.kubectl("describe", "pod", name).splitlines()[-12:]), flush=True)
                cluster.kubectl("delete", "pod", name, "--wait=true", "--timeout=120s")
                cluster.kubectl("delete", "resourceclaimtemplate", name)
                # The kubelet unprepares the claim after the pod is gone from
                # the API (its pod cleanup): the next pod, likely given the
                # same GPU, comes after it. NVIDIA's plugin refuses a device
                # whose last claim is still prepared, and the kubelet's retry
                # waits out a backoff (about 90 s here).
                drakit.wait("the claim unprepared", lambda: proxy.unprepares > i, timeout=120, every=0.05)
            rows.append((driver.name, kind, list(proxy.prepares), run, sched))
            print(f"{driver.name} {kind}: prepare p50 {statistics.median(proxy.prepares) * 1000:.1f} ms "
                  f"p99 {pct(proxy.prepares, 99) * 1000:.1f} ms ({len(proxy.prepares)} calls); "
                  f"scheduled to Running p50 {statistics.median(run) * 1000:.0f} ms p99 {pct(run, 99) * 1000:.0f} ms",
                  flush=True)
        rss = next(int(l.split()[1]) for l in open(f"/proc/{driver.pid()}/status") if l.startswith("VmRSS:"))
        rows.append((driver.name, "rss", rss / 1024))
    finally:
        proxy.stop()
    return rows


def slices_gone(cluster):
    cluster.kubectl("delete", "resourceslices", "--all", "--wait=true", check=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--kit", default=str(ROOT.parent / "shared" / "k8s-v1"))
    ap.add_argument("--gpulet", default=str(ROOT / "build-release" / "gpulet"))
    ap.add_argument("--nvidia", help="NVIDIA's gpu-kubelet-plugin v25.12.0, built from its source")
    ap.add_argument("--kinds", default="gpu,timeslice,mps,mig")
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    build = Path(args.gpulet).resolve().parent
    os.environ.update(GPULET_K8S=str(Path(args.kit).resolve()), GPULET_BUILD=str(build),
                      GPULET_BIN=str(Path(args.gpulet).resolve()))
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    import conftest  # noqa: E402
    import drakit  # noqa: E402
    reason = conftest.why_not()
    if reason:
        raise SystemExit(f"cannot run: {reason}")
    work = Path(tempfile.mkdtemp(prefix="gpulet-prepare-"))
    reg_pb = registration_stubs(work)
    up = subprocess.run([str(conftest.K8S / "cluster.sh"), "up", "--gpus", "8"], capture_output=True,
                        text=True, timeout=300)
    if up.returncode != 0:
        raise SystemExit(f"cluster.sh up failed:\n{up.stderr[-3000:]}")
    env = dict(os.environ)
    for line in up.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    cluster = conftest.Cluster(env)
    made = not drakit.CDI_DIR.exists()
    rows = []
    try:
        cluster.kubectl("apply", "-f", str(drakit.deviceclasses("v1")))
        mig_caps(cluster)
        whole = [k for k in kinds if k != "mig"]
        runs = [("gpulet", "dgx-h100", whole), ("gpulet", "h100-mig-empty", ["mig"] if "mig" in kinds else [])]
        if args.nvidia:  # not its MPS (above) nor its dynamic MIG (below)
            runs += [("nvidia", "dgx-h100", [k for k in whole if k != "mps"])]
        for who, scenario, these in runs:
            if not these:
                continue
            if who == "gpulet":
                driver = Gpulet(cluster, drakit, args.gpulet, scenario,
                                ["--dra-mig", "*"] if scenario != "dgx-h100" else [])
            else:
                driver = Nvidia(cluster, drakit, args.nvidia, scenario, "TimeSlicingSettings=true")
            try:
                rows += measure(cluster, drakit, reg_pb, driver, these, args.pods)
            except BaseException:
                print(f"{driver.name}'s log:\n{driver.log_tail()}", file=sys.stderr)
                raise
            finally:
                driver.stop()
                slices_gone(cluster)
    finally:
        drakit.remove_cdi_specs(made)
        subprocess.run([str(conftest.K8S / "cluster.sh"), "down", cluster.base], capture_output=True, timeout=300)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, {args.pods} pods of each kind, one after another")
    print("| driver | kind | NodePrepareResources p50 / p99 | scheduled → Running p50 / p99 |")
    print("|---|---|---|---|")
    for row in rows:
        if row[1] == "rss":
            print(f"| {row[0]} | RSS after its runs | {row[2]:.1f} MiB | |")
            continue
        who, kind, prep, run, _ = row
        print(f"| {who} | {kind} | {statistics.median(prep) * 1000:.1f} / {pct(prep, 99) * 1000:.1f} ms | "
              f"{statistics.median(run) * 1000:.0f} / {pct(run, 99) * 1000:.0f} ms |")


def mig_caps(cluster):
    """The capability nodes of GPU instances 1-7 of each GPU (as
    tests/e2e/test_dra_mig.py makes them)."""
    caps = Path(cluster.env["K8S_DEV_ROOT"]) / "dev" / "nvidia-caps"
    caps.mkdir(exist_ok=True)
    for gpu in range(8):
        for gi in range(1, 8):
            base = 3 + gpu * 135 + gi * 9
            for minor in (base, base + 1):
                if not (caps / f"nvidia-cap{minor}").exists():
                    os.mknod(caps / f"nvidia-cap{minor}", 0o20444, os.makedev(238, minor))


if __name__ == "__main__":
    main()
