"""gpulet as a DRA driver against a stand-in API server (fakeapi.py, serving
resource.k8s.io/v1 as Kubernetes 1.34 on do, or v1beta1 as 1.32) and a
grpcio stand-in for the kubelet: registration (GetInfo, with the exact
service names of both versions of the kubelet's DRA API), the node's
ResourceSlice (applied, updated on a fault, deleted on exit),
NodePrepareResources (CDI IDs of gpulet's spec, idempotent from the
checkpoint, refused for an unhealthy or unknown device) and
NodeUnprepareResources, through either version; NVIDIA's TimeSlicing
interval set for a claim's life; and all of it under valgrind."""
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import sys
import time

import grpc
import pytest

from conftest import GPULET, SANITIZED, SOURCE
from fakeapi import FakeAPI

DRA = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"            # what kubelets of 1.34 on call
DRA_V1BETA1 = "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/"  # and those of 1.32 and 1.33
REG = "/pluginregistration.Registration/"


def dra_stubs(out):
    """Message classes of the two protos (the service paths are the kubelet's
    own, so no generated stub is used)."""
    out.mkdir(exist_ok=True)
    for proto in ("dra/v1beta1", "pluginregistration/v1"):
        d = SOURCE / "proto" / proto
        name = proto.split("/")[0]
        shutil.copy(d / "api.proto", out / f"{name}.proto")
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{out}", f"--python_out={out}",
                        f"{name}.proto"], check=True)
    sys.path.insert(0, str(out))
    return importlib.import_module("dra_pb2"), importlib.import_module("pluginregistration_pb2")


def health_stubs(out):
    """The messages of the kubelet's DRA health stream (NodeWatchResources)."""
    out.mkdir(exist_ok=True)
    shutil.copy(SOURCE / "proto" / "drahealth" / "v1alpha1" / "api.proto", out / "drahealth.proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{out}", f"--python_out={out}",
                    "drahealth.proto"], check=True)
    sys.path.insert(0, str(out))
    return importlib.import_module("drahealth_pb2")


class HealthStream:
    """The kubelet's side of NodeWatchResources: each message's devices as
    {device name: (health name, message)}."""

    def __init__(self, sock, hpb):
        self.ch = grpc.insecure_channel(f"unix://{sock}")
        fn = self.ch.unary_stream("/v1alpha1.DRAResourceHealth/NodeWatchResources",
                                  request_serializer=lambda m: m.SerializeToString(),
                                  response_deserializer=hpb.NodeWatchResourcesResponse.FromString)
        self.it = fn(hpb.NodeWatchResourcesRequest(), timeout=60)
        self.hpb = hpb

    def next(self):
        r = next(self.it)
        return {d.device.device_name: (self.hpb.HealthStatus.Name(d.health), d.message,
                                       d.device.pool_name, d.health_check_timeout_seconds)
                for d in r.devices}

    def until(self, fn):
        while not fn(got := self.next()):
            pass
        return got

    def close(self):
        self.ch.close()


def call(sock, path, req, resp_cls):
    with grpc.insecure_channel(f"unix://{sock}") as ch:
        fn = ch.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                            response_deserializer=resp_cls.FromString)
        return fn(req, timeout=30)


def prepare_one(sock, pb, uid, name=None):
    """The kubelet's NodePrepareResources for one claim of namespace ns: its answer."""
    req = pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid=uid, name=name or f"c-{uid}")])
    return call(sock, DRA + "NodePrepareResources", req, pb.NodePrepareResourcesResponse).claims[uid]


def unprepare_one(sock, pb, uid):
    req = pb.NodeUnprepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid=uid, name=f"c-{uid}")])
    call(sock, DRA + "NodeUnprepareResources", req, pb.NodeUnprepareResourcesResponse)


def claim(uid, device, pool="n1"):
    return {"kind": "ResourceClaim", "apiVersion": "resource.k8s.io/v1beta1",
            "metadata": {"name": f"c-{uid}", "namespace": "ns", "uid": uid},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": pool, "device": device}]}}}}


@pytest.fixture
def dra(agent, sim_env, tmp_path):
    api = FakeAPI("n1")
    pb, reg = dra_stubs(tmp_path / "stubs")
    root = tmp_path / "driver"
    subprocess.run([GPULET, "sim", "driver-root", str(root)], check=True, env=sim_env, timeout=30)

    def start(prefix=()):
        return agent("--simulate", "dgx-h100", "--dra", "all", "--kubelet-root", str(tmp_path / "kubelet"),
                     "--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig")), "--node-name", "n1",
                     "--nvidia-driver-root", str(root), "--labels", "none", "--no-metrics",
                     "--fault-report", "none", "--status-socket", str(tmp_path / "status.sock"),
                     prefix=prefix)
    yield api, pb, reg, start, tmp_path
    api.stop()


def uuids(gpulet_list):
    return [g["uuid"] for g in json.loads(gpulet_list)["gpus"]]


def exercise(api, pb, reg, a, tmp, sim_env, gpulet):
    kubelet = tmp / "kubelet"
    reg_sock = kubelet / "plugins_registry" / "gpu.nvidia.com-reg.sock"
    a.wait_log("DRA: " + "gpu.nvidia.com serving on", timeout=60)
    info = call(reg_sock, REG + "GetInfo", reg.InfoRequest(), reg.PluginInfo)
    assert (info.type, info.name, list(info.supported_versions)) == (
        "DRAPlugin", "gpu.nvidia.com", ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"])
    assert info.endpoint == str(kubelet / "plugins" / "gpu.nvidia.com" / "dra.sock")
    call(reg_sock, REG + "NotifyRegistrationStatus", reg.RegistrationStatus(plugin_registered=True),
         reg.RegistrationStatusResponse)
    a.wait_log("DRA: registered gpu.nvidia.com with the kubelet")
    assert "no device plugin registers" in a.log()
    # A simulated node's spec is in the user's directory: one line says a
    # kubelet's runtime would not find it there.
    assert a.log().count("CDI specs go to ") == 1
    assert "where container runtimes do not look" in a.log()
    # The doctor sees it registered, through the status socket's "dra" line,
    # and the version of resource.k8s.io it publishes through.
    api.wait_for(lambda: "n1-gpu.nvidia.com" in api.slices, "the slice", timeout=30)
    doc = subprocess.run([GPULET, "doctor", "-o", "json", "--simulate", "dgx-h100", "--dra", "all",
                          "--status-socket", str(tmp / "status.sock"), "--kubelet-root", str(kubelet)],
                         capture_output=True, text=True, env=sim_env, timeout=60)
    dra_check = next(c for c in json.loads(doc.stdout)["checks"] if c["id"] == "dra")
    assert dra_check["status"] == "PASS", dra_check
    assert "gpu.nvidia.com registered: " in dra_check["message"]
    assert "(resource.k8s.io/v1)" in dra_check["message"], dra_check
    # Given nothing but the status socket, doctor checks what the agent runs
    # with (--dra all, its API server, its Node): no device plugin and no
    # allocatable nvidia.com/gpu is no failure when DRA serves every GPU.
    api.node["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    doc = subprocess.run([GPULET, "doctor", "-o", "json", "--status-socket", str(tmp / "status.sock")],
                         capture_output=True, text=True, env=sim_env, timeout=60)
    checks = {c["id"]: c for c in json.loads(doc.stdout)["checks"]}
    assert checks["registration"]["status"] == "PASS", checks["registration"]
    assert "DRA serves every GPU" in checks["registration"]["message"]
    assert checks["dra"]["status"] == "PASS", checks["dra"]
    assert checks["node"]["status"] != "FAIL" and "Node n1 " in checks["node"]["message"], checks["node"]
    # The slice: eight GPUs, owned by the Node.
    api.wait_for(lambda: len(api.slices.get("n1-gpu.nvidia.com", {}).get("spec", {}).get("devices", [])) == 8,
                 "a slice of 8 devices", timeout=30)
    s = api.slices["n1-gpu.nvidia.com"]
    assert s["apiVersion"] == "resource.k8s.io/v1"
    assert s["spec"]["devices"][0]["attributes"]["type"] == {"string": "gpu"}  # no "basic" in v1
    assert s["metadata"]["ownerReferences"][0]["uid"] == "uid-n1"
    assert s["spec"]["pool"]["name"] == "n1" and s["spec"]["nodeName"] == "n1"
    # Deleted by another (the kubelet, when a driver's socket goes): applied again.
    applied = sum(1 for m, p, _ in api.requests if m == "PATCH" and "resourceslices" in p)
    api.delete_slice("n1-gpu.nvidia.com")
    api.wait_for(lambda: "n1-gpu.nvidia.com" in api.slices, "the slice applied again", timeout=30)
    assert sum(1 for m, p, _ in api.requests if m == "PATCH" and "resourceslices" in p) == applied + 1
    a.wait_log("was deleted (the kubelet does so")
    # Bytes that are no request: INVALID_ARGUMENT, and the driver serves on.
    with grpc.insecure_channel(f"unix://{kubelet / 'plugins' / 'gpu.nvidia.com' / 'dra.sock'}") as ch:
        raw = ch.unary_unary(DRA + "NodePrepareResources")
        with pytest.raises(grpc.RpcError) as bad:
            raw(b"\xff\xff\xff", timeout=10)
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # Prepare: the CDI device of GPU 3, by UUID.
    ids = uuids(gpulet("list", "--simulate", "dgx-h100", "-o", "json").stdout)
    api.claims[("ns", "c-one")] = claim("one", "gpu-3")
    req = pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid="one", name="c-one")])
    r = call(kubelet / "plugins" / "gpu.nvidia.com" / "dra.sock", DRA + "NodePrepareResources", req,
             pb.NodePrepareResourcesResponse)
    got = r.claims["one"]
    assert not got.error, got.error
    assert [(d.pool_name, d.device_name, list(d.cdi_device_ids), list(d.request_names)) for d in got.devices] == [
        ("n1", "gpu-3", [f"nvidia.com/gpu={ids[3]}"], ["gpu"])]
    checkpoint = json.loads((kubelet / "plugins" / "gpu.nvidia.com" / "checkpoint.json").read_text())
    assert [c["uid"] for c in checkpoint["claims"]] == ["one"]
    spec = json.loads((tmp / "node-cdi" / "nvidia.com-gpu.json").read_text())
    assert ids[3] in [d["name"] for d in spec["devices"]]
    assert ("GET", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c-one", None) in api.requests
    # Again, as a kubelet of 1.32 asks (v1beta1): the same answer, from the
    # checkpoint, without asking the API server.
    asked = sum(1 for m, p, _ in api.requests if "resourceclaims" in p)
    r2 = call(kubelet / "plugins" / "gpu.nvidia.com" / "dra.sock", DRA_V1BETA1 + "NodePrepareResources", req,
              pb.NodePrepareResourcesResponse)
    assert r2.claims["one"] == got
    assert sum(1 for m, p, _ in api.requests if "resourceclaims" in p) == asked
    # The kubelet's health stream: every device, healthy, at once.
    hpb = health_stubs(tmp / "health-stubs")
    stream = HealthStream(kubelet / "plugins" / "gpu.nvidia.com" / "dra.sock", hpb)
    first = stream.next()
    assert sorted(first) == [f"gpu-{i}" for i in range(8)]
    assert first["gpu-5"] == ("HEALTHY", "", "n1", 60)
    # A fault: GPU 5 stays in the slice, tainted as NVIDIA's driver taints
    # an XID 79 (the XID, and the GPU lost), since the time it began; the
    # stream says it at once, with the cause.
    p = subprocess.run([GPULET, "sim", "xid", "5", "79"], capture_output=True,
                       text=True, env=sim_env, timeout=10)
    assert p.returncode == 0, p.stderr
    got = stream.until(lambda g: g["gpu-5"][0] == "UNHEALTHY")
    assert got["gpu-5"][1].startswith("XID 79: fallen off the bus since "), got
    assert got["gpu-4"][0] == "HEALTHY"

    def taints():
        dev = next(d for d in api.slices["n1-gpu.nvidia.com"]["spec"]["devices"] if d["name"] == "gpu-5")
        return dev.get("taints", [])
    api.wait_for(lambda: taints(), "gpu-5 tainted", timeout=30)
    assert len(api.slices["n1-gpu.nvidia.com"]["spec"]["devices"]) == 8
    t = taints()
    assert [(x["key"], x.get("value"), x["effect"]) for x in t] == [
        ("gpu.nvidia.com/xid", "79", "NoSchedule"), ("gpu.nvidia.com/gpu-lost", None, "NoSchedule")], t
    assert t[0]["timeAdded"].endswith("Z")
    # A claim allocated on it anyway (one that tolerates the taint) is
    # prepared: the scheduler chose it knowing.
    api.claims[("ns", "c-two")] = claim("two", "gpu-5")
    api.claims[("ns", "c-three")] = claim("three", "gpu-0", pool="another-node")
    r = call(kubelet / "plugins" / "gpu.nvidia.com" / "dra.sock", DRA + "NodePrepareResources",
             pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid="two", name="c-two"),
                                                    pb.Claim(namespace="ns", uid="three", name="c-three"),
                                                    pb.Claim(namespace="ns", uid="four", name="c-four")]),
             pb.NodePrepareResourcesResponse)
    assert not r.claims["two"].error, r.claims["two"].error
    assert "pool another-node" in r.claims["three"].error
    assert "HTTP 404" in r.claims["four"].error
    # Unprepare: gone from the checkpoint; an unknown claim is no error.
    r = call(kubelet / "plugins" / "gpu.nvidia.com" / "dra.sock", DRA + "NodeUnprepareResources",
             pb.NodeUnprepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid="one", name="c-one"),
                                                      pb.Claim(namespace="ns", uid="two", name="c-two"),
                                                      pb.Claim(namespace="ns", uid="x", name="x")]),
             pb.NodeUnprepareResourcesResponse)
    assert set(r.claims) == {"one", "two", "x"} and not r.claims["one"].error
    # Recovery (an operator's clear here) lifts the taints and says so.
    subprocess.run([GPULET, "sim", "recover", "5"], check=True, env=sim_env, timeout=10)  # XID 79 lost it
    assert gpulet("health", "clear", "5", "--status-socket", str(tmp / "status.sock")).returncode == 0
    stream.until(lambda g: g["gpu-5"][0] == "HEALTHY")
    api.wait_for(lambda: not taints(), "gpu-5 untainted", timeout=30)
    stream.close()
    checkpoint = json.loads((kubelet / "plugins" / "gpu.nvidia.com" / "checkpoint.json").read_text())
    assert checkpoint["claims"] == []
    # Exit: the sockets go; the slice stays for the next gpulet (an upgrade
    # must not take the node's GPUs from the scheduler; uninstalled, the
    # kubelet wipes it 30 s after the driver's socket went).
    assert a.stop() == 0
    assert "n1-gpu.nvidia.com" in api.slices
    assert "ResourceSlices kept in the API server for the next gpulet (1)" in a.log()
    assert not reg_sock.exists()


def test_dra(dra, sim_env, gpulet):
    api, pb, reg, start, tmp = dra
    exercise(api, pb, reg, start(), tmp, sim_env, gpulet)
    # A restart with the same GPUs writes nothing: the slice and its pool
    # generation stay as they were (a new generation makes the scheduler
    # drop the pool and read it again).
    # A slice an earlier gpulet published with other settings (a --dra-mig
    # counter slice) goes; another node's stays.
    generation = api.slices["n1-gpu.nvidia.com"]["spec"]["pool"]["generation"]
    stale = {"metadata": {"name": "n1-gpu.nvidia.com-counters"},
             "spec": {"nodeName": "n1", "driver": "gpu.nvidia.com", "pool": {"name": "n1"}}}
    other = {"metadata": {"name": "n2-gpu.nvidia.com"},
             "spec": {"nodeName": "n2", "driver": "gpu.nvidia.com", "pool": {"name": "n2"}}}
    api.slices[stale["metadata"]["name"]], api.slices[other["metadata"]["name"]] = stale, other
    writes = lambda: [(m, p) for m, p, _ in api.requests if m != "GET" and "resourceslices" in p]
    before = len(writes())
    a = start()
    a.wait_log("DRA: gpu.nvidia.com serving on", timeout=60)
    api.wait_for(lambda: "n1-gpu.nvidia.com-counters" not in api.slices, "the stale slice deleted",
                 timeout=30)
    time.sleep(1)
    assert writes()[before:] == [("DELETE", "/apis/resource.k8s.io/v1/resourceslices/n1-gpu.nvidia.com-counters")]
    assert "n2-gpu.nvidia.com" in api.slices
    assert api.slices["n1-gpu.nvidia.com"]["spec"]["pool"]["generation"] == generation
    assert a.stop() == 0


def test_dra_beside_the_device_plugin(agent, kubelet, sim_env, tmp_path):
    """--dra-gpus 0-3 of eight: DRA publishes those four, the device plugin
    advertises the other four, and neither hands out the other's. The API
    server here is 1.32's: resource.k8s.io/v1beta1 only."""
    api = FakeAPI("n1", dra_version="v1beta1")
    pb, _ = dra_stubs(tmp_path / "stubs")
    try:
        a = agent("--simulate", "dgx-h100", "--dra", "all", "--dra-gpus", "0-3",
                  "--kubelet-root", str(kubelet.root), "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")),
                  "--node-name", "n1", "--labels", "none", "--no-metrics", "--fault-report", "none",
                  "--status-socket", str(tmp_path / "status.sock"))
        kubelet.wait_registrations(1, timeout=30)
        a.wait_log("DRA serves 4 of 8 GPUs (--dra-gpus 0-3)")
        channel, stub = kubelet.plugin()
        devs = next(stub.ListAndWatch(kubelet.pb.Empty(), timeout=30)).devices
        channel.close()
        ids = uuids(subprocess.run([GPULET, "list", "--simulate", "dgx-h100", "-o", "json"], capture_output=True,
                                   text=True, env=sim_env).stdout)
        assert sorted(d.ID for d in devs) == sorted(ids[4:])
        api.wait_for(lambda: len(api.slices.get("n1-gpu.nvidia.com", {}).get("spec", {}).get("devices", [])) == 4,
                     "a slice of 4 devices", timeout=30)
        assert sorted(d["name"] for d in api.slices["n1-gpu.nvidia.com"]["spec"]["devices"]) == [
            "gpu-0", "gpu-1", "gpu-2", "gpu-3"]
        s = api.slices["n1-gpu.nvidia.com"]
        assert s["apiVersion"] == "resource.k8s.io/v1beta1"
        assert s["spec"]["devices"][0]["basic"]["attributes"]["type"] == {"string": "gpu"}
        # v1 and v1beta2 were asked for first, and v1beta1 used from then on
        paths = [p for m, p, _ in api.requests if p.startswith("/apis/resource.k8s.io")]
        assert paths[:3] == ["/apis/resource.k8s.io/v1", "/apis/resource.k8s.io/v1beta2",
                             "/apis/resource.k8s.io/v1beta1"], paths
        assert all(p.startswith("/apis/resource.k8s.io/v1beta1/") for p in paths[3:]), paths
        api.claims[("ns", "c-6")] = claim("six", "gpu-6")
        r = call(kubelet.root / "plugins" / "gpu.nvidia.com" / "dra.sock", DRA_V1BETA1 + "NodePrepareResources",
                 pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid="six", name="c-6")]),
                 pb.NodePrepareResourcesResponse)
        assert "the device plugin's here, not DRA's" in r.claims["six"].error
        # A fault on the device plugin's GPU 6 leaves the slice as it is: nothing
        # is sent (a new pool generation makes the scheduler read the pool again).
        applied = sum(1 for m, p, _ in api.requests if m == "PATCH" and "resourceslices" in p)
        subprocess.run([GPULET, "sim", "xid", "6", "79"], check=True, env=sim_env, timeout=10)
        a.wait_log("GPU 6 (")
        time.sleep(1)
        assert sum(1 for m, p, _ in api.requests if m == "PATCH" and "resourceslices" in p) == applied
        assert api.slices["n1-gpu.nvidia.com"]["spec"]["pool"]["generation"] == 1
        assert a.stop() == 0
        labels = subprocess.run([GPULET, "labels", "--simulate", "dgx-h100", "--dra", "all", "--dra-gpus",
                                 "0,1,2,3"], capture_output=True, text=True, env=sim_env).stdout
        assert "gpulet.io/dra.gpus=4" in labels.splitlines(), labels
    finally:
        api.stop()


def test_dra_gpus_naming_none(agent, kubelet, tmp_path):
    """A --dra-gpus that names none of the node's GPUs is said at start, not
    left for an operator to find in an empty slice."""
    api = FakeAPI("n1")
    try:
        a = agent("--simulate", "dgx-h100", "--dra", "all", "--dra-gpus", "8-15",
                  "--kubelet-root", str(kubelet.root), "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")),
                  "--node-name", "n1", "--labels", "none", "--no-metrics", "--fault-report", "none",
                  "--status-socket", str(tmp_path / "status.sock"))
        a.wait_log("--dra-gpus '8-15' names none of this node's 8 GPUs (indexes 0-7")
        assert a.stop() == 0
    finally:
        api.stop()


def test_dra_mig(agent, sim_env, tmp_path):
    """A GPU in MIG mode is published as its MIG devices, and a claim on one
    gets the MIG device's CDI device from gpulet's spec."""
    api = FakeAPI("n1")
    pb, _ = dra_stubs(tmp_path / "stubs")
    try:
        a = agent("--simulate", "h200-mig-mixed", "--dra", "all", "--kubelet-root", str(tmp_path / "k"),
                  "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1",
                  "--labels", "none", "--no-metrics", "--fault-report", "none",
                  "--status-socket", str(tmp_path / "status.sock"))
        api.wait_for(lambda: len(api.slices.get("n1-gpu.nvidia.com", {}).get("spec", {}).get("devices", [])) == 16,
                     "a slice of 15 MIG devices and one GPU", timeout=30)
        mig = next(d for d in api.slices["n1-gpu.nvidia.com"]["spec"]["devices"]
                   if d["attributes"]["profile"] == {"string": "1g.18gb"})
        uuid = mig["attributes"]["uuid"]["string"]
        # NVIDIA's name: gpu-<minor>-mig-<profile>-<GI profile ID>-<placement start>
        assert mig["name"].startswith("gpu-0-mig-1g18gb-19-"), mig["name"]
        api.claims[("ns", "c-m")] = claim("m", mig["name"])
        r = call(tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "dra.sock", DRA + "NodePrepareResources",
                 pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid="m", name="c-m")]),
                 pb.NodePrepareResourcesResponse)
        assert not r.claims["m"].error, r.claims["m"].error
        assert list(r.claims["m"].devices[0].cdi_device_ids) == [f"nvidia.com/gpu={uuid}"]
        # A time slice of its own would be its whole GPU's, which other claims share: refused.
        other = next(d["name"] for d in api.slices["n1-gpu.nvidia.com"]["spec"]["devices"]
                     if d["attributes"]["type"] == {"string": "mig"} and d["name"] != mig["name"])
        long = claim("ml", other)
        long["status"]["allocation"]["devices"]["config"] = [
            gpuconfig({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})]
        api.claims[("ns", "c-ml")] = long
        r = call(tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "dra.sock", DRA + "NodePrepareResources",
                 pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid="ml", name="c-ml")]),
                 pb.NodePrepareResourcesResponse)
        assert "other claims' MIG devices share" in r.claims["ml"].error, r.claims["ml"].error
        spec = json.loads((tmp_path / "node-cdi" / "nvidia.com-gpu.json").read_text())
        assert uuid in [d["name"] for d in spec["devices"]]
        assert a.stop() == 0
    finally:
        api.stop()


def gpuconfig(sharing, requests=None, source="FromClaim"):
    entry = {"source": source, "opaque": {"driver": "gpu.nvidia.com", "parameters": {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing}}}
    if requests:
        entry["requests"] = requests
    return entry


def sharing(agent, sim_env, tmp_path, prefix=()):
    """NVIDIA's GpuConfig in a claim: MPS starts a daemon of the claim's own
    with its limits, the answer (after the daemon is up) adds the claim's
    CDI device, a restart brings the daemon back from the checkpoint, and
    unprepare stops it and removes its directory and spec. TimeSlicing's
    Long interval is set with the driver's nvidia-smi (the stand-in records
    it) for the claim's life, and Default again at unprepare. The claim's
    containers (reservedFor, then the pod) get their pod labels in metrics
    without PodResources."""
    from test_metrics import free_port, get, parse, wait_for
    from test_sharing import FAKE_MPS
    api = FakeAPI("n1")
    pb, _ = dra_stubs(tmp_path / "stubs")
    mps, cdi, port = tmp_path / "mps", tmp_path / "node-cdi", free_port()
    sock = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "dra.sock"
    root = tmp_path / "driver"
    subprocess.run([GPULET, "sim", "driver-root", str(root)], check=True, env=sim_env, timeout=30)
    timeslice = root / "var" / "lib" / "gpulet-sim" / "timeslice"

    def start():
        return agent("--simulate", "dgx-h100", "--dra", "all", "--kubelet-root", str(tmp_path / "k"),
                     "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1",
                     "--labels", "none", "--fault-report", "none", "--status-socket", str(tmp_path / "s.sock"),
                     "--mps-root", str(mps), "--mps-control", FAKE_MPS, "--metrics-listen", f"127.0.0.1:{port}",
                     "--nvidia-driver-root", str(root),
                     "--metrics-interval-ms", "200", "--pod-resources-interval-ms", "1000", prefix=prefix)

    def prepare(uid, name):
        return prepare_one(sock, pb, uid, name)
    try:
        ids = uuids(subprocess.run([GPULET, "list", "--simulate", "dgx-h100", "-o", "json"], capture_output=True,
                                   text=True, env=sim_env).stdout)
        a = start()
        a.wait_log("DRA: gpu.nvidia.com serving on", timeout=60)
        c = claim("mps", "gpu-1")
        c["status"]["allocation"]["devices"]["results"].append(
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-2"})
        c["status"]["allocation"]["devices"]["config"] = [
            gpuconfig({"strategy": "TimeSlicing"}, source="FromClass"),
            gpuconfig({"strategy": "MPS", "mpsConfig": {
                "defaultActiveThreadPercentage": 30, "defaultPinnedDeviceMemoryLimit": "8Gi",
                "defaultPerDevicePinnedMemoryLimit": {"1": "4Gi"}}}, requests=["gpu"])]
        c["status"]["reservedFor"] = [{"resource": "pods", "name": "p1", "uid": "pod-1"}]
        api.claims[("ns", "c-mps")] = c
        api.pods[("ns", "p1")] = {"kind": "Pod", "metadata": {"name": "p1", "namespace": "ns", "uid": "pod-1"},
                                  "spec": {"resourceClaims": [{"name": "g", "resourceClaimName": "c-mps"}],
                                           "containers": [{"name": "main", "resources": {"claims": [{"name": "g"}]}},
                                                          {"name": "side"}]}}
        got = prepare("mps", "c-mps")
        assert not got.error, got.error
        assert [list(d.cdi_device_ids) for d in got.devices] == [
            [f"nvidia.com/gpu={ids[1]}", "gpu.nvidia.com/claim=mps"], [f"nvidia.com/gpu={ids[2]}"]]
        log = mps / "claim-mps" / "log"
        assert (mps / "claim-mps" / "pipe" / "nvidia-cuda-mps-control.pid").exists()  # up before the answer
        assert f"CUDA_VISIBLE_DEVICES={ids[1]},{ids[2]}" in (log / "control.log").read_text()
        assert (log / "commands.log").read_text().splitlines() == [
            "set_default_active_thread_percentage 30", "set_default_device_pinned_mem_limit 0 8192M",
            "set_default_device_pinned_mem_limit 1 4096M"]
        spec = json.loads((cdi / "gpu.nvidia.com-claim_mps.json").read_text())
        assert spec["kind"] == "gpu.nvidia.com/claim" and spec["devices"][0]["name"] == "mps"
        edits = spec["devices"][0]["containerEdits"]
        assert edits["env"] == ["CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"]
        assert [(m["hostPath"], m["containerPath"]) for m in edits["mounts"]] == [
            (str(mps / "claim-mps" / "pipe"), "/tmp/nvidia-mps"), (str(mps / "shm"), "/dev/shm")]
        # The claim's container: pod labels on its GPUs' series, without a kubelet.
        url = f"http://127.0.0.1:{port}/metrics"

        def labelled():
            util = parse(get(url)[2]).get("DCGM_FI_DEV_GPU_UTIL", [])
            return {l["gpu"]: (l.get("pod"), l.get("namespace"), l.get("container")) for l, _, _ in util}
        assert wait_for(lambda: labelled().get("1") == ("p1", "ns", "main"), timeout=20), labelled()
        assert labelled()["2"] == ("p1", "ns", "main") and labelled()["0"] == (None, None, None)
        checkpoint = json.loads((tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "checkpoint.json").read_text())
        entry = checkpoint["claims"][0]
        assert entry["consumers"] == [{"pod": "p1", "namespace": "ns", "container": "main"}]
        assert [d.get("sharing") for d in entry["devices"]] == ["MPS", "MPS"]
        # NVIDIA's Long interval on a GPU the claim holds whole: set for the claim's life.
        long = claim("long", "gpu-4")
        long["status"]["allocation"]["devices"]["config"] = [
            gpuconfig({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})]
        api.claims[("ns", "c-long")] = long
        assert not prepare("long", "c-long").error
        assert (timeslice / ids[4]).read_text() == "3\n"
        a.wait_log("DRA: prepared claim ns/c-long (long): 1 device(s), time slice set")
        call(sock, DRA + "NodeUnprepareResources",
             pb.NodeUnprepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid="long", name="c-long")]),
             pb.NodeUnprepareResourcesResponse)
        assert wait_for(lambda: (timeslice / ids[4]).read_text() == "0\n", timeout=20)
        # An interval that is not NVIDIA's: refused, naming the entry and why.
        bad = claim("bad", "gpu-5")
        bad["status"]["allocation"]["devices"]["config"] = [
            gpuconfig({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Longest"}})]
        api.claims[("ns", "c-bad")] = bad
        err = prepare("bad", "c-bad").error
        assert "config 0 (FromClaim)" in err and "must be Default, Short, Medium or Long" in err, err
        # A restart: the daemon runs on, with its clients, and the next gpulet
        # adopts it from the checkpoint; the answer is the same.
        assert a.stop() == 0
        assert "MPS daemon for claim-mps (pid" in a.log() and "runs on" in a.log()
        assert (mps / "claim-mps" / "pipe" / "nvidia-cuda-mps-control.pid").exists()
        assert (cdi / "gpu.nvidia.com-claim_mps.json").exists()  # a restarting container needs it
        a = start()
        a.wait_log("DRA: gpu.nvidia.com serving on", timeout=60)
        a.wait_log("MPS daemon for claim-mps is up, adopted", timeout=30)
        assert prepare("mps", "c-mps") == got
        assert (log / "control.log").read_text().count("start pid=") == 1
        # Unprepare: the daemon quits, its directory and spec go, and so do the labels.
        call(sock, DRA + "NodeUnprepareResources",
             pb.NodeUnprepareResourcesRequest(claims=[pb.Claim(namespace="ns", uid="mps", name="c-mps")]),
             pb.NodeUnprepareResourcesResponse)
        assert wait_for(lambda: not (mps / "claim-mps").exists(), timeout=20)
        assert not (cdi / "gpu.nvidia.com-claim_mps.json").exists()
        assert wait_for(lambda: labelled().get("1") == (None, None, None), timeout=20), labelled()
        assert a.stop() == 0
    finally:
        api.stop()


def test_dra_sharing(agent, sim_env, tmp_path):
    sharing(agent, sim_env, tmp_path)


@pytest.mark.skipif(SANITIZED or not shutil.which("valgrind"), reason="valgrind runs on the plain build")
def test_valgrind_dra_sharing(agent, sim_env, tmp_path):
    sharing(agent, sim_env, tmp_path, prefix=("valgrind", "--error-exitcode=9", "--leak-check=full",
                                              "--errors-for-leak-kinds=definite,indirect", "-q"))


def share(uid, device, memory, compute=None, share_id=None):
    """A claim allocated a share of device (consumable capacity)."""
    c = claim(uid, device)
    r = c["status"]["allocation"]["devices"]["results"][0]
    r["shareID"] = share_id or f"share-{uid}"
    r["consumedCapacity"] = {"memory": memory, **({"compute": compute} if compute else {})}
    return c


def test_dra_shares(agent, sim_env, tmp_path):
    """--dra-shares 3: gpu-3 is published for shares (consumable capacity);
    two claims' shares of it run through its one MPS daemon, each with its
    own limits in its CDI device (what it consumed), the answer carrying
    each shareID; the daemon stays while one share does, comes back from
    the checkpoint after a restart, and stops after the last."""
    from test_metrics import wait_for
    from test_sharing import FAKE_MPS
    api = FakeAPI("n1")
    pb, _ = dra_stubs(tmp_path / "stubs")
    mps, cdi = tmp_path / "mps", tmp_path / "node-cdi"
    sock = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "dra.sock"

    def start():
        return agent("--simulate", "dgx-h100", "--dra", "all", "--dra-shares", "3",
                     "--kubelet-root", str(tmp_path / "k"), "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")),
                     "--node-name", "n1", "--labels", "none", "--no-metrics", "--fault-report", "none",
                     "--status-socket", str(tmp_path / "s.sock"), "--mps-root", str(mps), "--mps-control", FAKE_MPS)

    def prepare(uid):
        return prepare_one(sock, pb, uid)

    def unprepare(uid):
        unprepare_one(sock, pb, uid)
    try:
        ids = uuids(subprocess.run([GPULET, "list", "--simulate", "dgx-h100", "-o", "json"], capture_output=True,
                                   text=True, env=sim_env).stdout)
        a = start()
        api.wait_for(lambda: "n1-gpu.nvidia.com" in api.slices, "the slice", timeout=30)
        devs = {d["name"]: d for d in api.slices["n1-gpu.nvidia.com"]["spec"]["devices"]}
        assert devs["gpu-3"]["allowMultipleAllocations"] is True
        assert devs["gpu-3"]["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] == "1Gi"
        assert "allowMultipleAllocations" not in devs["gpu-2"]
        api.claims[("ns", "c-a")] = share("a", "gpu-3", "8Gi", "25")
        api.claims[("ns", "c-b")] = share("b", "gpu-3", "16Gi")
        got = {u: prepare(u) for u in ("a", "b")}
        for u in ("a", "b"):
            assert not got[u].error, got[u].error
            [dev] = got[u].devices
            assert dev.share_id == f"share-{u}" and dev.device_name == "gpu-3"
            assert list(dev.cdi_device_ids) == [f"nvidia.com/gpu={ids[3]}", f"gpu.nvidia.com/claim={u}"]
        daemon = mps / f"share-{ids[3]}"
        assert (daemon / "pipe" / "nvidia-cuda-mps-control.pid").exists()
        assert (daemon / "log" / "control.log").read_text().count("start pid=") == 1  # one for both
        # No default limit: each share's client has its own ("0M" would be none at all).
        assert (daemon / "log" / "commands.log").read_text().splitlines() == [
            "set_default_active_thread_percentage 100"]
        env = {u: json.loads((cdi / f"gpu.nvidia.com-claim_{u}.json").read_text())["devices"][0]["containerEdits"]
               for u in ("a", "b")}
        assert env["a"]["env"] == ["CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
                                   "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M"]
        assert env["b"]["env"] == ["CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=16384M"]
        assert env["a"]["mounts"][0]["hostPath"] == str(daemon / "pipe")
        # A share of a GPU not published for shares, and a share beside a GpuConfig: refused.
        api.claims[("ns", "c-c")] = share("c", "gpu-2", "8Gi")
        assert "--dra-shares" in prepare("c").error
        # A restart: the daemon runs on for both, and is adopted from the checkpoint.
        assert a.stop() == 0
        a = start()
        a.wait_log("DRA: gpu.nvidia.com serving on", timeout=60)
        a.wait_log(f"MPS daemon for share-{ids[3]} is up, adopted", timeout=30)
        assert (daemon / "log" / "control.log").read_text().count("start pid=") == 1
        assert prepare("a") == got["a"]
        # The first share goes: its spec goes, the daemon stays for the other.
        unprepare("a")
        assert not (cdi / "gpu.nvidia.com-claim_a.json").exists()
        assert (daemon / "pipe" / "nvidia-cuda-mps-control.pid").exists()
        unprepare("b")
        assert wait_for(lambda: not daemon.exists(), timeout=20)
        assert a.stop() == 0
    finally:
        api.stop()


MIG_RESTARTED = """\
# h100-mig-empty as a restarted gpulet finds it: GPU 0 keeps the 1g.10gb
# it made (the simulator's first instance, so its UUID is the same).
name: h100-mig-empty
driver_version: "580.159.04"
cuda_version: "13.0"
numa_nodes: 2
nvlink: nvswitch
gpus:
  - {product: h100-sxm, mig: true, mig_devices: [1g.10gb]}
  - {product: h100-sxm, count: 7, mig: true}
"""


def test_dra_mig_per_claim(agent, sim_env, tmp_path):
    """--dra-mig 0 on a DGX H100 in MIG mode with no MIG device: the pool is
    three slices (the GPUs, GPU 0's counters, its 25 placements) at one
    generation; a claim for a 1g.10gb placement gets a new MIG device (the
    simulator, gpulet list and the CDI spec have it), another's 3g.40gb
    too; a placement the GPU cannot make fails and leaves nothing; after a
    restart the checkpoint's device is adopted; unprepares destroy them.
    A fault in a's device taints its placement and the health stream says it."""
    from test_metrics import wait_for
    api = FakeAPI("n1")
    pb, _ = dra_stubs(tmp_path / "stubs")
    cdi, status = tmp_path / "node-cdi", tmp_path / "s.sock"
    sock = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "dra.sock"
    restarted = tmp_path / "restarted.yaml"
    restarted.write_text(MIG_RESTARTED)

    from test_metrics import free_port, get
    port = free_port()

    def start(scenario="h100-mig-empty"):
        return agent("--simulate", scenario, "--dra", "all", "--dra-mig", "0",
                     "--kubelet-root", str(tmp_path / "k"), "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")),
                     "--node-name", "n1", "--labels", "none", "--metrics-listen", f"127.0.0.1:{port}",
                     "--fault-report", "none", "--status-socket", str(status))

    def metrics():
        return get(f"http://127.0.0.1:{port}/metrics")[2]

    def prepare(uid):
        return prepare_one(sock, pb, uid)

    def unprepare(uid):
        unprepare_one(sock, pb, uid)

    def sim_mig():
        return subprocess.run([GPULET, "sim", "mig", "0"], capture_output=True, text=True, env=sim_env,
                              timeout=30).stdout.strip()

    def listed():
        out = subprocess.run([GPULET, "list", "-o", "json", "--status-socket", str(status)],
                             capture_output=True, text=True, env=sim_env, timeout=30).stdout
        return [m["uuid"] for m in json.loads(out)["gpus"][0].get("mig_devices", [])]

    names = ["n1-gpu.nvidia.com", "n1-gpu.nvidia.com-counters", "n1-gpu.nvidia.com-gpu-0"]
    try:
        a = start()
        api.wait_for(lambda: all(n in api.slices for n in names), "the three slices", timeout=30)
        pools = [api.slices[n]["spec"]["pool"] for n in names]
        assert {p["resourceSliceCount"] for p in pools} == {3} and len({p["generation"] for p in pools}) == 1
        [counters] = api.slices[names[1]]["spec"]["sharedCounters"]
        assert counters["name"] == "gpu-0-counter-set" and counters["counters"]["memory-slice-7"] == {"value": "1"}
        devs = {d["name"]: d for d in api.slices[names[2]]["spec"]["devices"]}
        assert len(devs) == 25 and devs["gpu-0-mig-1g10gb-19-0"]["attributes"]["profile"] == {"string": "1g.10gb"}
        assert sim_mig() == "ok none"
        api.claims[("ns", "c-a")] = claim("a", "gpu-0-mig-1g10gb-19-0")
        api.claims[("ns", "c-b")] = claim("b", "gpu-0-mig-3g40gb-9-4")
        got = {u: prepare(u) for u in ("a", "b")}
        made = {}
        for u in ("a", "b"):
            assert not got[u].error, got[u].error
            [dev] = got[u].devices
            [cdi_id] = dev.cdi_device_ids
            assert cdi_id.startswith("nvidia.com/gpu=MIG-")
            made[u] = cdi_id.split("=")[1]
        assert sim_mig() == f"ok 1g.10gb@0 gi 1 {made['a']}, 3g.40gb@4 gi 2 {made['b']}"
        assert sorted(listed()) == sorted(made.values())
        # Metrics have the new devices (their GPU instance's framebuffer).
        assert wait_for(lambda: metrics().count('GPU_I_PROFILE="1g.10gb",GPU_I_ID="1"') >= 2, timeout=20)
        spec = json.loads((cdi / "nvidia.com-gpu.json").read_text())
        assert {made["a"], made["b"]} <= {d["name"] for d in spec["devices"]}
        # Placements a claim made hold nothing back: the slice did not change.
        assert len(api.slices[names[2]]["spec"]["devices"]) == 25
        # A fault in a's MIG device (its GPU instance) taints its placement
        # only; the pool's three slices move to one new generation.
        generation = api.slices[names[0]]["spec"]["pool"]["generation"]
        stream = HealthStream(sock, health_stubs(tmp_path / "health-stubs"))
        assert stream.next()["gpu-0-mig-1g10gb-19-0"][0] == "HEALTHY"
        subprocess.run([GPULET, "sim", "xid", "0", "94", "1"], check=True, env=sim_env, timeout=30)
        health = stream.until(lambda g: g["gpu-0-mig-1g10gb-19-0"][0] == "UNHEALTHY")
        assert health["gpu-0-mig-3g40gb-9-4"][0] == "HEALTHY" and "XID 94" in health["gpu-0-mig-1g10gb-19-0"][1]
        stream.close()

        def tainted():
            if {api.slices[n]["spec"]["pool"]["generation"] for n in names} != {generation + 1}:
                return None
            return {d["name"]: d.get("taints") for d in api.slices[names[2]]["spec"]["devices"] if d.get("taints")}
        got_taints = api.wait_for(tainted, "the MIG device's taint", timeout=20)
        assert list(got_taints) == ["gpu-0-mig-1g10gb-19-0"], got_taints
        assert got_taints["gpu-0-mig-1g10gb-19-0"][0]["key"] == "gpu.nvidia.com/xid"
        # What the GPU cannot make (its slices are b's) fails, leaving nothing.
        api.claims[("ns", "c-c")] = claim("c", "gpu-0-mig-7g80gb-0-0")
        assert "Insufficient" in prepare("c").error or "insufficient" in prepare("c").error.lower()
        assert sim_mig().count("gi") == 2
        # A restart whose GPU kept a's device (the same UUID) and lost b's.
        assert a.stop() == 0
        a = start(str(restarted))
        a.wait_log("DRA: gpu.nvidia.com serving on", timeout=60)
        assert prepare("a") == got["a"]
        assert listed() == [made["a"]]
        unprepare("a")
        assert wait_for(lambda: sim_mig() == "ok none", timeout=20)
        assert wait_for(lambda: listed() == [], timeout=20)
        unprepare("b")  # gone already: nothing to destroy, no error
        a.wait_log("DRA: unprepared claim ns/c-b")
        assert "not destroyed" not in a.log()
        assert a.stop() == 0
    finally:
        api.stop()


def test_dra_needs_a_node(agent, tmp_path):
    """--dra all that cannot publish (no Node name) stops the agent, saying
    why, rather than running and serving nothing."""
    a = agent("--simulate", "t4", "--dra", "all", "--kubelet-root", str(tmp_path / "k"), "--no-metrics",
              "--labels", "none", "--status-socket", str(tmp_path / "s.sock"))
    assert a.proc.wait(timeout=20) == 2  # the command line's: one line
    assert "--dra all needs the Node's name: set NODE_NAME" in a.log()
    assert len(a.log().strip().splitlines()) == 1, a.log()
    assert "agent running" not in a.log() and not (tmp_path / "s.sock").exists()


@pytest.mark.skipif(SANITIZED or not shutil.which("valgrind"), reason="valgrind runs on the plain build")
def test_valgrind_dra(dra, sim_env, gpulet):
    api, pb, reg, start, tmp = dra
    a = start(prefix=("valgrind", "--error-exitcode=9", "--leak-check=full",
                      "--errors-for-leak-kinds=definite,indirect", "-q"))
    exercise(api, pb, reg, a, tmp, sim_env, gpulet)


@pytest.mark.parametrize("version", ["v1beta2", "v1alpha3"])
def test_dra_api_versions(agent, sim_env, tmp_path, version):
    """An API server of 1.33 (v1beta2, attributes at the device's top, as
    in v1) is spoken to in v1beta2; one that serves no version gpulet
    knows gets one line naming the versions it asked for, and doctor's
    dra check fails with it."""
    api = FakeAPI("n1", dra_version=version)
    try:
        a = agent("--simulate", "t4", "--dra", "all", "--kubelet-root", str(tmp_path / "k"),
                  "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1",
                  "--labels", "none", "--no-metrics", "--fault-report", "none",
                  "--status-socket", str(tmp_path / "s.sock"))
        if version == "v1beta2":
            api.wait_for(lambda: "n1-gpu.nvidia.com" in api.slices, "the slice", timeout=30)
            s = api.slices["n1-gpu.nvidia.com"]
            assert s["apiVersion"] == "resource.k8s.io/v1beta2"
            assert s["spec"]["devices"][0]["attributes"]["productName"] == {"string": "Tesla T4"}
        else:
            a.wait_log("serves no ResourceSlices in resource.k8s.io v1, v1beta2 or v1beta1", timeout=30)
            doc = subprocess.run([GPULET, "doctor", "-o", "json", "--simulate", "t4", "--dra", "all",
                                  "--status-socket", str(tmp_path / "s.sock"), "--kubelet-root",
                                  str(tmp_path / "k")], capture_output=True, text=True, env=sim_env, timeout=60)
            check = next(c for c in json.loads(doc.stdout)["checks"] if c["id"] == "dra")
            assert check["status"] == "FAIL", check
            assert "which version of resource.k8s.io" in check["message"], check
            assert not api.slices
        assert a.stop() == 0
    finally:
        api.stop()


def test_dra_slice_watch_after_a_slow_list(agent, tmp_path):
    """A busy API server answers a LIST sent before the slice was created
    after it was, with what it read before: that is no deletion. The slice
    is applied once, and its pool generation stays 1 (a new one makes the
    scheduler drop and read the pool again)."""
    api = FakeAPI("n1")
    api.apply_lag, api.list_lag = 1.0, 2.0
    try:
        a = agent("--simulate", "t4", "--dra", "all", "--kubelet-root", str(tmp_path / "k"),
                  "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1",
                  "--labels", "none", "--no-metrics", "--fault-report", "none",
                  "--status-socket", str(tmp_path / "s.sock"))
        api.wait_for(lambda: "n1-gpu.nvidia.com" in api.slices, "the slice", timeout=30)
        time.sleep(api.list_lag + 1)
        assert sum(1 for m, p, _ in api.requests if m == "PATCH" and "resourceslices" in p) == 1
        assert "was deleted" not in a.log()
        assert api.slices["n1-gpu.nvidia.com"]["spec"]["pool"]["generation"] == 1
        assert a.stop() == 0
    finally:
        api.stop()


def test_dra_taints_dropped(agent, sim_env, tmp_path):
    """An API server that drops device taints (its DRADeviceTaints gate
    off): gpulet sees its slice come back without them, says so once, and
    leaves the faulty GPU out instead; it comes back on recovery."""
    api = FakeAPI("n1")
    api.drop_taints = True
    try:
        a = agent("--simulate", "t4", "--dra", "all", "--kubelet-root", str(tmp_path / "k"),
                  "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1",
                  "--labels", "none", "--no-metrics", "--fault-report", "none",
                  "--status-socket", str(tmp_path / "s.sock"))
        devices = lambda: api.slices.get("n1-gpu.nvidia.com", {}).get("spec", {}).get("devices", [])
        api.wait_for(lambda: len(devices()) == 1, "the slice", timeout=30)
        subprocess.run([GPULET, "sim", "xid", "0", "79"], check=True, env=sim_env, timeout=10)
        api.wait_for(lambda: "n1-gpu.nvidia.com" in api.slices and not devices(), "gpu-0 left out",
                     timeout=30)
        assert a.log().count("drops device taints") == 1
        subprocess.run([GPULET, "sim", "recover", "0"], check=True, env=sim_env, timeout=10)
        subprocess.run([GPULET, "health", "clear", "0", "--status-socket", str(tmp_path / "s.sock")],
                       check=True, env=sim_env, timeout=10)
        api.wait_for(lambda: len(devices()) == 1, "gpu-0 back", timeout=30)
        assert a.stop() == 0
    finally:
        api.stop()


def test_dra_checkpoint_survives_sigkill(agent, sim_env, tmp_path):
    """gpulet killed with SIGKILL again and again while it prepares 1,000
    claims: every restart reads a whole checkpoint (written to a file
    flushed to disk, then renamed), and knows every claim it answered."""
    import random
    import signal
    import threading
    api = FakeAPI("n1")
    pb, _ = dra_stubs(tmp_path / "stubs")
    sock = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "dra.sock"
    checkpoint = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "checkpoint.json"
    for i in range(1000):
        api.claims[("ns", f"c{i}")] = claim(f"u{i}", f"gpu-{i % 8}")
    answered = set()
    rng = random.Random(7)
    try:
        sent, kills = 0, 0
        while sent < 1000:
            a = agent("--simulate", "dgx-h100", "--dra", "all", "--kubelet-root", str(tmp_path / "k"),
                      "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1",
                      "--labels", "none", "--no-metrics", "--fault-report", "none",
                      "--status-socket", str(tmp_path / "s.sock"))
            # A checkpoint that does not parse would stop it here.
            a.wait_log("DRA: gpu.nvidia.com serving on", timeout=30)
            if checkpoint.exists():
                known = {c["uid"] for c in json.loads(checkpoint.read_text())["claims"]}
                assert answered <= known, answered - known  # whole, and nothing answered lost
            # The kill comes at a random moment once this start has answered
            # a batch: each start gets somewhere however slow the machine
            # (an ASan build on a busy CI), and the kill still lands
            # anywhere in a later prepare or its write.
            timer = threading.Timer(rng.uniform(0.05, 0.4), a.proc.send_signal, [signal.SIGKILL])
            try:
                while sent < 1000 and a.proc.poll() is None:
                    batch = [pb.Claim(namespace="ns", uid=f"u{i}", name=f"c{i}")
                             for i in range(sent, min(sent + 10, 1000))]
                    try:
                        r = call(sock, DRA + "NodePrepareResources",
                                 pb.NodePrepareResourcesRequest(claims=batch), pb.NodePrepareResourcesResponse)
                    except grpc.RpcError:
                        break  # killed mid-call: the batch is asked again
                    answered |= {c.uid for c in batch if not r.claims[c.uid].error}
                    sent += len(batch)
                    if not timer.is_alive() and not timer.finished.is_set():
                        timer.start()
            finally:
                timer.cancel()
            if a.proc.poll() is None:
                a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(timeout=10)
            kills += 1
            assert kills <= 100, f"{len(answered)} answered in {kills} starts: gpulet keeps dying"
        assert len(answered) == 1000 and kills >= 3, (len(answered), kills)
        assert {c["uid"] for c in json.loads(checkpoint.read_text())["claims"]} == answered
        known = {c["uid"] for c in json.loads(checkpoint.read_text())["claims"]}
        assert answered <= known
    finally:
        api.stop()


def test_dra_answers_once_its_files_are_on_disk(agent, sim_env, slow_fsync, tmp_path):
    """Every fsync takes 300 ms (tests/shim/slow_fsync.c): a prepare's
    answer comes only once the checkpoint that holds its claim is on disk
    (gpulet killed the moment it answers knows the claim on restart), and an
    unprepare's once the checkpoint without it is. With a disk that hangs
    until the test lets it go, a prepare waits, and the agent answers its
    status socket meanwhile: the writes run on the worker pool."""
    import signal
    api = FakeAPI("n1")
    pb, _ = dra_stubs(tmp_path / "stubs")
    sock = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "dra.sock"
    checkpoint = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "checkpoint.json"
    gate = tmp_path / "disk-goes-on"
    for i in range(3):
        api.claims[("ns", f"c-u{i}")] = claim(f"u{i}", f"gpu-{i}")

    def start(gated=False):
        a = agent("--simulate", "dgx-h100", "--dra", "all", "--kubelet-root", str(tmp_path / "k"),
                  "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1",
                  "--labels", "none", "--no-metrics", "--fault-report", "none",
                  "--status-socket", str(tmp_path / "s.sock"),
                  env=slow_fsync(sim_env, 300, gate if gated else None))
        a.wait_log("DRA: gpu.nvidia.com serving on", timeout=30)
        return a

    def known():
        return {c["uid"] for c in json.loads(checkpoint.read_text())["claims"]}
    try:
        a = start()
        for uid in ("u0", "u1"):
            assert not prepare_one(sock, pb, uid).error
            a.proc.send_signal(signal.SIGKILL)  # the moment it answered
            a.proc.wait(timeout=10)
            assert uid in known()
            a = start()
        unprepare_one(sock, pb, "u0")
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=10)
        assert known() == {"u1"}
        a = start(gated=True)
        done = []
        t = threading.Thread(target=lambda: done.append(prepare_one(sock, pb, "u2")))
        t.start()
        a.wait_log("DRA: prepared claim ns/c-u2")
        with socket.socket(socket.AF_UNIX) as s:  # the loop answers while the disk hangs
            s.settimeout(10)
            s.connect(str(tmp_path / "s.sock"))
            s.sendall(b"pid\n")
            assert s.recv(64).decode().strip() == str(a.proc.pid)
        assert not done and t.is_alive()              # and the prepare waits for it
        gate.touch()
        t.join(timeout=30)
        assert done and not done[0].error and "u2" in known()
        assert a.stop() == 0
    finally:
        api.stop()


def test_dra_serves_while_its_checkpoint_loads(agent, sim_env, tmp_path):
    """A restart serves at once: the checkpoint is read off the loop, and a
    prepare that comes before its claims are in waits for them and answers
    as the checkpoint says (issue 49, item 2). The checkpoint here is a FIFO,
    so that the test says when the read ends."""
    api = FakeAPI("n1")
    pb, _ = dra_stubs(tmp_path / "stubs")
    plugins = tmp_path / "k" / "plugins" / "gpu.nvidia.com"
    plugins.mkdir(parents=True)
    fifo = plugins / "checkpoint.json"
    os.mkfifo(fifo)
    gpus = uuids(subprocess.run([GPULET, "list", "--simulate", "dgx-h100", "-o", "json"], env=sim_env,
                                capture_output=True, text=True, check=True).stdout)
    try:
        a = agent("--simulate", "dgx-h100", "--dra", "all", "--kubelet-root", str(tmp_path / "k"),
                  "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1",
                  "--labels", "none", "--no-metrics", "--fault-report", "none",
                  "--status-socket", str(tmp_path / "s.sock"))
        a.wait_log("DRA: gpu.nvidia.com serving on", timeout=30)
        answer = {}
        t = threading.Thread(target=lambda: answer.setdefault(
            "r", prepare_one(plugins / "dra.sock", pb, "u7", "c7")))
        t.start()
        t.join(0.5)
        assert not answer, answer  # the claims are not in yet
        # The claim was prepared before the restart: it is not on the API
        # server now, so only the checkpoint can answer it.
        with open(fifo, "w") as f:
            json.dump({"claims": [{"uid": "u7", "namespace": "ns", "name": "c7", "devices": [
                {"request": "gpu", "device": "gpu-3", "uuid": gpus[3]}]}]}, f)
        t.join(30)
        r = answer["r"]
        assert not r.error, r.error
        assert [d.device_name for d in r.devices] == ["gpu-3"]
        a.wait_log("DRA: 1 prepared claim(s) from")
        assert ("GET", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c7", None) not in api.requests
    finally:
        api.stop()


@pytest.fixture
def lifecycle(agent, sim_env, slow_fsync, tmp_path):
    """An agent whose disk the test can hang (gate) or fill (full), with
    three claims on the stand-in API server, and a stand-in kubelet that
    interleaves calls (issue 51, items 1-3)."""
    api = FakeAPI("n1")
    pb, _ = dra_stubs(tmp_path / "stubs")
    sock = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "dra.sock"
    checkpoint = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "checkpoint.json"
    gate, full = tmp_path / "disk-goes-on", tmp_path / "disk-full"
    gate.touch()
    for i in range(3):
        api.claims[("ns", f"c-u{i}")] = claim(f"u{i}", f"gpu-{i}")

    class L:
        pass
    x = L()
    x.api, x.pb, x.sock, x.gate, x.full = api, pb, sock, gate, full
    x.known = lambda: {c["uid"] for c in json.loads(checkpoint.read_text())["claims"]} \
        if checkpoint.exists() else set()

    def later(uid):
        out = []
        t = threading.Thread(target=lambda: out.append(prepare_one(sock, pb, uid)))
        t.start()
        return t, out
    x.later = later
    x.agent = agent("--simulate", "dgx-h100", "--dra", "all", "--kubelet-root", str(tmp_path / "k"),
                    "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1",
                    "--labels", "none", "--no-metrics", "--fault-report", "none",
                    "--status-socket", str(tmp_path / "s.sock"),
                    env=slow_fsync(sim_env, 0, gate, full))
    x.agent.wait_log("DRA: gpu.nvidia.com serving on", timeout=30)
    yield x
    api.stop()


def test_dra_repeated_prepare_waits_for_the_files(lifecycle):
    """The disk hangs; the first prepare is recorded and waits for it; the
    same claim asked again waits too, rather than answering from memory
    before the checkpoint holds it (issue 51, item 2)."""
    x = lifecycle
    x.gate.unlink()
    t1, first = x.later("u0")
    x.agent.wait_log("DRA: prepared claim ns/c-u0")
    t2, again = x.later("u0")
    t2.join(0.5)
    assert not first and not again, (first, again)
    x.gate.touch()
    t1.join(30)
    t2.join(30)
    assert not first[0].error and not again[0].error, (first, again)
    assert "u0" in x.known()
    assert x.agent.stop() == 0


def test_dra_unprepare_cancels_a_prepare_in_flight(lifecycle):
    """The API server holds the claim's read; the kubelet unprepares it
    meanwhile: the prepare answers an error, and nothing of the claim is
    kept (issue 51, item 1)."""
    x = lifecycle
    x.api.hold = 1.0
    t, cancelled = x.later("u1")
    x.api.wait_for(lambda: any(p.endswith("/resourceclaims/c-u1") for _, p in x.api.arrived),
                   "the claim's read", timeout=30)
    unprepare_one(x.sock, x.pb, "u1")
    x.api.hold = 0
    t.join(30)
    assert "unprepared while being prepared" in cancelled[0].error, cancelled
    x.agent.wait_log("DRA: claim ns/c-u1 (u1) unprepared while being prepared")
    assert "u1" not in x.known()
    assert "prepared claim ns/c-u1" not in x.agent.log()
    assert x.agent.stop() == 0


def test_dra_failed_write_fails_the_answer(lifecycle):
    """The disk is full (ENOSPC): the prepare's answer says so; once it is
    not, the kubelet's retry is answered and the checkpoint holds the claim
    (issue 51, item 3)."""
    x = lifecycle
    x.full.touch()
    r = prepare_one(x.sock, x.pb, "u2")
    assert "a file it needs was not written" in r.error and "No space left" in r.error, r.error
    assert "u2" not in x.known()
    x.full.unlink()
    r = prepare_one(x.sock, x.pb, "u2")
    assert not r.error, r.error
    assert "u2" in x.known()
    assert x.agent.stop() == 0


def test_dra_hand_over_waits_for_the_last_write(agent, sim_env, slow_fsync, tmp_path):
    """A rolling update while a prepare writes: the old agent answers the
    new one's hand-over with "releasing" until its checkpoint write has
    ended (the disk hangs here until the test lets it go), so the new one
    reads a whole checkpoint that holds the claim; each writes through a
    temporary file of its own (issue 51, item 5)."""
    api = FakeAPI("n1")
    pb, _ = dra_stubs(tmp_path / "stubs")
    plugins = tmp_path / "k" / "plugins" / "gpu.nvidia.com"
    gate = tmp_path / "disk-goes-on"
    api.claims[("ns", "c-u0")] = claim("u0", "gpu-0")
    args = ["--simulate", "dgx-h100", "--dra", "all", "--kubelet-root", str(tmp_path / "k"),
            "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1",
            "--labels", "none", "--no-metrics", "--fault-report", "none",
            "--status-socket", str(tmp_path / "s.sock")]
    try:
        old = agent(*args, env=slow_fsync(sim_env, 0, gate))
        old.wait_log("DRA: gpu.nvidia.com serving on", timeout=30)
        def ask():  # the old agent's answer never comes: it hands over first
            try:
                prepare_one(plugins / "dra.sock", pb, "u0")
            except grpc.RpcError:
                pass
        t = threading.Thread(target=ask, daemon=True)
        t.start()
        old.wait_log("DRA: prepared claim ns/c-u0")
        new = agent(*args, "--take-over")
        time.sleep(0.5)
        assert "serving on" not in new.log(), new.log()  # it waits for the old one's write
        assert list(plugins.glob("checkpoint.json.*.tmp")) == [plugins / f"checkpoint.json.{old.proc.pid}.tmp"]
        gate.touch()
        new.wait_log("DRA: 1 prepared claim(s) from", timeout=30)
        assert [c["uid"] for c in json.loads((plugins / "checkpoint.json").read_text())["claims"]] == ["u0"]
        # Its socket is bound on the worker pool after the checkpoint is in: the
        # kubelet asks once the driver is registered, and so does the test.
        new.wait_log("DRA: gpu.nvidia.com serving on", timeout=30)
        r = prepare_one(plugins / "dra.sock", pb, "u0")  # the kubelet asks the new one again
        assert not r.error and [d.device_name for d in r.devices] == ["gpu-0"]
        assert not list(plugins.glob("*.tmp"))
        assert new.stop() == 0
    finally:
        api.stop()


def test_dra_claims_containers_from_podresources(agent, sim_env, tmp_path):
    """Nothing at rest, with work (issue 53): where the kubelet's
    PodResources List reports DRA claims, a claim's containers come from it:
    a pod that joins a shared claim shows in the checkpoint (and metrics'
    labels) with no GET of claims or pods after the prepare's own read.
    Where the List reports none, the API fallback is said."""
    from kubelet import FakePodResources, load_podresources_stubs
    api = FakeAPI("n1")
    pb, _ = dra_stubs(tmp_path / "stubs")
    prpb, prpbg = load_podresources_stubs(tmp_path / "prstubs")
    pods = FakePodResources(tmp_path / "k", prpb, prpbg)
    pods.start()
    sock = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "dra.sock"
    checkpoint = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "checkpoint.json"
    api.claims[("ns", "c-u0")] = claim("u0", "gpu-0")

    def consumers():
        cs = json.loads(checkpoint.read_text())["claims"] if checkpoint.exists() else []
        return [x["consumers"] for x in cs]

    def start():
        a = agent("--simulate", "dgx-h100", "--dra", "all", "--kubelet-root", str(tmp_path / "k"),
                  "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1",
                  "--labels", "none", "--no-metrics", "--fault-report", "none",
                  "--status-socket", str(tmp_path / "s.sock"), "--pod-resources-interval-ms", "1000")
        a.wait_log("DRA: gpu.nvidia.com serving on", timeout=30)
        return a
    try:
        pods.claims = [("p1", "ns", "main", "ns", "c-u0", "gpu.nvidia.com", "gpu-0")]
        a = start()
        assert not prepare_one(sock, pb, "u0").error
        a.wait_log("DRA: the claims' containers come from the kubelet's PodResources List")
        assert wait_until(lambda: consumers() == [[{"pod": "p1", "namespace": "ns", "container": "main"}]])
        reads = lambda: [p for m, p, _ in api.requests if m == "GET" and ("/resourceclaims/" in p or "/pods/" in p)]
        before = reads()
        pods.claims.append(("p2", "ns", "side", "ns", "c-u0", "gpu.nvidia.com", "gpu-0"))  # joins the claim
        assert wait_until(lambda: len(consumers()[0]) == 2), consumers()
        time.sleep(0.5)
        assert reads() == before, reads()  # no claim or pod read for it
        assert "read from the API server every" not in a.log()
        assert a.stop() == 0
        # A kubelet whose List has no DRA claims: the fallback, said once.
        pods.claims = []
        api.claims[("ns", "c-u1")] = claim("u1", "gpu-1")
        a = start()
        assert not prepare_one(sock, pb, "u1").error  # its containers are read 2 s after
        a.wait_log("DRA: the claims' containers are read from the API server every 30 s", timeout=20)
        assert a.stop() == 0
    finally:
        pods.stop()
        api.stop()


def wait_until(fn, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return True
        time.sleep(0.05)
    return False


def held_timeslices(sim_env, tmp_path, api, held):
    """A driver root whose stand-in nvidia-smi hangs on the GPUs held (until
    the test takes each hold away), with a Long claim on each of them: the
    root, the time slices' directory and the GPUs' UUIDs."""
    root = tmp_path / "driver"
    subprocess.run([GPULET, "sim", "driver-root", str(root)], check=True, env=sim_env, timeout=30)
    ts = root / "var" / "lib" / "gpulet-sim" / "timeslice"
    ts.mkdir(parents=True, exist_ok=True)
    ids = uuids(subprocess.run([GPULET, "list", "--simulate", "dgx-h100", "-o", "json"], capture_output=True,
                               text=True, env=sim_env).stdout)
    for g in held:
        (ts / f"hold-{ids[g]}").touch()
        c = claim(f"long{g}", f"gpu-{g}")
        c["status"]["allocation"]["devices"]["config"] = [
            gpuconfig({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})]
        api.claims[("ns", f"c-long{g}")] = c
    return root, ts, ids


def start_held(agent, api, tmp_path, root):
    """A DRA agent on held_timeslices' driver root, serving."""
    a = agent("--simulate", "dgx-h100", "--dra", "all", "--kubelet-root", str(tmp_path / "k"),
              "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1",
              "--labels", "none", "--no-metrics", "--fault-report", "none",
              "--status-socket", str(tmp_path / "s.sock"), "--nvidia-driver-root", str(root))
    a.wait_log("DRA: gpu.nvidia.com serving on", timeout=30)
    return a


def test_dra_reload_while_a_time_slice_is_set(agent, sim_env, tmp_path):
    """A SIGHUP while nvidia-smi sets a claim's time slice: the reload
    replaces the agent's config while the GPU's lane reads the op's own
    copy (issue 51, item 6; under ThreadSanitizer, the lane reading the
    agent's config is a reported race). The claim is prepared all the same."""
    api = FakeAPI("n1")
    pb, _ = dra_stubs(tmp_path / "stubs")
    sock = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "dra.sock"
    root, ts, ids = held_timeslices(sim_env, tmp_path, api, [4])
    try:
        a = start_held(agent, api, tmp_path, root)
        answers = []
        t = threading.Thread(target=lambda: answers.append(prepare_one(sock, pb, "long4")))
        t.start()
        assert wait_until(lambda: (ts / f"running-{ids[4]}").exists(), timeout=20), a.log()
        a.proc.send_signal(signal.SIGHUP)
        a.wait_log("SIGHUP: config reloaded", timeout=20)
        (ts / f"hold-{ids[4]}").unlink()
        t.join(timeout=30)
        assert answers and not answers[0].error, answers
        assert (ts / ids[4]).read_text() == "3\n"
        assert a.stop() == 0, a.log()
    finally:
        api.stop()


def test_dra_hung_nvidia_smi_holds_up_only_its_gpu(agent, sim_env, tmp_path):
    """nvidia-smi runs on its GPU's lane (issue 51: executors). Four GPUs
    whose nvidia-smi hangs hold up their own claims' prepares and nothing
    else: a claim on another GPU is prepared meanwhile, its checkpoint on
    disk. Before, the four filled libuv's worker pool, the checkpoint's
    write waited behind them, and the answer came only when nvidia-smi's
    10 s limit killed them (failing the four)."""
    api = FakeAPI("n1")
    pb, _ = dra_stubs(tmp_path / "stubs")
    sock = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "dra.sock"
    checkpoint = tmp_path / "k" / "plugins" / "gpu.nvidia.com" / "checkpoint.json"
    held = [4, 5, 6, 7]
    root, ts, ids = held_timeslices(sim_env, tmp_path, api, held)
    api.claims[("ns", "c-plain")] = claim("plain", "gpu-0")
    try:
        a = start_held(agent, api, tmp_path, root)
        answers = {}
        threads = [threading.Thread(target=lambda g=g: answers.update({g: prepare_one(sock, pb, f"long{g}")}))
                   for g in held]
        for t in threads:
            t.start()
        assert wait_until(lambda: all((ts / f"running-{ids[g]}").exists() for g in held), timeout=20), a.log()
        got = prepare_one(sock, pb, "plain")
        assert not got.error, got.error
        assert "plain" in {c["uid"] for c in json.loads(checkpoint.read_text())["claims"]}
        assert all(t.is_alive() for t in threads) and not answers, answers  # still held
        for g in held:
            (ts / f"hold-{ids[g]}").unlink()
        for t in threads:
            t.join(timeout=30)
        assert {g: answers[g].error for g in held} == {g: "" for g in held}
        assert all((ts / ids[g]).read_text() == "3\n" for g in held)
    finally:
        api.stop()
