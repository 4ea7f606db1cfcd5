"""Time-slicing against the grpcio kubelet stand-in: replica IDs, GPUs
shared and whole side by side (two resources), one fault marking all of a
GPU's replicas, distinct GPUs for multi-replica requests, Allocate giving
each GPU once, and a bad config on SIGHUP keeping the running one."""
import signal
import time

import grpc

from test_plugin import sim


TS = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
      "    - name: nvidia.com/gpu\n      replicas: 4\n      devices: [0, 1]\n"
      "    - name: nvidia.com/gpu\n      replicas: 2\n      devices: ['2']\n")


def stream_of(kubelet, endpoint):
    channel, stub = kubelet.plugin(endpoint)
    stream = stub.ListAndWatch(kubelet.pb.Empty())
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
