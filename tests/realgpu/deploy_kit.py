"""deploy/ as shipped, on the GPU machine's real Kubernetes 1.36 (the kit
of ../shared/k8s-v1, started by deploy_kit.sh): gpulet's image, imported
into the kit's containerd, installed with `kubectl apply -k` of deploy/
(the MPS config in its ConfigMap) and then of deploy/dra. The overlays
change only what the kit needs: the image's tag; the host's network and the
API server's address (the kit's pods have only loopback, so no Service IP
reaches it), with the container port dropped so that a rolling update's
second pod fits beside the first; and the kubelet's directories, which
follow the kit's --root-dir. Nothing else: no --mps-control, no driver
paths, no --simulate.

A. MPS: a CUDA job (cuda_tick, in a plain glibc image) holding a replica
   of nvidia.com/gpu runs through `kubectl rollout restart`, a SIGKILL of
   gpulet's container and a change of the MPS limits in the ConfigMap,
   sampled all along (allocatable, control daemons, servers).
B. Time-slicing: the node labelled with the shipped config time-sliced-4;
   two CUDA jobs share the GPU.
C. DRA: deploy/dra; a pod with a ResourceClaim of gpu.nvidia.com runs a
   CUDA job.
Nothing here changes the card's settings; the MPS daemons are quit at the
end. Writes its record to $OUT (kit.json, the gpulet pods' logs).
usage: deploy_kit.py KIT_ENV_FILE (root; exit 1 on a failure)"""
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("OUT", "/tmp/gpulet-real"))
ENV = dict(os.environ)
for line in Path(sys.argv[1]).read_text().splitlines():
    if line.startswith("export "):
        k, v = line[7:].split("=", 1)
        ENV[k] = v.strip("'\"")
BASE, NODE = ENV["K8S_BASE"], ENV["K8S_NODE"]
record = {"checks": {}}
failed = 0


def check(what, cond, detail=""):
    global failed
    failed += not cond
    record["checks"][what] = bool(cond)
    print(f"{'ok  ' if cond else 'FAIL'} kit: {what}{'' if cond else ': ' + str(detail)[-3000:]}",
          flush=True)
    return cond


def k(*args, stdin=None, check_rc=True):
    p = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, env=ENV,
                       timeout=180)
    if check_rc and p.returncode:
        raise RuntimeError(f"kubectl {' '.join(args)}: {p.stderr}")
    return p.stdout


def get(*args):
    return json.loads(k("get", "-o", "json", *args))


def wait(what, fn, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = fn()
        except (RuntimeError, KeyError, IndexError, json.JSONDecodeError):
            v = None
        if v:
            return v
        time.sleep(1)
    return check(what, False, "timed out")


def allocatable(res="nvidia.com/gpu"):
    return get("node", NODE)["status"]["allocatable"].get(res)


def current_pod():
    pods = [p for p in get("pods", "-n", "gpulet")["items"] if not p["metadata"].get("deletionTimestamp")]
    return max(pods, key=lambda p: p["metadata"]["creationTimestamp"]) if pods else None


def logs():
    p = current_pod()
    return k("logs", "-n", "gpulet", p["metadata"]["name"], check_rc=False) if p else ""


def save_logs(tag):
    for p in get("pods", "-n", "gpulet")["items"]:
        name = p["metadata"]["name"]
        (OUT / f"gpulet-{tag}-{name}.log").write_text(
            k("logs", "-n", "gpulet", name, check_rc=False) +
            "\n--- previous ---\n" + k("logs", "-n", "gpulet", name, "--previous", check_rc=False))


def mps_processes():
    """(control daemons, servers) running: their names are longer than a
    process name (15 characters), so their command lines are read."""
    daemons = servers = 0
    for pid in os.listdir("/proc"):
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except (OSError, ValueError):
            continue
        prog = os.path.basename(args[0].decode(errors="replace"))
        daemons += prog == "nvidia-cuda-mps-control" and b"-f" in args[1:]
        servers += prog == "nvidia-cuda-mps-server"
    return daemons, servers


server = k("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
API_PORT = server.rsplit(":", 1)[1]
DAEMONSET = f"""
  - target: {{kind: DaemonSet, name: gpulet}}
    patch: |
      - {{op: remove, path: /spec/template/spec/containers/0/ports}}
      - {{op: replace, path: /spec/template/spec/containers/0/livenessProbe/httpGet/port, value: 9400}}
      - {{op: replace, path: /spec/template/spec/containers/0/readinessProbe/httpGet/port, value: 9400}}
  - patch: |
      apiVersion: apps/v1
      kind: DaemonSet
      metadata: {{name: gpulet, namespace: gpulet}}
      spec:
        template:
          spec:
            hostNetwork: true
            containers:
              - name: gpulet
                env:
                  - {{name: KUBERNETES_SERVICE_HOST, value: "127.0.0.1"}}
                  - {{name: KUBERNETES_SERVICE_PORT, value: "{API_PORT}"}}
            volumes:
              - {{name: pod-resources, hostPath: {{path: {BASE}/kubelet/pod-resources, type: Directory}}}}
"""
DRA_PATHS = f"""
  - target: {{kind: DaemonSet, name: gpulet}}
    patch: |
      - {{op: add, path: /spec/template/spec/containers/0/args/-, value: --kubelet-registry-dir}}
      - {{op: add, path: /spec/template/spec/containers/0/args/-, value: {BASE}/kubelet/plugins_registry}}
      - {{op: add, path: /spec/template/spec/containers/0/args/-, value: --dra-plugin-dir}}
      - {{op: add, path: /spec/template/spec/containers/0/args/-, value: {BASE}/kubelet/plugins/gpu.nvidia.com}}
  - patch: |
      apiVersion: apps/v1
      kind: DaemonSet
      metadata: {{name: gpulet, namespace: gpulet}}
      spec:
        template:
          spec:
            containers:
              - name: gpulet
                volumeMounts:
                  - {{name: plugins-registry, mountPath: {BASE}/kubelet/plugins_registry}}
                  - {{name: plugins, mountPath: {BASE}/kubelet/plugins}}
            volumes:
              - {{name: plugins-registry, hostPath: {{path: {BASE}/kubelet/plugins_registry, type: DirectoryOrCreate}}}}
              - {{name: plugins, hostPath: {{path: {BASE}/kubelet/plugins, type: DirectoryOrCreate}}}}
"""


def mps_config(limit=None):
    extra = f"\\n        memoryLimit: {limit}" if limit else ""
    return ("version: v1\\nflags:\\n  plugin:\\n    deviceListStrategy: driver-mounts\\nsharing:\\n"
            f"  mps:\\n    resources:\\n      - name: nvidia.com/gpu\\n        replicas: 2{extra}\\n")


def write_overlay(name, deploy, default=None, dra=False):
    d = Path(BASE) / name
    d.mkdir(exist_ok=True)
    rel = os.path.relpath(SRC / deploy, d)
    text = ("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            f"resources: [{rel}]\nimages: [{{name: localhost/gpulet, newTag: test}}]\n")
    if default:
        text += ("configMapGenerator:\n  - name: gpulet-config\n    namespace: gpulet\n"
                 "    behavior: merge\n    options: {disableNameSuffixHash: true}\n"
                 f"    literals:\n      - \"default={default}\"\n")
    text += "patches:" + DAEMONSET + (DRA_PATHS if dra else "")
    (d / "kustomization.yaml").write_text(text)
    return str(d)


def job(name, seconds, resources=None, claims=None):
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "localhost/cuda-tick:local",
                            "command": ["/cuda_tick", str(seconds)]}]}
    if resources:
        spec["containers"][0]["resources"] = {"limits": resources}
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": claims}]
        spec["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    k("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "Pod",
                                             "metadata": {"name": name}, "spec": spec}))


def finished(name, timeout):
    wait(f"{name} finished", lambda: get("pod", name)["status"].get("phase") in ("Succeeded", "Failed"),
         timeout)
    st = get("pod", name)["status"]
    text = k("logs", name, check_rc=False)
    (OUT / f"job-{name}.log").write_text(text)
    return st.get("phase"), text


class Sampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.stop, self.rows = threading.Event(), []

    def run(self):
        while not self.stop.is_set():
            try:
                a = allocatable()
            except Exception:  # noqa: BLE001 (an API hiccup is a sample lost)
                a = "?"
            self.rows.append((time.monotonic(), a, *mps_processes()))
            time.sleep(0.5)


def phase_mps():
    overlay = write_overlay("deploy-mps", "deploy", mps_config())
    k("label", "node", NODE, "gpulet.io/gpu-node=true", "--overwrite")
    t0 = time.monotonic()
    k("apply", "-k", overlay)
    ready = lambda: (p := current_pod()) and all(c.get("ready") for c in p["status"].get("containerStatuses", [])) \
        and p["status"].get("containerStatuses")  # noqa: E731
    if not wait("the gpulet pod is Ready", ready, 120):
        raise RuntimeError("the gpulet pod never became Ready: " +
                           k("-n", "gpulet", "describe", "pods", check_rc=False)[-4000:] +
                           k("get", "events", "-A", check_rc=False)[-3000:])
    record["deploy_ready_s"] = round(time.monotonic() - t0, 1)
    check("MPS: nvidia.com/gpu allocatable 2 (2 replicas of the H200)",
          wait("allocatable 2", lambda: allocatable() == "2", 60), allocatable())
    pod = current_pod()
    check("the gpulet pod has not restarted", pod["status"]["containerStatuses"][0]["restartCount"] == 0,
          k("logs", "-n", "gpulet", pod["metadata"]["name"], "--previous", check_rc=False))
    check("the MPS daemon is up", "MPS daemon for nvidia.com/gpu is up" in logs(), logs()[-3000:])
    job("mps-job", 100, {"nvidia.com/gpu": 1})
    wait("the MPS job started", lambda: "started" in k("logs", "mps-job", check_rc=False), 90)
    started = k("logs", "mps-job", check_rc=False)
    check("the job is an MPS client of gpulet's daemon", "MPS pipe /" in started, started)
    sampler = Sampler()
    sampler.start()
    time.sleep(10)
    # 1. a rolling update (maxSurge: the new pod takes over from the old)
    old = current_pod()["metadata"]["name"]
    t = time.monotonic()
    k("-n", "gpulet", "rollout", "restart", "ds/gpulet")
    k("-n", "gpulet", "rollout", "status", "ds/gpulet", "--timeout=150s")
    wait("a new pod adopted the daemon",
         lambda: current_pod()["metadata"]["name"] != old and "is up, adopted" in logs(), 90)
    record["rollout_s"] = round(time.monotonic() - t, 1)
    # The old pod hands over, or (the DaemonSet controller may end it as
    # the new one starts) is gone before it can: either way the new one
    # goes on, adopting the daemon, and is not restarted.
    text = logs()
    record["rollout_hand_over"] = ("handed over" if "took over from the gpulet agent" in text else
                                   "old pod gone first" if "stopped before it handed over" in text else "?")
    check("the new pod took over, or went on once the old one was gone",
          record["rollout_hand_over"] != "?" and
          current_pod()["status"]["containerStatuses"][0]["restartCount"] == 0, text[-3000:])
    save_logs("rollout")
    time.sleep(5)
    # 2. SIGKILL of gpulet's container (its process, from the host)
    pid = subprocess.run(["pgrep", "-f", "^/usr/bin/gpulet agent"], capture_output=True,
                         text=True).stdout.split()
    check("one gpulet agent runs", len(pid) == 1, pid)
    name = current_pod()["metadata"]["name"]
    subprocess.run(["kill", "-9", *pid])
    wait("the container restarted and adopted the daemon",
         lambda: get("pod", name, "-n", "gpulet")["status"]["containerStatuses"][0]["restartCount"] == 1
         and "is up, adopted" in k("logs", "-n", "gpulet", name, check_rc=False), 120)
    save_logs("sigkill")
    time.sleep(5)
    # 3. the MPS limits changed in the ConfigMap, applied live
    k("apply", "-k", write_overlay("deploy-mps", "deploy", mps_config("8Gi")))
    wait("the new config was applied", lambda: logs().count("node config: applied 'default'") >= 2, 60)
    phase, text = finished("mps-job", 200)
    sampler.stop.set()
    sampler.join()
    save_logs("mps")
    gaps = [l for l in text.splitlines() if l.startswith("done:")]
    record["mps_job"] = gaps[0] if gaps else text[-500:]
    check("the MPS job ran through all three with no error", phase == "Succeeded" and gaps, text[-2000:])
    rows = sampler.rows
    record["samples"] = len(rows)
    record["allocatable_seen"] = sorted({r[1] for r in rows}, key=str)
    record["control_daemons_seen"] = sorted({r[2] for r in rows})
    record["servers_seen"] = sorted({r[3] for r in rows})
    check("one MPS control daemon throughout", record["control_daemons_seen"] == [1], rows[-5:])
    check("one MPS server throughout", record["servers_seen"] == [1], rows[-5:])
    check("allocatable never below 2", set(record["allocatable_seen"]) <= {"2", "?"}, rows)


def phase_timeslicing():
    k("label", "node", NODE, "nvidia.com/device-plugin.config=time-sliced-4", "--overwrite")
    check("time-slicing: nvidia.com/gpu allocatable 4 (the shipped time-sliced-4)",
          wait("allocatable 4", lambda: allocatable() == "4", 90), allocatable())
    job("ts-a", 20, {"nvidia.com/gpu": 1})
    job("ts-b", 20, {"nvidia.com/gpu": 1})
    for name in ("ts-a", "ts-b"):
        phase, text = finished(name, 120)
        check(f"time-sliced job {name} ran on the GPU, not through MPS",
              phase == "Succeeded" and "MPS pipe none" in text and "0 errors" in text, text[-1500:])
    # the MPS daemon has no client left and no resource: gpulet ends it
    check("the MPS daemon ended once time-slicing replaced MPS",
          wait("no MPS daemon", lambda: mps_processes() == (0, 0), 60))
    save_logs("timeslicing")


def phase_dra():
    k("delete", "-k", str(Path(BASE) / "deploy-mps"), "--wait=true", "--timeout=90s", check_rc=False)
    k("label", "node", NODE, "nvidia.com/device-plugin.config-", check_rc=False)
    wait("the device plugin's pod went", lambda: k("get", "ns", "gpulet", check_rc=False) == "", 120)
    overlay = write_overlay("deploy-dra", "deploy/dra", dra=True)
    k("apply", "-k", overlay)
    wait("the DRA ResourceSlice is published", lambda: [s for s in get("resourceslices")["items"]
                                                      if s["spec"].get("nodeName") == NODE], 120)
    slices = [s for s in get("resourceslices")["items"] if s["spec"].get("nodeName") == NODE]
    devices = [d for s in slices for d in s["spec"].get("devices", [])]
    record["dra_devices"] = [d["name"] for d in devices]
    k("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com"}}]}}}}))
    job("dra-job", 20, claims="one-gpu")
    phase, text = finished("dra-job", 180)
    check("a DRA pod ran a CUDA job on the claimed H200", phase == "Succeeded" and "0 errors" in text,
          text[-1500:] + k("describe", "pod", "dra-job", check_rc=False)[-2000:] + logs()[-2000:])
    save_logs("dra")
    k("delete", "pod", "dra-job", "--wait=true", "--timeout=60s", check_rc=False)
    k("delete", "resourceclaimtemplate", "one-gpu", check_rc=False)
    k("delete", "-k", overlay, "--wait=true", "--timeout=90s", check_rc=False)


try:
    for phase in (phase_mps, phase_timeslicing, phase_dra):
        try:
            phase()
        except Exception as e:  # noqa: BLE001 (the record says which phase broke)
            check(f"{phase.__name__} ran to its end", False, str(e))
            save_logs(phase.__name__)
            if phase is phase_mps and not record.get("deploy_ready_s"):
                break  # gpulet never came up: nothing after can pass
finally:
    for name in ("mps-job", "ts-a", "ts-b", "dra-job"):
        k("delete", "pod", name, "--wait=false", check_rc=False)
    (OUT / "kit.json").write_text(json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))
print(f"kit: {'all passed' if not failed else f'{failed} failed'}")
sys.exit(1 if failed else 0)
