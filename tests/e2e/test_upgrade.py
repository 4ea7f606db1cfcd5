"""What a crash, a rollout to a new image and a reload of the gpulet
DaemonSet do to running MPS jobs (issue 38), on the real 1.36 node: the
DaemonSet from deploy/dra (the image as test_image imports it) serving GPUs
0-3 through DRA (GPU 0 published for shares) and 4-7 through the device
plugin with MPS, on a stand-in node's / (test_image's node_root) whose
driver has the simulator's MPS stand-ins where NVIDIA's programs are: gpulet
finds and runs them as a node's, with no --mps-control (the daemon refuses
quit while clients run; the client, in a busybox pod, fails at once and for
good when its daemon goes, as a CUDA client does). One job
holds a replica of the device plugin's MPS resource, one a DRA share of
GPU 0. Through SIGKILL of gpulet, a rollout to a new image tag, a reload
with the config unchanged and one with new limits, both pods keep running
with restart count 0 on the daemons started first (adopted by each new
gpulet), and a watch during the rollout sees the pool's ResourceSlice
always there at one generation. The window in which the Node's
allocatable was below its capacity is printed (bench/rollout.py makes a
table of it)."""
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import drakit
from conftest import SOURCE
from test_image import image, node_root, wait  # noqa: F401 (fixtures)

RES = "nvidia.com/a100-mps"
OVERLAY = """apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [{deploy}/dra]
images: [{{name: localhost/gpulet, newTag: test}}]
configMapGenerator:
  - name: gpulet-config
    namespace: gpulet
    behavior: replace
    options: {{disableNameSuffixHash: true}}
    literals:
      - "default={config}"
patches:
  # On the host's network a container port is a host port, which the
  # scheduler would not give the rolling update's second pod: none.
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
            terminationGracePeriodSeconds: 5
            containers:
              - name: gpulet
                imagePullPolicy: Never
                args: [agent, --metrics-listen, "127.0.0.1:9400",
                       # the MPS root under the kit's directory, not this host's /run/nvidia/mps
                       --mps-root, "{base}/deployed/mps",
                       # the config of this test: GPUs 0-3 through DRA, GPU 0 for shares
                       --dra-gpus, "0,1,2,3", --dra-shares, "0",
                       # the kit's kubelet has its root in {base}/kubelet
                       --kubelet-registry-dir, "{base}/kubelet/plugins_registry",
                       --dra-plugin-dir, "{base}/kubelet/plugins/gpu.nvidia.com"]
                env:
                  - {{name: KUBERNETES_SERVICE_HOST, value: "{api_host}"}}
                  - {{name: KUBERNETES_SERVICE_PORT, value: "{api_port}"}}
                  # the node's / is node_root's (test_image): its driver's GPUs, an A100 node's
                  - {{name: NVIDIA_DRIVER_ROOT, value: "{root}"}}
                  - {{name: GPULET_SIM_SCENARIO, value: a100-2x4}}
                volumeMounts:
                  # this machine's / is a private mount: no propagation from it
                  - {{name: driver-root, mountPath: /driver-root, readOnly: true, mountPropagation: None}}
                  # the MPS root at its own path, as on a node (/run/nvidia/mps)
                  - {{name: mps, mountPath: "{base}/deployed/mps"}}
                  # the kubelet's DRA directories at the paths it knows them by
                  - {{name: plugins-registry, mountPath: "{base}/kubelet/plugins_registry"}}
                  - {{name: plugins, mountPath: "{base}/kubelet/plugins"}}
            volumes:
              - {{name: driver-root, hostPath: {{path: "{root}", type: Directory}}}}
              - {{name: pod-resources, hostPath: {{path: {base}/kubelet/pod-resources, type: Directory}}}}
              - {{name: cdi, hostPath: {{path: /var/run/cdi, type: DirectoryOrCreate}}}}
              - {{name: plugins-registry, hostPath: {{path: {base}/kubelet/plugins_registry, type: Directory}}}}
              - {{name: plugins, hostPath: {{path: {base}/kubelet/plugins, type: DirectoryOrCreate}}}}
              - {{name: mps, hostPath: {{path: {base}/deployed/mps, type: DirectoryOrCreate}}}}
              - {{name: status, hostPath: {{path: {base}/deployed/status, type: DirectoryOrCreate}}}}
"""


def config(memory=None):
    limit = f", memoryLimit: {memory}" if memory else ""
    return ("version: v1\\nresources:\\n  gpus: [{pattern: '*', name: a100-mps}]\\nsharing:\\n"
            f"  mps:\\n    resources: [{{name: {RES}, replicas: 2{limit}}}]\\n")


def agent_pids():
    """The deployed gpulet's pid on this host (its container's, from here)."""
    out = subprocess.run(["pgrep", "-f", "^/usr/bin/gpulet agent --metrics-listen 127.0.0.1:9400 --mps-root"],
                         capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def mps_daemons(root):
    found = []
    for pidfile in Path(root).rglob("nvidia-cuda-mps-control.pid"):
        try:
            pid = int(pidfile.read_text())
            os.kill(pid, 0)
            found.append(pid)
        except (OSError, ValueError):
            pass
    return found


class Watch(threading.Thread):
    """Samples the Node's allocatable and capacity of RES and the node's
    ResourceSlice pool as the API server has them, until stopped: the
    windows in which allocatable was below, and the pool's generations."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster, self.stop, self.low, self.samples = cluster, threading.Event(), [], 0
        self.generations = []  # the pool's, None while it is absent

    def run(self):
        below_since = None
        while not self.stop.is_set():
            st = self.cluster.get("node", self.cluster.node)["status"]
            cap, alloc = st["capacity"].get(RES), st["allocatable"].get(RES)
            now = time.monotonic()
            self.samples += 1
            pool = drakit.pool_slices(self.cluster)
            self.generations.append(pool[0]["spec"]["pool"]["generation"] if pool else None)
            if alloc != cap and below_since is None:
                below_since = now
            elif alloc == cap and below_since is not None:
                self.low.append(now - below_since)
                below_since = None
            time.sleep(0.1)
        if below_since is not None:
            self.low.append(time.monotonic() - below_since)


def test_mps_jobs_outlive_crash_rollout_and_reload(cluster, image, node_root):
    if drakit.api_version(cluster) != "v1":
        pytest.skip("shares of a GPU need resource.k8s.io/v1 (Kubernetes 1.34+)")
    base = cluster.base
    k = cluster.kubectl
    made = not drakit.CDI_DIR.exists()
    # A node's / has the MPS root at its own path, where the daemon, run on
    # the node's files, is given gpulet's.
    os.makedirs(f"{node_root}{base}/deployed/mps", exist_ok=True)
    overlay = Path(base) / "upgrade-overlay"
    overlay.mkdir(exist_ok=True)
    server = k("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
    host, port = server.removeprefix("https://").rsplit(":", 1)

    def write_overlay(memory=None):
        (overlay / "kustomization.yaml").write_text(OVERLAY.format(
            deploy=os.path.relpath(SOURCE / "deploy", overlay), base=base, api_host=host,
            api_port=port, config=config(memory), root=node_root))
    write_overlay()
    k("label", "node", cluster.node, "gpulet.io/gpu-node=true", "--overwrite")
    client = (Path(node_root) / "usr/bin/gpulet-mps-client").read_text()
    job = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mps-job"},
           "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": cluster.env["K8S_BUSYBOX_IMAGE"],
                                    "command": ["sh", "-c", client],
                                    "resources": {"limits": {RES: 1}}}]}}
    node = lambda: cluster.get("node", cluster.node)
    def current_pod():
        """The DaemonSet's pod that runs now: during a rollout the old one,
        still terminating, is there too (`kubectl logs ds/gpulet` may pick it)."""
        pods = [p for p in cluster.get("pods", "-n", "gpulet")["items"]
                if not p["metadata"].get("deletionTimestamp")]
        return max(pods, key=lambda p: p["metadata"]["creationTimestamp"]) if pods else None

    def logs():
        pod = current_pod()
        return k("logs", "-n", "gpulet", pod["metadata"]["name"], check=False) if pod else ""
    k("apply", "-k", str(overlay))
    try:
        wait(lambda: "the MPS daemon never came up: " + logs()[-3000:],
             lambda: f"MPS daemon for {RES} is up" in logs())
        wait(lambda: f"{RES} never became allocatable: {node()['status']['allocatable']} " + logs()[-3000:],
             lambda: node()["status"]["allocatable"].get(RES) == "8")
        wait(lambda: "no ResourceSlice: " + logs()[-3000:], lambda: drakit.pool_slices(cluster))
        k("apply", "-f", "-", stdin=json.dumps(job))
        req = drakit.request("v1", "gpu", "gpu.nvidia.com",
                             ["device.attributes['gpu.nvidia.com'].index == 0"],
                             capacity={"requests": {"memory": "8Gi"}})
        drakit.claim_pod(cluster, "v1", "share-job", req, client)
        jobs = ("mps-job", "share-job")
        for name in jobs:
            cluster.wait_phase(name, "Running")
            wait(lambda: f"{name} never bound: " + k("logs", name, check=False),
                 lambda: "bound to daemon" in k("logs", name, check=False))
        daemons = sorted(mps_daemons(f"{base}/deployed/mps"))
        assert len(daemons) == 2, daemons  # the resource's and GPU 0's shares'

        def job_alive(what):
            time.sleep(4)  # the stand-in fails within 3 s of its daemon's going
            for name in jobs:
                st = cluster.get("pod", name)["status"]
                assert st["phase"] == "Running", f"{what}: {name} {st} {k('logs', name, check=False)}"
                assert st["containerStatuses"][0]["restartCount"] == 0, (what, name)
            assert sorted(mps_daemons(f"{base}/deployed/mps")) == daemons, what

        # 1. A crash: SIGKILL; the kubelet restarts the container.
        pid = agent_pids()
        assert len(pid) == 1, pid
        os.kill(pid[0], signal.SIGKILL)
        wait(lambda: "no adopting gpulet after SIGKILL: " + logs()[-3000:],
             lambda: agent_pids() and agent_pids() != pid and logs().count("is up, adopted") == 2)
        job_alive("after SIGKILL")
        # The restarted pod Ready first: a DaemonSet replaces a pod that is
        # not Ready at once, without a surge (and so without a hand-over).
        k("-n", "gpulet", "wait", "--for=condition=Ready", "pod", "-l", "app.kubernetes.io/name=gpulet",
          "--timeout=50s")
        # 2. A rollout to a new image tag, watched.
        sock = Path(base) / "containerd" / "containerd.sock"
        subprocess.run(["ctr", "--address", str(sock), "-n", "k8s.io", "images", "tag", "--force",
                        "localhost/gpulet:test", "localhost/gpulet:test2"], check=True, timeout=60)
        watch = Watch(cluster)
        watch.start()
        slices = drakit.pool_slices(cluster)
        generation = slices[0]["spec"]["pool"]["generation"]
        old = agent_pids()
        t0 = time.monotonic()
        k("-n", "gpulet", "set", "image", "ds/gpulet", "gpulet=localhost/gpulet:test2")
        k("-n", "gpulet", "rollout", "status", "ds/gpulet", "--timeout=120s")
        wait(lambda: "no adopting gpulet after the rollout: " + logs()[-3000:],
             lambda: agent_pids() and agent_pids() != old and logs().count("is up, adopted") == 2)
        took = time.monotonic() - t0
        time.sleep(12)  # a node status update or more after it
        watch.stop.set()
        watch.join()
        print(f"hand-over: {[l for l in logs().splitlines() if 'took over from' in l]}")
        print(f"rollout: {took:.1f} s to an adopting gpulet; {watch.samples} samples of the "
              f"Node; allocatable {RES} below capacity: {watch.low or 'never'}; the pool: "
              f"{sorted(set(watch.generations))}")
        assert watch.generations and set(watch.generations) == {generation}, watch.generations
        assert not watch.low, watch.low  # the old pod handed over to the new one (maxSurge)
        if "took over from the gpulet agent" not in logs():
            pod = current_pod()
            restarts = [c.get("restartCount") for c in pod["status"].get("containerStatuses", [])]
            previous = k("-n", "gpulet", "logs", "--previous", pod["metadata"]["name"], check=False)
            pytest.fail(f"no hand-over; the new pod's restarts {restarts}; its log:\n{logs()}\n"
                        f"its previous container's:\n{previous}")
        assert current_pod()["spec"]["containers"][0]["image"] == "localhost/gpulet:test2"
        job_alive("after the rollout")
        # 3. A reload with the config unchanged (SIGHUP), then new limits
        # (the node's config changed through the API server, applied live).
        os.kill(agent_pids()[0], signal.SIGHUP)
        wait(lambda: "SIGHUP: " + logs()[-3000:], lambda: logs().count("is up, adopted") >= 3)
        job_alive("after SIGHUP")
        write_overlay("10Gi")
        k("apply", "-k", str(overlay))
        wait(lambda: "the new limits never reached the daemon",
             lambda: "set_default_device_pinned_mem_limit 0 10240M" in
             (Path(base) / "deployed/mps" / RES / "log/commands.log").read_text())
        job_alive("after new limits")
        assert " stopped (pid" not in logs()  # no daemon was ended
    finally:
        k("delete", "pod", "mps-job", "share-job", "--wait=true", "--timeout=30s", check=False)
        k("delete", "resourceclaimtemplate", "share-job", check=False)
        k("delete", "-k", str(overlay), "--wait=true", "--timeout=60s", check=False)
        k("label", "node", cluster.node, "gpulet.io/gpu-node-", "nvidia.com/device-plugin.config-",
          check=False)
        # The daemon outlives gpulet by design; uninstalled, nothing ends it
        # but its clients' end and this.
        for pid in mps_daemons(f"{base}/deployed/mps"):
            os.kill(pid, signal.SIGKILL)
        for d in Path("/sys/fs/cgroup").glob("*/gpulet-mps"):
            try:
                d.rmdir()
            except OSError:
                pass  # its keeper takes it once it has seen its daemon go
        drakit.remove_cdi_specs(made)
    wait("the gpulet pod did not go", lambda: not cluster.get("pods", "-n", "gpulet")["items"]
         if k("get", "ns", "gpulet", check=False) else True)
