"""The device plugin driven by a real gRPC peer (Debian's python3-grpcio)
acting as the kubelet, on the simulator."""
import json
import shutil
import signal
import subprocess
import threading
import time

import grpc
import pytest

from conftest import GPULET, SANITIZED, STREAM_S


def sim(env, *args):
    p = subprocess.run([GPULET, "sim", *args], capture_output=True, text=True, env=env, timeout=10)
    assert p.returncode == 0, p.stderr
    return p.stdout


def devices(kubelet):
    channel, stub = kubelet.plugin()
    stream = stub.ListAndWatch(kubelet.pb.Empty(), timeout=STREAM_S)
    return channel, stub, stream, next(stream)


def allocate(kubelet, stub, *containers):
    pb = kubelet.pb
    req = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=list(ids))
                                                 for ids in containers])
    return stub.Allocate(req, timeout=5)


def test_registration_and_device_list(plugin_agent, kubelet):
    plugin_agent("--simulate", "dgx-h100")
    _, req = kubelet.registrations[0]
    assert req.version == "v1beta1"
    assert req.endpoint == "gpulet-nvidia-gpu.sock"
    assert req.resource_name == "nvidia.com/gpu"
    assert req.options.get_preferred_allocation_available
    channel, stub, stream, first = devices(kubelet)
    assert len(first.devices) == 8
    assert all(d.ID.startswith("GPU-") and d.health == "Healthy" for d in first.devices)
    assert [d.topology.nodes[0].ID for d in first.devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    opts = stub.GetDevicePluginOptions(kubelet.pb.Empty())
    assert opts.get_preferred_allocation_available and not opts.pre_start_required
    stub.PreStartContainer(kubelet.pb.PreStartContainerRequest(devices_ids=[first.devices[0].ID]))
    stream.cancel()
    channel.close()


def test_index_ids_and_envvar(plugin_agent, kubelet):
    plugin_agent("--simulate", "l4-pcie", "--device-id-strategy", "index")
    channel, stub, stream, first = devices(kubelet)
    assert [d.ID for d in first.devices] == ["0", "1", "2", "3"]
    r = allocate(kubelet, stub, ["1", "3"])
    assert dict(r.container_responses[0].envs) == {"NVIDIA_VISIBLE_DEVICES": "1,3"}
    stream.cancel()


def test_allocate_each_strategy(plugin_agent, kubelet, tmp_path):
    devroot = tmp_path / "devroot"
    (devroot / "dev").mkdir(parents=True)
    for node in ("nvidiactl", "nvidia-uvm"):
        (devroot / "dev" / node).touch()
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\nflags:\n  plugin:\n    passDeviceSpecs: true\n"
                   "    deviceListStrategy: [volume-mounts, cdi-annotations, cdi-cri]\n")
    plugin_agent("--simulate", "dgx-h100", "--config-file", str(cfg),
                 "--nvidia-dev-root", str(devroot))
    channel, stub, stream, first = devices(kubelet)
    a, b = first.devices[2].ID, first.devices[6].ID
    r = allocate(kubelet, stub, [a], [b]).container_responses
    assert len(r) == 2
    c = r[0]
    assert dict(c.envs) == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [(m.host_path, m.container_path, m.read_only) for m in c.mounts] == [
        ("/dev/null", f"/var/run/nvidia-container-devices/{a}", True)]
    assert [d.name for d in c.cdi_devices] == [f"nvidia.com/gpu={a}"]
    assert dict(c.annotations) == {f"cdi.k8s.io/gpulet_{a}": f"nvidia.com/gpu={a}"}
    assert [(d.container_path, d.host_path, d.permissions) for d in c.devices] == [
        ("/dev/nvidiactl", f"{devroot}/dev/nvidiactl", "rw"),
        ("/dev/nvidia-uvm", f"{devroot}/dev/nvidia-uvm", "rw"),
        ("/dev/nvidia2", f"{devroot}/dev/nvidia2", "rw")]
    assert r[1].devices[-1].container_path == "/dev/nvidia6"
    stream.cancel()


def test_allocate_errors(plugin_agent, kubelet):
    plugin_agent("--simulate", "t4")
    channel, stub, stream, first = devices(kubelet)
    gpu = first.devices[0].ID
    for containers, text in ((["GPU-nope"],), "unknown device ID 'GPU-nope'"), \
                            (([gpu, gpu],), "requested twice"), \
                            (([gpu], [gpu]), "requested twice"):
        with pytest.raises(grpc.RpcError) as e:
            allocate(kubelet, stub, *containers)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert text in e.value.details()
    # A request over 4 MiB is refused, not buffered.
    with pytest.raises(grpc.RpcError) as e:
        allocate(kubelet, stub, ["x" * (5 << 20)])
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # A method the plugin does not have.
    call = channel.unary_unary("/v1beta1.DevicePlugin/GetDevicePluginStatus")
    with pytest.raises(grpc.RpcError) as e:
        call(b"", timeout=5)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # Garbage instead of a protobuf message.
    call = channel.unary_unary("/v1beta1.DevicePlugin/Allocate")
    with pytest.raises(grpc.RpcError) as e:
        call(b"\xff\xff\xff", timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # And the plugin still answers afterwards.
    assert allocate(kubelet, stub, [gpu]).container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == gpu
    stream.cancel()


def preferred(kubelet, stub, available, must, size):
    pb = kubelet.pb
    r = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=available,
                                               must_include_deviceIDs=must, allocation_size=size)]))
    return list(r.container_responses[0].deviceIDs)


@pytest.mark.parametrize("preset,size,must,want", [
    ("dgx-h100", 4, [], [0, 1, 2, 3]),
    ("dgx-h100", 2, [6], [4, 6]),          # 4, 5, 7 are equally close to 6: lowest wins
    ("dgx-h100", 8, [], list(range(8))),
    ("a100-2x4", 4, [], [0, 1, 2, 3]),
    ("a100-2x4", 2, [5], [4, 5]),
    ("a100-2x4", 4, [7], [4, 5, 6, 7]),
    ("l4-pcie", 2, [], [0, 1]),
    ("l4-pcie", 2, [2], [2, 3]),
])
def test_preferred_allocation(plugin_agent, kubelet, preset, size, must, want):
    plugin_agent("--simulate", preset, "--device-id-strategy", "index")
    channel, stub = kubelet.plugin()
    ids = [str(i) for i in range(8 if preset != "l4-pcie" else 4)]
    got = preferred(kubelet, stub, ids, [str(m) for m in must], size)
    assert sorted(int(g) for g in got) == want


def test_preferred_allocation_errors(plugin_agent, kubelet):
    plugin_agent("--simulate", "l4-pcie", "--device-id-strategy", "index")
    channel, stub = kubelet.plugin()
    for avail, must, size, text in ((["0", "9"], [], 1, "unknown device ID '9'"),
                                    (["0", "1"], ["2"], 1, "not among the available"),
                                    (["0", "1"], [], 3, "cannot choose 3 devices"),
                                    # A size from the wire never sizes a buffer.
                                    (["0", "1"], [], 2**31 - 1, "cannot choose 2147483647"),
                                    (["0", "1"], [], -1, "cannot choose -1 devices")):
        with pytest.raises(grpc.RpcError) as e:
            preferred(kubelet, stub, avail, must, size)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and text in e.value.details()


def test_kubelet_restarts(plugin_agent, kubelet):
    """20 kubelet restarts in a row: each time every socket is deleted and a
    new kubelet.sock appears; the plugin is registered again as it appears
    (inotify, not a poll: within 2 s on a loaded machine)."""
    plugin_agent("--simulate", "dgx-h100")
    for n in range(2, 22):
        t0 = time.monotonic()
        kubelet.restart()
        t, req = kubelet.wait_registrations(n, timeout=5)
        assert t - t0 < 2.0, f"restart {n - 1}: registered after {t - t0:.3f} s"
        assert (kubelet.dir / req.endpoint).exists()
    channel, stub, stream, first = devices(kubelet)
    assert len(first.devices) == 8
    stream.cancel()


def test_kubelet_starts_later(agent, kubelet, tmp_path):
    kubelet.stop()
    a = agent("--simulate", "t4", "--kubelet-root", str(kubelet.root),
              "--status-socket", str(tmp_path / "s.sock"))
    a.wait_log("agent running")
    time.sleep(0.3)
    assert not kubelet.registrations
    kubelet.start(wipe=False)
    kubelet.wait_registrations(1, timeout=2)


def test_registration_failures_back_off(plugin_agent, kubelet):
    kubelet.fail_next = 3
    a = plugin_agent("--simulate", "t4")
    a.wait_log("retrying")
    assert len(kubelet.registrations) == 1


def test_deleted_socket_is_recreated(plugin_agent, kubelet):
    a = plugin_agent("--simulate", "t4")
    sock = kubelet.dir / "gpulet-nvidia-gpu.sock"
    sock.unlink()
    kubelet.wait_registrations(2, timeout=2)
    assert sock.exists()
    a.wait_log("was removed; serving on it again")
    channel, stub, stream, first = devices(kubelet)
    assert len(first.devices) == 1
    stream.cancel()


def wait_health(stream, index, health, timeout=2.0):
    """Reads ListAndWatch updates until device index has the given health,
    within timeout seconds: a matching update that comes later fails, and
    so does none at all (the stream is cancelled at the deadline)."""
    t0 = time.monotonic()
    timer = threading.Timer(timeout, stream.cancel)
    timer.start()
    try:
        for update in stream:
            took = time.monotonic() - t0
            assert took < timeout, f"device {index} not {health} within {timeout} s ({took:.2f} s)"
            if update.devices[index].health == health:
                return took
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.CANCELLED:
            raise
        raise AssertionError(f"device {index} not {health} within {timeout} s (no update)") from None
    finally:
        timer.cancel()
    raise AssertionError("stream ended")


def test_xid_unhealthy_then_recovers(plugin_agent, kubelet, sim_env):
    plugin_agent("--simulate", "dgx-h100", "--xid-recovery-seconds", "1",
                 "--health-probe-ms", "100")
    channel, stub, stream, first = devices(kubelet)
    sim(sim_env, "xid", "3", "94")
    wait_health(stream, 3, "Unhealthy")
    assert wait_health(stream, 3, "Healthy", timeout=5) > 0.5   # after the quiet second
    sim(sim_env, "xid", "3", "13")                              # an application error
    sim(sim_env, "xid", "2", "94")
    update = next(stream)
    assert [d.health for d in update.devices][2:4] == ["Unhealthy", "Healthy"]
    stream.cancel()


def test_ecc_and_lost_recover_after_reset(plugin_agent, kubelet, sim_env, tmp_path):
    a = plugin_agent("--simulate", "dgx-h100", "--xid-recovery-seconds", "0",
                     "--health-probe-ms", "100")
    channel, stub, stream, first = devices(kubelet)
    sim(sim_env, "ecc", "1")
    wait_health(stream, 1, "Unhealthy")
    sim(sim_env, "lose", "5")
    wait_health(stream, 5, "Unhealthy")
    time.sleep(0.5)                                  # no reset yet: both stay unhealthy
    health = subprocess.run([GPULET, "health", "--status-socket", str(tmp_path / "status.sock")],
                            capture_output=True, text=True).stdout.splitlines()[1:]  # its header left out
    assert "double-bit ECC error" in health[1] and health[1].split()[1] == "Unhealthy"
    # The event's XID 79, or the probe's "lost" where the probe came first
    # (a slow build or a busy machine): the same fault, either way.
    assert "XID 79" in health[5] or "GPU is lost" in health[5], health[5]
    sim(sim_env, "recover", "1")                     # a reset zeroes the volatile DBE count
    wait_health(stream, 1, "Healthy", timeout=3)
    sim(sim_env, "recover", "5")                     # the GPU answers NVML again
    wait_health(stream, 5, "Healthy", timeout=3)
    a.wait_log("GPU 5 (GPU-")
    # After its reset the GPU is watched again: a new XID is seen.
    sim(sim_env, "xid", "5", "94")
    wait_health(stream, 5, "Unhealthy")
    stream.cancel()


def test_xid79_stays_until_recover(plugin_agent, kubelet, sim_env):
    """A real XID 79 comes with the GPU lost; only a reset brings it back."""
    plugin_agent("--simulate", "dgx-h100", "--health-probe-ms", "100")
    channel, stub, stream, first = devices(kubelet)
    sim(sim_env, "xid", "3", "79")
    wait_health(stream, 3, "Unhealthy")
    time.sleep(1.0)                                  # ten probes: still lost, still unhealthy
    _, _, stream2, now = devices(kubelet)
    assert now.devices[3].health == "Unhealthy"
    sim(sim_env, "recover", "3")
    wait_health(stream, 3, "Healthy", timeout=3)
    stream.cancel()
    stream2.cancel()


def test_operator_clear_and_list(plugin_agent, kubelet, sim_env, tmp_path):
    status = str(tmp_path / "status.sock")
    plugin_agent("--simulate", "l4-pcie", "--xid-recovery-seconds", "0")
    channel, stub, stream, first = devices(kubelet)
    sim(sim_env, "xid", "2", "62")
    wait_health(stream, 2, "Unhealthy")
    table = subprocess.run([GPULET, "list", "--simulate", "l4-pcie", "--status-socket", status],
                           capture_output=True, text=True, env=sim_env).stdout.splitlines()
    assert "Unhealthy (XID 62 since" in table[3]
    doc = json.loads(subprocess.run([GPULET, "list", "--simulate", "l4-pcie", "-o", "json",
                                     "--status-socket", status], capture_output=True, text=True,
                                    env=sim_env).stdout)
    assert doc["gpus"][2]["health"] == "Unhealthy" and "XID 62" in doc["gpus"][2]["health_reason"]
    bad = subprocess.run([GPULET, "health", "--status-socket", status, "clear", "7"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "no GPU '7'" in bad.stderr
    ok = subprocess.run([GPULET, "health", "--status-socket", status, "clear", first.devices[2].ID],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    wait_health(stream, 2, "Healthy")
    stream.cancel()


def test_health_checks_disabled(plugin_agent, kubelet, sim_env, monkeypatch):
    sim_env["DP_DISABLE_HEALTHCHECKS"] = "all"
    a = plugin_agent("--simulate", "t4")
    a.wait_log("health checking is off")
    channel, stub, stream, first = devices(kubelet)
    sim(sim_env, "xid", "0", "79")
    time.sleep(0.3)
    channel2, stub2, stream2, again = devices(kubelet)
    assert again.devices[0].health == "Healthy"
    stream.cancel()
    stream2.cancel()


def test_bad_health_variable(agent, kubelet, sim_env):
    sim_env["DP_ENABLE_HEALTHCHECKS"] = "48,seventy-nine"
    a = agent("--simulate", "t4", "--kubelet-root", str(kubelet.root))
    assert a.proc.wait(timeout=10) == 2  # a bad environment is a bad command line
    assert "DP_ENABLE_HEALTHCHECKS=48,seventy-nine: 'seventy-nine' is not an XID number" in a.log()


def test_socket_paths_too_long(agent, tmp_path):
    """Socket paths longer than a unix socket takes are refused at start,
    saying so: the plugin's and the status socket's."""
    root = tmp_path / ("k" * 90)
    status = tmp_path / ("s" * 110)
    a = agent("--simulate", "t4", "--kubelet-root", str(root), "--no-metrics",
              "--status-socket", str(tmp_path / "s.sock"))
    assert a.proc.wait(timeout=10) == 1
    assert f"--kubelet-root {root} is too long" in a.log()
    assert "unix sockets take at most 107" in a.log()
    b = agent("--simulate", "t4", "--kubelet-root", str(tmp_path / "k"), "--no-metrics",
              "--status-socket", str(status))
    assert b.proc.wait(timeout=10) == 1
    assert f"--status-socket {status} is longer than the 107 bytes" in b.log()


def test_agent_restart(plugin_agent, kubelet):
    a = plugin_agent("--simulate", "t4")
    a.proc.kill()
    a.proc.wait()
    plugin_agent("--simulate", "t4")
    assert len(kubelet.registrations) == 2


def test_sighup_reload(plugin_agent, kubelet, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\n")
    a = plugin_agent("--simulate", "l4-pcie", "--config-file", str(cfg))
    cfg.write_text("version: v1\nflags:\n  plugin:\n    deviceIDStrategy: index\n")
    a.proc.send_signal(signal.SIGHUP)
    kubelet.wait_registrations(2, timeout=3)
    a.wait_log("SIGHUP: config reloaded")  # a reload that works says so too
    channel, stub, stream, first = devices(kubelet)
    assert [d.ID for d in first.devices] == ["0", "1", "2", "3"]
    stream.cancel()
    cfg.write_text("version: v1\nflags:\n  plugin:\n    deviceIDStrategy: serial\n")
    a.proc.send_signal(signal.SIGHUP)
    a.wait_log("config not reloaded, keeping the running one")
    a.wait_log(f"{cfg}:4:23: flags.plugin.deviceIDStrategy must be one of uuid, index")
    channel, stub, stream, first = devices(kubelet)
    assert first.devices[0].ID == "0"                 # still serving the old config
    stream.cancel()


def test_config_errors_at_start(agent, kubelet, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                   "    - name: nvidia.com/gpu\n      replicas: 1\n")
    a = agent("--simulate", "t4", "--kubelet-root", str(kubelet.root), "--config-file", str(cfg))
    assert a.proc.wait(timeout=10) == 1
    assert (f"{cfg}:6:17: sharing.timeSlicing.resources[0].replicas must be from 2 to 1024, "
            "not '1'") in a.log()


def test_fail_on_init_error(agent, kubelet, tmp_path):
    a = agent("--nvml", "/nonexistent/libnvidia-ml.so.1", "--kubelet-root", str(kubelet.root))
    assert a.proc.wait(timeout=10) == 1
    assert "cannot load NVML" in a.log()
    b = agent("--nvml", "/nonexistent/libnvidia-ml.so.1", "--kubelet-root", str(kubelet.root),
              "--fail-on-init-error", "false", "--status-socket", str(tmp_path / "s.sock"),
              "--no-metrics")  # :9400 may be another test's
    b.wait_log("advertising no GPUs")
    time.sleep(0.2)
    assert b.proc.poll() is None                      # runs on, for nodes without GPUs
    assert b.stop() == 0


def test_a_node_without_gpus_is_healthy(agent, kubelet, gpulet, tmp_path):
    """failOnInitError=false lets one DaemonSet cover nodes without GPUs: there
    the agent advertises nothing but answers its probes (deploy/'s liveness
    probe would restart it for ever otherwise), and `gpulet health` says
    there is no GPU and why, not that it cannot reach the agent."""
    import socket
    import urllib.request
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sock = tmp_path / "s.sock"
    a = agent("--nvml", "/nonexistent/libnvidia-ml.so.1", "--kubelet-root", str(kubelet.root),
              "--fail-on-init-error", "false", "--status-socket", str(sock),
              "--metrics-listen", f"127.0.0.1:{port}")
    a.wait_log("agent running, with no GPU")
    for path, body in (("/healthz", "ok"), ("/readyz", "ready")):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            assert r.status == 200 and r.read().decode().strip() == body
    p = gpulet("health", "--status-socket", str(sock))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("no GPU on this node: cannot load NVML"), p.stdout
    assert not kubelet.registrations
    assert a.stop() == 0


def test_sigterm_removes_socket(plugin_agent, kubelet):
    a = plugin_agent("--simulate", "t4")
    sock = kubelet.dir / "gpulet-nvidia-gpu.sock"
    assert sock.exists()
    assert a.stop() == 0
    assert not sock.exists()


@pytest.mark.skipif(SANITIZED or not shutil.which("valgrind"), reason="valgrind runs on the plain build")
def test_valgrind_agent(plugin_agent, kubelet, sim_env):
    """One whole session under valgrind, metrics included: no leaks, no invalid accesses."""
    import socket
    import urllib.request
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    a = plugin_agent("--simulate", "dgx-h100", "--xid-recovery-seconds", "1",
                     "--health-probe-ms", "100", "--metrics-listen", f"127.0.0.1:{port}",
                     "--metrics-interval-ms", "200",
                     prefix=("valgrind", "--error-exitcode=9", "--leak-check=full",
                             "--errors-for-leak-kinds=definite,indirect", "-q"))
    channel, stub, stream, first = devices(kubelet)
    allocate(kubelet, stub, [first.devices[0].ID])
    preferred(kubelet, stub, [d.ID for d in first.devices], [], 4)
    sim(sim_env, "xid", "1", "94")
    wait_health(stream, 1, "Unhealthy", timeout=10)
    with pytest.raises(grpc.RpcError):
        allocate(kubelet, stub, ["GPU-nope"])
    kubelet.restart()
    kubelet.wait_registrations(2, timeout=30)
    a.wait_log("metrics ready", timeout=30)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "DCGM_FI_DEV_GPU_TEMP{" in body
    stream.cancel()
    channel.close()
    assert a.stop(timeout=60) == 0, a.log()


def test_no_gpus(plugin_agent, kubelet, tmp_path):
    """A node with the driver but no GPUs: one log line, an empty device list."""
    node = tmp_path / "empty.yaml"
    node.write_text("name: empty\ngpus: []\n")
    a = plugin_agent("--simulate", str(node))
    assert a.log().count("no GPUs found") == 1
    channel, stub, stream, first = devices(kubelet)
    assert len(first.devices) == 0
    stream.cancel()


def test_sighup_twice_in_a_row(plugin_agent, kubelet):
    a = plugin_agent("--simulate", "t4")
    a.proc.send_signal(signal.SIGHUP)
    a.proc.send_signal(signal.SIGHUP)
    kubelet.wait_registrations(2, timeout=3)
    time.sleep(0.2)
    assert a.proc.poll() is None
    channel, stub, stream, first = devices(kubelet)
    assert len(first.devices) == 1
    stream.cancel()
    assert a.stop() == 0


@pytest.mark.parametrize("delay", [0.0, 0.5])
def test_reregistration_waits_for_the_kubelet(plugin_agent, kubelet, delay):
    """A plugin restart (a reload here; a MIG change and a hand-over do the
    same) registers again only once the kubelet has let go of the old
    plugin. The kubelet acts on a stream's end asynchronously, and drops
    whichever client holds the resource's name by then: a registration
    made before that lost the resource (allocatable 0, dropped 5 minutes
    later), as one CI run saw on the real 1.36 kubelet (issue 51, item 8).
    The stand-in kubelet here notices the old stream's end late by delay."""
    kubelet.manage, kubelet.disconnect_delay = True, delay
    a = plugin_agent("--simulate", "dgx-h100")
    kubelet.wait_for(lambda: kubelet.allocatable("nvidia.com/gpu") == 8, "8 GPUs")
    a.proc.send_signal(signal.SIGHUP)
    kubelet.wait_registrations(2)
    kubelet.wait_for(lambda: kubelet.disconnects == 1, "the old plugin's disconnect")
    kubelet.wait_for(lambda: kubelet.allocatable("nvidia.com/gpu") == 8, "8 GPUs after the restart")
    assert "nvidia.com/gpu" in kubelet.clients
    assert a.stop() == 0, a.log()


def test_kubelet_socket_replaced_only(plugin_agent, kubelet):
    """A kubelet that replaces only its own socket, leaving ours: the new
    kubelet.sock (which may even reuse the old inode number) is registered with."""
    plugin_agent("--simulate", "t4")
    for n in range(2, 7):
        kubelet.stop()
        kubelet.start(wipe=False)
        kubelet.wait_registrations(n, timeout=3)
