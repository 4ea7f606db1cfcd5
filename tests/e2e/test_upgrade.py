"""What a crash, a rollout to a new image and a reload of the gpulet
DaemonSet do to a running MPS job (issue 38), on the real 1.36 node: the
DaemonSet from deploy/ (the image as test_image imports it), with MPS by
the device plugin, the simulator's MPS stand-ins as the driver's (its daemon
refuses quit while clients run; its client, in a busybox pod, fails at once
and for good when its daemon goes, as a CUDA client does). Through SIGKILL
of gpulet, a rollout to a new image tag, a reload with the config unchanged
and one with new limits, the job's pod keeps running with restart count 0,
and the daemon is the one started first (adopted by each new gpulet). The
rollout's window in which the Node's allocatable was below its capacity is
measured and printed (bench/rollout.py makes a table of it)."""
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import GPULET, SOURCE
from test_image import image, wait  # noqa: F401 (image is a fixture)

RES = "nvidia.com/a100-mps"
OVERLAY = """apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [{deploy}]
images: [{{name: localhost/gpulet, newTag: test}}]
configMapGenerator:
  - name: gpulet-config
    namespace: gpulet
    behavior: replace
    options: {{disableNameSuffixHash: true}}
    literals:
      - "default={config}"
patches:
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
                args: [agent, --simulate, a100-2x4, --metrics-listen, "127.0.0.1:9400",
                       --mps-root, "{base}/deployed/mps",
                       --mps-control, "/driver-root{base}/driver/usr/bin/nvidia-cuda-mps-control"]
                env:
                  - {{name: KUBERNETES_SERVICE_HOST, value: "{api_host}"}}
                  - {{name: KUBERNETES_SERVICE_PORT, value: "{api_port}"}}
                volumeMounts:
                  # this machine's / is a private mount: no propagation from it
                  - {{name: driver-root, mountPath: /driver-root, readOnly: true, mountPropagation: None}}
                  # the MPS root at its own path, as on a node (/run/nvidia/mps)
                  - {{name: mps, mountPath: "{base}/deployed/mps"}}
            volumes:
              - {{name: pod-resources, hostPath: {{path: {base}/kubelet/pod-resources, type: Directory}}}}
              - {{name: cdi, hostPath: {{path: {base}/deployed/cdi, type: DirectoryOrCreate}}}}
              - {{name: mps, hostPath: {{path: {base}/deployed/mps, type: DirectoryOrCreate}}}}
              - {{name: status, hostPath: {{path: {base}/deployed/status, type: DirectoryOrCreate}}}}
"""


def config(memory=None):
    limit = f", memoryLimit: {memory}" if memory else ""
    return ("version: v1\\nresources:\\n  gpus: [{pattern: '*', name: a100-mps}]\\nsharing:\\n"
            f"  mps:\\n    resources: [{{name: {RES}, replicas: 2{limit}}}]\\n")


def agent_pids():
    """The deployed gpulet's pid on this host (its container's, from here)."""
    out = subprocess.run(["pgrep", "-f", "gpulet agent --simulate a100-2x4"], capture_output=True,
                         text=True).stdout
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
    """Samples the Node's allocatable and capacity of RES as the API server
    has them, until stopped: the windows in which allocatable was below."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster, self.stop, self.low, self.samples = cluster, threading.Event(), [], 0

    def run(self):
        below_since = None
        while not self.stop.is_set():
            st = self.cluster.get("node", self.cluster.node)["status"]
            cap, alloc = st["capacity"].get(RES), st["allocatable"].get(RES)
            now = time.monotonic()
            self.samples += 1
            if alloc != cap and below_since is None:
                below_since = now
            elif alloc == cap and below_since is not None:
                self.low.append(now - below_since)
                below_since = None
            time.sleep(0.1)
        if below_since is not None:
            self.low.append(time.monotonic() - below_since)


def test_mps_job_outlives_crash_rollout_and_reload(cluster, image):
    base = cluster.base
    k = cluster.kubectl
    subprocess.run([GPULET, "sim", "driver-root", f"{base}/driver"], check=True, env=cluster.env,
                   timeout=30)
    overlay = Path(base) / "upgrade-overlay"
    overlay.mkdir(exist_ok=True)
    server = k("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
    host, port = server.removeprefix("https://").rsplit(":", 1)

    def write_overlay(memory=None):
        (overlay / "kustomization.yaml").write_text(OVERLAY.format(
            deploy=os.path.relpath(SOURCE / "deploy", overlay), base=base, api_host=host,
            api_port=port, config=config(memory)))
    write_overlay()
    k("label", "node", cluster.node, "gpulet.io/gpu-node=true", "--overwrite")
    client = (Path(base) / "driver/usr/bin/gpulet-mps-client").read_text()
    job = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mps-job"},
           "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": cluster.env["K8S_BUSYBOX_IMAGE"],
                                    "command": ["sh", "-c", client],
                                    "resources": {"limits": {RES: 1}}}]}}
    node = lambda: cluster.get("node", cluster.node)
    logs = lambda: k("logs", "-n", "gpulet", "ds/gpulet", check=False)
    k("apply", "-k", str(overlay))
    try:
        wait(lambda: "the MPS daemon never came up: " + logs()[-3000:],
             lambda: f"MPS daemon for {RES} is up" in logs())
        wait(f"{RES} never became allocatable", lambda: node()["status"]["allocatable"].get(RES) == "16")
        daemons = mps_daemons(f"{base}/deployed/mps")
        assert len(daemons) == 1, daemons
        k("apply", "-f", "-", stdin=json.dumps(job))
        cluster.wait_phase("mps-job", "Running")
        wait(lambda: "the job never bound: " + k("logs", "mps-job", check=False),
             lambda: "bound to daemon" in k("logs", "mps-job", check=False))

        def job_alive(what):
            time.sleep(4)  # the stand-in fails within 3 s of its daemon's going
            st = cluster.get("pod", "mps-job")["status"]
            assert st["phase"] == "Running", f"{what}: {st} {k('logs', 'mps-job', check=False)}"
            assert st["containerStatuses"][0]["restartCount"] == 0, what
            assert mps_daemons(f"{base}/deployed/mps") == daemons, what

        # 1. A crash: SIGKILL; the kubelet restarts the container.
        pid = agent_pids()
        assert len(pid) == 1, pid
        os.kill(pid[0], signal.SIGKILL)
        wait(lambda: "no adopting gpulet after SIGKILL: " + logs()[-3000:],
             lambda: agent_pids() and agent_pids() != pid and "is up, adopted" in logs())
        job_alive("after SIGKILL")
        # 2. A rollout to a new image tag, watched.
        sock = Path(base) / "containerd" / "containerd.sock"
        subprocess.run(["ctr", "--address", str(sock), "-n", "k8s.io", "images", "tag", "--force",
                        "localhost/gpulet:test", "localhost/gpulet:test2"], check=True, timeout=60)
        watch = Watch(cluster)
        watch.start()
        old = agent_pids()
        t0 = time.monotonic()
        k("-n", "gpulet", "set", "image", "ds/gpulet", "gpulet=localhost/gpulet:test2")
        k("-n", "gpulet", "rollout", "status", "ds/gpulet", "--timeout=120s")
        wait(lambda: "no adopting gpulet after the rollout: " + logs()[-3000:],
             lambda: agent_pids() and agent_pids() != old and "is up, adopted" in logs())
        took = time.monotonic() - t0
        time.sleep(12)  # a node status update or more after it
        watch.stop.set()
        watch.join()
        print(f"rollout: {took:.1f} s to an adopting gpulet; {watch.samples} samples of the "
              f"Node; allocatable {RES} below capacity: {watch.low or 'never'}")
        pod = cluster.get("pods", "-n", "gpulet")["items"][0]
        assert pod["spec"]["containers"][0]["image"] == "localhost/gpulet:test2"
        job_alive("after the rollout")
        # 3. A reload with the config unchanged (SIGHUP), then new limits
        # (the node's config changed through the API server, applied live).
        adopted = logs().count("is up, adopted")
        os.kill(agent_pids()[0], signal.SIGHUP)
        wait(lambda: "SIGHUP: " + logs()[-3000:], lambda: logs().count("is up, adopted") > adopted)
        job_alive("after SIGHUP")
        write_overlay("10Gi")
        k("apply", "-k", str(overlay))
        wait(lambda: "the new limits never reached the daemon",
             lambda: "set_default_device_pinned_mem_limit 0 10240M" in
             (Path(base) / "deployed/mps" / RES / "log/commands.log").read_text())
        job_alive("after new limits")
        pod = cluster.get("pods", "-n", "gpulet")["items"][0]
        assert "MPS daemon" in logs() and "stopped" not in logs()
    finally:
        k("delete", "pod", "mps-job", "--wait=true", "--timeout=30s", check=False)
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
                pass
    wait("the gpulet pod did not go", lambda: not cluster.get("pods", "-n", "gpulet")["items"]
         if k("get", "ns", "gpulet", check=False) else True)
