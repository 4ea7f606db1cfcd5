"""Time-slicing against the grpcio kubelet stand-in: replica IDs, GPUs
shared and whole side by side (two resources), one fault marking all of a
GPU's replicas, distinct GPUs for multi-replica requests, Allocate giving
each GPU once, and a bad config on SIGHUP keeping the running one."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from conftest import SANITIZED, SOURCE, STREAM_S, mps_daemons
from limits import limit
from test_plugin import sim


TS = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
      "    - name: nvidia.com/gpu\n      replicas: 4\n      devices: [0, 1]\n"
      "    - name: nvidia.com/gpu\n      replicas: 2\n      devices: ['2']\n")


def stream_of(kubelet, endpoint):
    channel, stub = kubelet.plugin(endpoint)
    stream = stub.ListAndWatch(kubelet.pb.Empty(), timeout=STREAM_S)
    return channel, stub, stream, next(stream)


def test_time_slicing(plugin_agent, kubelet, gpulet, sim_env, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(TS)
    a = plugin_agent("--simulate", "l4-pcie", "--config-file", str(cfg), wait=False)
    kubelet.wait_registrations(2, timeout=30)
    a.wait_log("agent running")
    regs = {r.resource_name: r.endpoint for _, r in kubelet.registrations}
    assert regs == {"nvidia.com/gpu": "gpulet-nvidia-gpu.sock",
                    "nvidia.com/gpu.shared": "gpulet-nvidia-gpu.shared.sock"}
    # The status socket counts each resource's devices from the device records.
    with socket.socket(socket.AF_UNIX) as sk:
        sk.connect(str(tmp_path / "status.sock"))
        sk.sendall(b"plugins\n")
        reply = b""
        while chunk := sk.recv(4096):
            reply += chunk
    counts = {line.split()[0]: line.split()[3] for line in reply.decode().splitlines()}
    assert counts == {"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "10"}, reply
    ch_whole, _, s_whole, whole = stream_of(kubelet, regs["nvidia.com/gpu"])
    assert len(whole.devices) == 1 and "::" not in whole.devices[0].ID
    channel, stub, stream, shared = stream_of(kubelet, regs["nvidia.com/gpu.shared"])
    ids = [d.ID for d in shared.devices]
    assert len(ids) == 10 and ids[0].endswith("::0") and ids[4].endswith("::0")
    uuid0 = ids[0].split("::")[0]
    # Preferred allocation: two replicas on two GPUs, not two of one.
    pb = kubelet.pb
    pref = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=2)]))
    chosen = list(pref.container_responses[0].deviceIDs)
    assert len({c.split("::")[0] for c in chosen}) == 2
    # Allocate: each GPU once; two replicas of one GPU come with a note.
    r = stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=ids[0:2])]), timeout=5)
    c = r.container_responses[0]
    assert c.envs["NVIDIA_VISIBLE_DEVICES"] == uuid0
    assert "2 replicas of nvidia.com/gpu.shared on 1 GPU(s)" in c.envs["GPULET_SHARED_NOTE"]
    # One fault on GPU 0 marks all four of its replicas, and nothing else.
    sim(sim_env, "xid", "0", "79")
    deadline = time.monotonic() + 5
    for update in stream:
        health = [d.health for d in update.devices]
        if health[:4] == ["Unhealthy"] * 4:
            break
        assert time.monotonic() < deadline
    assert health[4:] == ["Healthy"] * 6
    # Labels: GPUs differ (4, 2 replicas, one whole), so no node-wide replicas.
    labels = dict(l.split("=", 1) for l in gpulet("labels", "--simulate", "l4-pcie",
                                                    "--config-file", str(cfg)).stdout.splitlines())
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4"
    assert "nvidia.com/gpu.replicas" not in labels
    # A bad config on SIGHUP: an error naming the key; the running one serves on.
    cfg.write_text(TS.replace("devices: ['2']", "devices: ['7']"))
    a.proc.send_signal(signal.SIGHUP)
    a.wait_log("config not reloaded, keeping the running one")
    assert ("sharing.timeSlicing.resources[1].devices names GPU '7', which is not a GPU of "
            "nvidia.com/gpu on this node") in a.log()
    time.sleep(0.3)
    assert len(kubelet.registrations) == 2
    for ch, st in ((channel, stream), (ch_whole, s_whole)):
        st.cancel()
        ch.close()
    assert a.stop() == 0


def test_fail_requests_greater_than_one(plugin_agent, kubelet, gpulet, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
                   "    failRequestsGreaterThanOne: true\n"
                   "    resources: [{name: nvidia.com/gpu, replicas: 3}]\n")
    plugin_agent("--simulate", "t4", "--config-file", str(cfg))
    _, req = kubelet.registrations[-1]
    assert req.resource_name == "nvidia.com/gpu.shared"
    channel, stub, stream, first = stream_of(kubelet, req.endpoint)
    ids = [d.ID for d in first.devices]
    assert len(ids) == 3
    pb = kubelet.pb
    try:
        stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=ids[:2])]), timeout=5)
        raise AssertionError("two replicas allowed")
    except grpc.RpcError as err:
        assert "request for 'nvidia.com/gpu.shared: 2' too large" in err.details()
    stream.cancel()
    channel.close()
    labels = dict(l.split("=", 1) for l in gpulet("labels", "--simulate", "t4",
                                                    "--config-file", str(cfg)).stdout.splitlines())
    assert labels["nvidia.com/gpu.replicas"] == "3"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"  # renamed: no -SHARED


FAKE_MPS = str(Path(__file__).resolve().parent / "fake_mps_control.py")
MPS = ("version: v1\nsharing:\n  mps:\n    resources:\n"
       "    - {name: nvidia.com/gpu, replicas: 2}\n")


def wait_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_mps(plugin_agent, kubelet, gpulet, tmp_path):
    """A supervised control daemon per MPS resource (the stand-in), its
    limits, what Allocate gives a container, a restart after it dies, and
    the daemon running on after the agent's exit."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(MPS)
    root = tmp_path / "mps"
    a = plugin_agent("--simulate", "t4", "--config-file", str(cfg), "--mps-root", str(root),
                     "--mps-control", FAKE_MPS)
    logs = root / "nvidia.com" / "gpu" / "log"
    pidfile = root / "nvidia.com" / "gpu" / "pipe" / "nvidia-cuda-mps-control.pid"
    a.wait_log("MPS daemon for nvidia.com/gpu is up")
    assert (logs / "commands.log").read_text() == (
        "set_default_active_thread_percentage 50\n"
        "set_default_device_pinned_mem_limit 0 7680M\n")
    control = (logs / "control.log").read_text()
    assert "CUDA_VISIBLE_DEVICES=GPU-" in control
    channel, stub = kubelet.plugin()
    stream = stub.ListAndWatch(kubelet.pb.Empty(), timeout=STREAM_S)
    first = next(stream)
    while any(d.health != "Healthy" for d in first.devices):
        first = next(stream)
    ids = [d.ID for d in first.devices]
    assert len(ids) == 2 and ids[1].endswith("::1")
    pb = kubelet.pb
    r = stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=ids[:1])]), timeout=5).container_responses[0]
    assert r.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"
    assert r.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert r.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=7680M"
    mounts = {m.container_path: m.host_path for m in r.mounts}
    assert mounts == {"/mps/nvidia.com/gpu/pipe": str(root / "nvidia.com/gpu/pipe"),
                      "/dev/shm": str(root / "shm")}
    # MPS refuses two replicas per container by default, as NVIDIA's does.
    try:
        stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=ids)]), timeout=5)
        raise AssertionError("two MPS replicas allowed")
    except grpc.RpcError as err:
        assert "maximum request size for shared resources is 1" in err.details()
    # The daemon dies: devices go Unhealthy, it is restarted, and they come back.
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    for update in stream:
        if all(d.health == "Unhealthy" for d in update.devices):
            break
    # What ListAndWatch calls Unhealthy, Allocate refuses, with the reason.
    with pytest.raises(grpc.RpcError) as refused:
        stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=ids[:1])]), timeout=5)
    assert "the resource's MPS daemon is down" in refused.value.details()
    a.wait_log("MPS daemon for nvidia.com/gpu exited (pid")
    a.wait_log("; restarting it with a backoff")
    for update in stream:
        if all(d.health == "Healthy" for d in update.devices):
            break
    # Restarted: the second daemon's own start line. The stand-in takes its
    # lock (which its client, and so gpulet, sees as up) before it writes
    # that line; on a loaded machine the line can come after the devices do.
    deadline = time.monotonic() + limit(10)
    while (logs / "control.log").read_text().count("start pid=") != 2:
        assert time.monotonic() < deadline, (logs / "control.log").read_text()
        time.sleep(0.05)
    labels = dict(l.split("=", 1) for l in gpulet(
        "labels", "--simulate", "t4", "--config-file", str(cfg), "--mps-root", str(root),
        "--mps-control", FAKE_MPS).stdout.splitlines())
    assert labels["nvidia.com/mps.capable"] == "true"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert labels["nvidia.com/gpu.replicas"] == "2"
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    stream.cancel()
    channel.close()
    assert a.stop() == 0
    assert "quit" not in (logs / "commands.log").read_text()
    assert int(pidfile.read_text()) in mps_daemons(root).values()  # it runs on


def test_mps_compute_mode(plugin_agent, tmp_path):
    """exclusive-process is set on the MPS GPUs, kept at exit (the daemon and
    its clients run on) and restored once MPS leaves the config (the
    simulator takes the mode; a real node needs root for it)."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(MPS)
    a = plugin_agent("--simulate", "t4", "--config-file", str(cfg), "--mps-root",
                     str(tmp_path / "mps"), "--mps-control", FAKE_MPS,
                     "--mps-compute-mode", "exclusive-process")
    a.wait_log("MPS: GPU 0 compute mode EXCLUSIVE_PROCESS")
    a.wait_log("MPS daemon for nvidia.com/gpu is up")
    cfg.write_text("version: v1\n")
    a.proc.send_signal(signal.SIGHUP)
    a.wait_log("MPS: GPU 0 compute mode restored")
    a.wait_log("MPS daemon for nvidia.com/gpu stopped")
    assert a.stop() == 0


def test_mps_bad_config(agent, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(MPS)
    a = agent("--simulate", "t4", "--config-file", str(cfg), "--mps-root", str(tmp_path / "m"),
              "--mps-control", "/nonexistent/nvidia-cuda-mps-control", "--no-metrics",
              "--kubelet-root", str(tmp_path / "k"), "--status-socket", str(tmp_path / "s.sock"))
    assert a.proc.wait(timeout=10) == 1
    assert ("sharing.mps: --mps-control /nonexistent/nvidia-cuda-mps-control cannot be run"
            in a.log())
    cfg.write_text(MPS.replace("replicas: 2}", "replicas: 2, memoryLimit: 1Tb}"))
    b = agent("--simulate", "t4", "--config-file", str(cfg), "--no-metrics")
    assert b.proc.wait(timeout=10) == 1
    assert "sharing.mps.resources[0].memoryLimit must be a size of at least 1Mi such as 8Gi" in b.log()
    cfg.write_text(MPS)
    c = agent("--simulate", "t4", "--config-file", str(cfg), "--no-metrics",
              "--mig-strategy", "mixed")
    assert c.proc.wait(timeout=10) == 1
    assert "sharing.mps cannot be combined with MIG strategy mixed" in c.log()


@pytest.mark.skipif(SANITIZED or not shutil.which("valgrind"), reason="valgrind runs on the plain build")
def test_valgrind_sharing(plugin_agent, kubelet, tmp_path):
    """MPS daemon start, death, restart, a reload and quit, and time-slicing
    Allocate and preferred allocation, under valgrind: no leaks, no invalid
    accesses."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(MPS)
    root = tmp_path / "mps"
    a = plugin_agent("--simulate", "l4-pcie", "--config-file", str(cfg), "--mps-root", str(root),
                     "--mps-control", FAKE_MPS,
                     prefix=("valgrind", "--error-exitcode=9", "--leak-check=full",
                             "--errors-for-leak-kinds=definite,indirect", "-q"))
    a.wait_log("MPS daemon for nvidia.com/gpu is up", timeout=30)
    pidfile = root / "nvidia.com" / "gpu" / "pipe" / "nvidia-cuda-mps-control.pid"
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    a.wait_log("restarting it with a backoff", timeout=30)
    wait_for(lambda: a.log().count("MPS daemon for nvidia.com/gpu is up") == 2, timeout=30)
    cfg.write_text(TS)
    a.proc.send_signal(signal.SIGHUP)
    kubelet.wait_registrations(3, timeout=30)  # then nvidia.com/gpu and .shared, in either order
    req = next(r for _, r in kubelet.registrations[1:] if r.resource_name == "nvidia.com/gpu.shared")
    channel, stub, stream, first = stream_of(kubelet, req.endpoint)
    ids = [d.ID for d in first.devices]
    pb = kubelet.pb
    stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=3)]))
    stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=ids[:2])]), timeout=10)
    stream.cancel()
    channel.close()
    assert a.stop(timeout=60) == 0, a.log()
    assert "MPS daemon for nvidia.com/gpu stopped" in a.log()


def test_mps_without_a_gpu(plugin_agent, gpulet, sim_env, tmp_path):
    """MPS tried on a laptop: the simulator's driver tree has a stand-in
    nvidia-cuda-mps-control that takes the limits and answers for them,
    found as the driver's own (no --mps-control)."""
    root = tmp_path / "driver"
    gpulet("sim", "driver-root", str(root))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(MPS)
    mps = tmp_path / "mps"
    a = plugin_agent("--simulate", "t4", "--config-file", str(cfg), "--mps-root", str(mps),
                     "--nvidia-driver-root", str(root))
    a.wait_log("MPS daemon for nvidia.com/gpu is up")
    pipe, log = mps / "nvidia.com" / "gpu" / "pipe", mps / "nvidia.com" / "gpu" / "log"
    assert (log / "commands.log").read_text() == (
        "set_default_active_thread_percentage 50\nset_default_device_pinned_mem_limit 0 7680M\n")
    ask = subprocess.run([str(root / "usr" / "bin" / "nvidia-cuda-mps-control")], text=True,
                         input="get_default_active_thread_percentage\nget_default_device_pinned_mem_limit 0\n",
                         capture_output=True, timeout=10,
                         env=dict(sim_env, CUDA_MPS_PIPE_DIRECTORY=str(pipe), CUDA_MPS_LOG_DIRECTORY=str(log)))
    assert ask.stdout.split() == ["50.0", "7680M"], ask
    assert a.stop() == 0
    assert (pipe / "nvidia-cuda-mps-control.pid").exists()  # it runs on, to be adopted


MPS_ON = ("version: v1\nsharing:\n  mps:\n    resources:\n"
          "    - {{name: nvidia.com/gpu, replicas: 2, devices: [{gpus}]{extra}}}\n")


def test_mps_clients_outlive_gpulet(plugin_agent, kubelet, gpulet, sim_env, tmp_path):
    """What an upgrade, a crash and a reload do to an MPS job (issue 38):
    with the simulator's stand-ins (its daemon refuses a second instance and
    holds a quit until its clients end, as the real one does; its client
    fails at once, for good, when its daemon goes, as a CUDA client does
    with error 806), a client
    keeps running through SIGKILL and a new start (the daemon adopted, not
    started twice), SIGTERM and a new start, a reload with the config
    unchanged, and a reload of new limits (sent to the same daemon). A
    reload that moves the resource to other GPUs says which daemon stops,
    that its clients lose it, and when; the client's end lets it go at once."""
    root = tmp_path / "driver"
    gpulet("sim", "driver-root", str(root))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(MPS_ON.format(gpus=0, extra=""))
    mps = tmp_path / "mps"
    pipe, log = mps / "nvidia.com" / "gpu.shared" / "pipe", mps / "nvidia.com" / "gpu.shared" / "log"
    args = ("--simulate", "dgx-h100", "--config-file", str(cfg), "--mps-root", str(mps),
            "--nvidia-driver-root", str(root))
    a = plugin_agent(*args)
    a.wait_log("MPS daemon for nvidia.com/gpu.shared is up, started")
    client = subprocess.Popen([str(root / "usr/bin/gpulet-mps-client")], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=dict(sim_env, CUDA_MPS_PIPE_DIRECTORY=str(pipe)))
    try:
        assert "bound to daemon" in client.stdout.readline()
        starts = lambda: (log / "control.log").read_text().count("start pid=")

        def still_running(seconds=4.0):
            """The stand-in fails within 3 s of its daemon's going."""
            time.sleep(seconds)
            assert client.poll() is None, client.stdout.read()
        a.stop(signal.SIGKILL)
        still_running()
        a = plugin_agent(*args)
        a.wait_log("MPS daemon for nvidia.com/gpu.shared is up, adopted")
        assert starts() == 1
        assert a.stop() == 0
        assert "MPS daemon for nvidia.com/gpu.shared (pid" in a.log() and "runs on" in a.log()
        still_running()
        a = plugin_agent(*args)
        a.wait_log("MPS daemon for nvidia.com/gpu.shared is up, adopted")
        a.proc.send_signal(signal.SIGHUP)  # unchanged
        wait_for(lambda: a.log().count("MPS daemon for nvidia.com/gpu.shared is up, adopted") == 2)
        cfg.write_text(MPS_ON.format(gpus=0, extra=", memoryLimit: 20Gi"))
        a.proc.send_signal(signal.SIGHUP)  # new limits, for the daemon's new servers
        wait_for(lambda: "set_default_device_pinned_mem_limit 0 20480M" in
                 (log / "commands.log").read_text())
        still_running(1)
        assert starts() == 1
        # Another GPU: the daemon must go; its quit waits while the client runs.
        cfg.write_text(MPS_ON.format(gpus=1, extra=""))
        a.proc.send_signal(signal.SIGHUP)
        a.wait_log("MPS daemon for nvidia.com/gpu.shared (pid")
        a.wait_log("is stopped, and its running clients lose it in 30 s at most")
        wait_for(lambda: "will not shutdown" in (log / "control.log").read_text())
        assert client.poll() is None
        client.terminate()  # the job ends: the daemon goes at the next quit, a new one starts
        client.wait(timeout=5)
        a.wait_log("starting it for its GPUs now")
        wait_for(lambda: starts() == 2)
        assert (log / "control.log").read_text().splitlines()[-1].startswith("start pid=")
        a.wait_log("MPS daemon for nvidia.com/gpu.shared is up, started")
        # MPS leaves the config: the daemon nothing needs is ended.
        cfg.write_text(TS)
        a.proc.send_signal(signal.SIGHUP)
        a.wait_log("nothing needs it any more")
        wait_for(lambda: not mps_daemons(mps))
        wait_for(lambda: a.log().count("MPS daemon for nvidia.com/gpu.shared stopped") == 2)
        assert a.stop() == 0
    finally:
        if client.poll() is None:
            client.kill()


def test_mps_client_loses_a_killed_daemon(plugin_agent, gpulet, sim_env, tmp_path):
    """The stand-ins fail as the real ones do: a client whose daemon dies
    fails for good, though the agent starts a new daemon at once; and a
    second daemon on the same pipe directory is refused."""
    root = tmp_path / "driver"
    gpulet("sim", "driver-root", str(root))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(MPS)
    mps = tmp_path / "mps"
    pipe, log = mps / "nvidia.com" / "gpu" / "pipe", mps / "nvidia.com" / "gpu" / "log"
    a = plugin_agent("--simulate", "t4", "--config-file", str(cfg), "--mps-root", str(mps),
                     "--nvidia-driver-root", str(root))
    a.wait_log("MPS daemon for nvidia.com/gpu is up")
    env = dict(sim_env, CUDA_MPS_PIPE_DIRECTORY=str(pipe), CUDA_MPS_LOG_DIRECTORY=str(log))
    second = subprocess.run([str(root / "usr/bin/nvidia-cuda-mps-control"), "-f"], env=env,
                            capture_output=True, text=True, timeout=10)
    assert second.returncode == 1 and "An instance of this daemon is already running" in second.stdout
    client = subprocess.Popen([str(root / "usr/bin/gpulet-mps-client")], text=True, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert "bound to daemon" in client.stdout.readline()
    os.kill(int((pipe / "nvidia-cuda-mps-control.pid").read_text()), signal.SIGKILL)
    assert client.wait(timeout=10) == 1
    assert "CUDA_ERROR_MPS_RPC_FAILURE (806)" in client.stdout.read()
    a.wait_log("MPS daemon for nvidia.com/gpu exited")
    wait_for(lambda: a.log().count("MPS daemon for nvidia.com/gpu is up") == 2, timeout=15)
    assert a.stop() == 0


def test_mps_daemon_that_keeps_failing(agent, tmp_path):
    """A daemon that exits at once is restarted with a growing backoff, and
    the outage is said once, not at every restart."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(MPS)
    broken = tmp_path / "nvidia-cuda-mps-control"
    broken.write_text("#!/bin/sh\necho started >>\"$CUDA_MPS_LOG_DIRECTORY/starts\"\nexit 3\n")
    broken.chmod(0o755)
    mps = tmp_path / "mps"
    a = agent("--simulate", "t4", "--config-file", str(cfg), "--mps-root", str(mps), "--mps-control",
              str(broken), "--no-metrics", "--kubelet-root", str(tmp_path / "k"),
              "--status-socket", str(tmp_path / "s.sock"))
    starts = mps / "nvidia.com" / "gpu" / "log" / "starts"
    wait_for(lambda: starts.exists() and starts.read_text().count("started") >= 3, timeout=15)
    assert a.log().count("MPS daemon for nvidia.com/gpu exited") == 1, a.log()
    assert "restarting it with a backoff of 1000 ms doubling to 30 s" in a.log()
    assert a.stop() == 0


def test_mps_daemon_ends_after_an_uninstall(plugin_agent, gpulet, sim_env, tmp_path):
    """Uninstalled, no gpulet touches the daemon's lease any more: once it is
    older than GPULET_MPS_LEASE, the daemon's keeper says quit every minute,
    which the daemon refuses while a client runs and takes after its last:
    nothing is left behind."""
    root = tmp_path / "driver"
    gpulet("sim", "driver-root", str(root))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(MPS)
    mps = tmp_path / "mps"
    env = dict(sim_env, GPULET_MPS_LEASE="1")
    a = plugin_agent("--simulate", "t4", "--config-file", str(cfg), "--mps-root", str(mps),
                     "--nvidia-driver-root", str(root), env=env)
    a.wait_log("MPS daemon for nvidia.com/gpu is up")
    pipe, log = mps / "nvidia.com" / "gpu" / "pipe", mps / "nvidia.com" / "gpu" / "log"
    client = subprocess.Popen([str(root / "usr/bin/gpulet-mps-client")], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=dict(sim_env, CUDA_MPS_PIPE_DIRECTORY=str(pipe)))
    assert "bound to daemon" in client.stdout.readline()
    assert a.stop() == 0  # uninstalled: no gpulet comes back
    wait_for(lambda: "will not shutdown" in (log / "control.log").read_text(), timeout=90)
    assert client.poll() is None and mps_daemons(mps)
    client.terminate()
    client.wait(timeout=5)
    wait_for(lambda: not mps_daemons(mps), timeout=90)


def test_mps_hand_over(plugin_agent, kubelet, gpulet, sim_env, tmp_path):
    """A rolling update with maxSurge: the new agent (--take-over) starts
    while the old one runs, asks it to hand over, and serves in its place
    (registered again, the MPS daemon adopted) while the old one, serving
    nothing, waits for its stop; an MPS job runs through it all. Without
    --take-over a second agent is still refused. The stand-in kubelet acts
    as the device manager: the new registration keeps the resource."""
    kubelet.manage, kubelet.disconnect_delay = True, 0.3
    root = tmp_path / "driver"
    gpulet("sim", "driver-root", str(root))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(MPS)
    mps = tmp_path / "mps"
    args = ("--simulate", "t4", "--config-file", str(cfg), "--mps-root", str(mps),
            "--nvidia-driver-root", str(root), "--take-over")
    old = plugin_agent(*args)
    old.wait_log("MPS daemon for nvidia.com/gpu is up, started")
    pipe = mps / "nvidia.com" / "gpu" / "pipe"
    client = subprocess.Popen([str(root / "usr/bin/gpulet-mps-client")], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=dict(sim_env, CUDA_MPS_PIPE_DIRECTORY=str(pipe)))
    try:
        assert "bound to daemon" in client.stdout.readline()
        new = plugin_agent(*args)  # waits for its registration
        new.wait_log("took over from the gpulet agent (PID")
        new.wait_log("MPS daemon for nvidia.com/gpu is up, adopted")
        old.wait_log(f"handing over to the gpulet agent PID {new.proc.pid}")
        kubelet.wait_for(lambda: kubelet.disconnects == 1, "the old plugin's disconnect")
        kubelet.wait_for(lambda: kubelet.allocatable("nvidia.com/gpu") == 2, "the new plugin's devices")
        # The new plugin registered once it had adopted the daemon: its
        # devices were never listed Unhealthy (a node status then would
        # show the resource's allocatable below its capacity).
        assert [l for l in kubelet.lists if l[1] == 2] == [("nvidia.com/gpu", 2, 2, 2)], kubelet.lists
        new.wait_log("nvidia.com/gpu: registering with the kubelet once its MPS daemon is up")
        assert old.proc.poll() is None  # it waits for its stop
        status = gpulet("health", "--status-socket", str(tmp_path / "status.sock"))
        assert status.returncode == 0, status
        old.proc.send_signal(signal.SIGHUP)
        old.wait_log("SIGHUP: this agent handed over; nothing to reload")
        assert old.stop() == 0
        time.sleep(4)  # the stand-in fails within 3 s of its daemon's going
        assert client.poll() is None, client.stdout.read()
        assert (mps / "nvidia.com/gpu/log/control.log").read_text().count("start pid=") == 1
        # The new one serves on after the old one's stop: its plugin answers.
        channel, stub = kubelet.plugin()
        devs = next(stub.ListAndWatch(kubelet.pb.Empty(), timeout=STREAM_S)).devices
        assert len(devs) == 2 and all(d.health == "Healthy" for d in devs)
        channel.close()
        assert new.stop() == 0
    finally:
        client.kill()


def test_mps_exec_usage(gpulet):
    """gpulet mps-exec is the agent's, but a bad command line is still one
    usage line and exit 2, not a daemon started with half its options."""
    for args in ((), ("--bogus", "shm", "prog"), ("--host",), ("--client",)):
        p = gpulet("mps-exec", *args)
        assert p.returncode == 2 and p.stderr.startswith("usage: gpulet mps-exec"), (args, p)


# What the stand-ins must answer as the driver's nvidia-cuda-mps-control did
# on an H200 (tests/realgpu/data/mps-control-580.json): (probe, field). Not
# held: get_default_device_pinned_mem_limit's unit (the real one said "7G"
# for 7680M; gpulet never reads it), the pipe directory's files (the real
# one's are named pipes), and how SIGTERM ends it (by the signal, or exit 0).
MPS_CONTRACT = [
    ("no daemon", "rc"), ("no daemon", "stderr"),
    ("-f", "pid file holds its pid"),
    ("second -f", "rc"), ("second -f", "stdout"), ("second -f", "first still runs"),
    ("set_default_active_thread_percentage 50", "rc"), ("set_default_active_thread_percentage 50", "stdout"),
    ("get_default_active_thread_percentage", "stdout"),
    ("set_default_device_pinned_mem_limit 0 7680M", "rc"),
    ("client bound", None),
    ("quit with a client", "quit has returned"), ("quit with a client", "control still runs"),
    ("quit with a client", "client still runs"),
    ("after the client ends", "quit returns within 10 s"), ("after the client ends", "quit's status"),
    ("after the client ends", "control ends within 10 s"),
    ("quit with none", "rc"), ("quit with none", "control ends within 10 s"),
    ("SIGTERM", "ends within 10 s"),
]


@pytest.mark.parametrize("stand_in", ["driver-root", "fake_mps_control"])
def test_stand_ins_keep_the_real_contract(gpulet, tmp_path, stand_in):
    """The MPS stand-ins the suite tests gpulet with answer the probes of
    tests/realgpu/mps_contract.py as the real control program did (quit
    while a client runs does not return, and the daemon ends once it has
    gone), so a test that passes on them means what it would on a GPU."""
    import json
    root = tmp_path / "driver"
    gpulet("sim", "driver-root", str(root))
    control = str(root / "usr/bin/nvidia-cuda-mps-control") if stand_in == "driver-root" else FAKE_MPS
    p = subprocess.run([sys.executable, str(SOURCE / "tests/realgpu/mps_contract.py"), control,
                        str(root / "usr/bin/gpulet-mps-client")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    real = json.loads((SOURCE / "tests/realgpu/data/mps-control-580.json").read_text())
    pick = lambda d, probe, field: d[probe] if field is None else d[probe][field]
    wrong = {f"{probe}: {field}": (pick(got, probe, field), pick(real, probe, field))
             for probe, field in MPS_CONTRACT if pick(got, probe, field) != pick(real, probe, field)}
    assert not wrong, wrong   # {what: (stand-in's, real one's)}
    for said in (got, real):
        assert any("Server will not shutdown." in l for l in said["quit with a client"]["log"]), said
