"""Per-container numbers on shared GPUs: simulated processes (gpulet sim
proc) placed in pods through a /proc tree of cgroup files (v1 and v2,
cgroupfs and systemd drivers), named through /var/log/containers links, and
through PodResources where one container holds the GPU."""
import json
import shutil
import subprocess

import pytest

from conftest import GPULET, SANITIZED
from test_metrics import get, metrics_agent, parse, sim, wait_for  # noqa: F401

UID_A = "0b4e3c2a-1f5d-4e6b-9a7c-2d3e4f5a6b7c"
UID_B = "7e1d2c3b-4a5f-4b6c-8d7e-9f0a1b2c3d4e"
UID_C = "11111111-2222-4333-8444-555555555555"
CID_A = "a" * 64
CID_B = "b" * 64
CID_C = "c" * 64


def cgroup_files(root, procs):
    """Writes <root>/<pid>/cgroup for each (pid, text)."""
    for pid, text in procs.items():
        d = root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup").write_text(text)


def log_links(root, names):
    """The kubelet's /var/log/containers: links whose names are all we read."""
    root.mkdir(parents=True, exist_ok=True)
    for pod, ns, container, cid in names:
        (root / f"{pod}_{ns}_{container}-{cid}.log").symlink_to(
            f"/var/log/pods/{ns}_{pod}_uid/{container}/0.log")


def usage(url):
    """{(gpu, pod, container): (bytes, ratio, processes)} from /metrics."""
    s = parse(get(url + "/metrics")[2])
    out = {}
    for name, k in (("gpulet_container_gpu_memory_used_bytes", 0),
                    ("gpulet_container_gpu_utilization_ratio", 1),
                    ("gpulet_container_gpu_processes", 2)):
        for labels, value, _ in s.get(name, []):
            key = (labels["gpu"], labels.get("pod", ""), labels.get("container", ""))
            out.setdefault(key, [None, None, None])[k] = value
    return {k: tuple(v) for k, v in out.items()}


@pytest.fixture
def node(tmp_path, sim_env):
    """A fake node: processes in pods a and b (shared GPU 3) and c (GPU 0,
    no log link), a host process; PodResources as the kubelet would answer."""
    proc, logs = tmp_path / "node-proc", tmp_path / "node-containers"
    cgroup_files(proc, {
        # pod a, v2, systemd driver, containerd
        4001: f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
              f"{UID_A.replace('-', '_')}.slice/cri-containerd-{CID_A}.scope\n",
        4003: f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
              f"{UID_A.replace('-', '_')}.slice/cri-containerd-{CID_A}.scope\n",
        # pod b, v1, cgroupfs driver
        4002: f"12:pids:/kubepods/besteffort/pod{UID_B}/{CID_B}\n"
              f"4:memory:/kubepods/besteffort/pod{UID_B}/{CID_B}\n1:name=systemd:/\n",
        # pod c: no log link, so only PodResources can name it
        4004: f"0::/kubepods/pod{UID_C}/{CID_C}\n",
        # not in a pod
        4005: "0::/user.slice/user-1000.slice/session-2.scope\n",
    })
    log_links(logs, [("share-a", "dev", "a", CID_A), ("share-b", "dev", "b", CID_B)])
    return proc, logs


def start_pods(tmp_path, sim_env, uuids):
    from kubelet import FakePodResources, load_podresources_stubs
    pb, pbg = load_podresources_stubs(tmp_path / "prstubs")
    pods = FakePodResources(tmp_path / "kubelet", pb, pbg)
    pods.pods = [("train-0", "ml", "main", "nvidia.com/gpu", [uuids[0]]),
                 ("share-a", "dev", "a", "nvidia.com/gpu.shared", [uuids[3] + "::0"]),
                 ("share-b", "dev", "b", "nvidia.com/gpu.shared", [uuids[3] + "::1"])]
    pods.start()
    return pods


def gpu_uuids(sim_env):
    p = subprocess.run([GPULET, "list", "--simulate", "l4-pcie", "-o", "json"],
                       capture_output=True, text=True, env=sim_env)
    return [g["uuid"] for g in json.loads(p.stdout)["gpus"]]


def add_processes(sim_env):
    sim(sim_env, "proc", "3", "add", "4001", "1000", "30")
    sim(sim_env, "proc", "3", "add", "4003", "500", "10")
    sim(sim_env, "proc", "3", "add", "4002", "2000", "50")
    sim(sim_env, "proc", "0", "add", "4004", "700", "90")
    sim(sim_env, "proc", "1", "add", "4005", "64", "0")
    sim(sim_env, "proc", "1", "add", "4999", "32", "0")  # not in this /proc at all


MIB = 1 << 20


def test_per_container_usage(metrics_agent, node, tmp_path, sim_env):
    pods = start_pods(tmp_path, sim_env, gpu_uuids(sim_env))
    try:
        a, url = metrics_agent("--simulate", "l4-pcie", "--pod-resources-interval-ms", "1000")
        add_processes(sim_env)
        # Every process the simulator was given, seen in one sample.
        u = wait_for(lambda: (lambda x: x if ("3", "share-b", "b") in x and
                              ("0", "train-0", "main") in x and
                              x.get(("1", "", "")) == (96 * MIB, 0.0, 2) else None)(usage(url)))
        assert u, get(url + "/metrics")[2][-3000:]
        # two processes of one container add up; each container has its own series
        assert u[("3", "share-a", "a")] == (1500 * MIB, 0.4, 2)
        assert u[("3", "share-b", "b")] == (2000 * MIB, 0.5, 1)
        # no log link, but the only holder of GPU 0 by PodResources
        assert u[("0", "train-0", "main")] == (700 * MIB, 0.9, 1)
        # outside any pod: one series without pod labels
        assert u[("1", "", "")] == (96 * MIB, 0.0, 2)
        s = parse(get(url + "/metrics")[2])
        labels = next(l for l, _, _ in s["gpulet_container_gpu_memory_used_bytes"]
                      if l.get("pod") == "share-a")
        assert labels["namespace"] == "dev" and labels["UUID"] and labels["Hostname"] == "node-1"
        assert s["gpulet_process_sample_duration_seconds"][0][1] >= 0

        # an ended process disappears at the next sample
        sim(sim_env, "proc", "3", "del", "4002")
        assert wait_for(lambda: ("3", "share-b", "b") not in usage(url))
        # a pod that ended on GPU 0: the process leaves, and so does its series
        sim(sim_env, "proc", "0", "clear")
        assert wait_for(lambda: ("0", "train-0", "main") not in usage(url))
        assert ("3", "share-a", "a") in usage(url)
    finally:
        pods.stop()


def test_process_metrics_off(metrics_agent, node, sim_env):
    a, url = metrics_agent("--simulate", "l4-pcie", "--process-metrics", "false")
    add_processes(sim_env)
    text = wait_for(lambda: (lambda t: t if "DCGM_FI_DEV_GPU_TEMP" in t else None)(
        get(url + "/metrics")[2]))
    assert "gpulet_container_gpu" not in text


def test_unreadable_log_dir(metrics_agent, node, tmp_path, sim_env):
    """No log links: one warning; containers on a shared GPU go unnamed
    (no pod labels), and sampling goes on."""
    a, url = metrics_agent("--simulate", "l4-pcie", "--container-log-dir",
                           str(tmp_path / "missing"))
    add_processes(sim_env)
    u = wait_for(lambda: (lambda x: x if ("3", "", "") in x else None)(usage(url)))
    assert u and u[("3", "", "")] == (3500 * MIB, 0.9, 3)
    a.wait_log("containers on shared GPUs go unnamed")
    assert a.log().count("go unnamed") == 1


@pytest.mark.skipif(SANITIZED or not shutil.which("valgrind"), reason="valgrind runs on the plain build")
def test_valgrind_container_usage(agent, node, tmp_path, sim_env):
    """Processes coming and going under valgrind: no leaks, no invalid accesses."""
    from test_metrics import free_port
    port = free_port()
    a = agent("--kubelet-root", str(tmp_path / "kubelet"), "--metrics-listen", f"127.0.0.1:{port}",
              "--metrics-interval-ms", "200", "--simulate", "l4-pcie",
              prefix=("valgrind", "--error-exitcode=9", "--leak-check=full",
                      "--errors-for-leak-kinds=definite,indirect", "-q"))
    a.wait_log("metrics ready", timeout=30)
    url = f"http://127.0.0.1:{port}"
    add_processes(sim_env)
    assert wait_for(lambda: ("3", "share-b", "b") in usage(url), timeout=30)
    sim(sim_env, "proc", "3", "clear")
    assert wait_for(lambda: ("3", "share-b", "b") not in usage(url), timeout=30)
    assert a.stop(timeout=60) == 0, a.log()
