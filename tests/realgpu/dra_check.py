"""gpulet as a DRA driver on a real GPU, against the stand-in API server of
the integration tests and a grpcio stand-in for the kubelet:
- the ResourceSlice (resource.k8s.io/v1) agrees with nvidia-smi (name,
  UUID, memory, compute capability, driver version, minor number, brand,
  PCI bus ID) and sysfs (the PCIe root);
- a claim on GPU 0 with NVIDIA's GpuConfig for MPS (50% of the threads,
  8Gi pinned) gets the real nvidia-cuda-mps-control of its own, and is
  answered once it took the limits;
- a client started as a container would be, with the claim's CDI edits
  (the pipe directory and /dev/shm mounted in a private mount namespace,
  CUDA_MPS_PIPE_DIRECTORY), runs through the MPS server and is stopped at
  the claim's 8 GiB;
- unprepare stops the daemon and removes its directory;
- GPU 0 is published for shares (--dra-shares 0): two claims' shares of it,
  8Gi and 16Gi, are prepared through its one MPS daemon, and two clients
  started with each claim's CDI edits at once stop at 8 and 16 GiB;
  the daemon stops after the last share; exit deletes the slice. The GPU's
  settings are not changed.
usage: dra_check.py GPULET STUBS_DIR (with dra_pb2.py in it)"""
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
sys.path.insert(0, sys.argv[2])
import grpc  # noqa: E402
import dra_pb2 as pb  # noqa: E402
from fakeapi import FakeAPI  # noqa: E402

gpulet = sys.argv[1]
here = Path(__file__).resolve().parent
DRA = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
ok = True


def check(what, cond, detail=""):
    global ok
    ok &= bool(cond)
    print(f"{'PASS' if cond else 'FAIL'}  {what}  {detail}", flush=True)


def mps_processes():
    return subprocess.run(["pgrep", "-a", "nvidia-cuda-mps"], capture_output=True, text=True).stdout.split("\n")[:-1]


def claim_answer(resp, uid):
    """A map field; the pure-Python protobuf with older generated code gives
    it as a list of entries."""
    try:
        return resp.claims[uid]
    except TypeError:
        return next(e.value for e in resp.claims if e.key == uid)


def run_client(edits, name, seconds):
    """mps_client.py as a CDI runtime would start it: the spec's mounts (in a
    private mount namespace) and its environment."""
    binds = [f"mkdir -p {shlex.quote(m['containerPath'])} && mount --bind {shlex.quote(m['hostPath'])} "
             f"{shlex.quote(m['containerPath'])}" for m in edits["mounts"]]
    env = " ".join(shlex.quote(e) for e in edits["env"])
    script = " && ".join(binds + [f"exec env {env} python3 {here / 'mps_client.py'} {name} {seconds}"])
    return subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def call(sock, method, req, resp_cls):
    with grpc.insecure_channel(f"unix://{sock}") as ch:
        return ch.unary_unary(DRA + method, request_serializer=lambda m: m.SerializeToString(),
                              response_deserializer=resp_cls.FromString)(req, timeout=60)


smi = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total,compute_cap,driver_version,pci.bus_id",
                      "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True).stdout
first = [f.strip() for f in smi.splitlines()[0].split(",")]
minor = subprocess.run(["nvidia-smi", "-i", "0", "-q"], capture_output=True, text=True).stdout
brand = next(l.split(":")[1].strip() for l in minor.splitlines() if "Product Brand" in l)
minor = next(l.split(":")[1].strip() for l in minor.splitlines() if "Minor Number" in l)
bus = first[6].lower()[4:] if first[6].startswith("0000") and len(first[6]) > 12 else first[6].lower()
root = os.path.realpath(f"/sys/bus/pci/devices/{bus}").split("/")[3]  # /sys/devices/pciDDDD:BB/...
mode_before = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=compute_mode", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()

with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    check("no MPS daemon before", not mps_processes(), str(mps_processes()))
    api = FakeAPI("n1")
    agent = subprocess.Popen([gpulet, "agent", "--dra", "all", "--node-name", "n1",
                              "--kubeconfig", str(api.kubeconfig(tmp / "kc")), "--kubelet-root", str(tmp / "k"),
                              "--mps-root", str(tmp / "mps"), "--cdi-spec-dir", str(tmp / "cdi"),
                              "--dra-shares", "0",
                              "--labels", "none", "--fault-report", "none", "--no-metrics",
                              "--status-socket", str(tmp / "status.sock")],
                             stderr=open(tmp / "agent.log", "w"))
    try:
        api.wait_for(lambda: api.slices.get("n1-gpu.nvidia.com"), "the slice", timeout=60)
        dev = api.slices["n1-gpu.nvidia.com"]["spec"]["devices"][0]
        attrs = dev["attributes"]
        print("slice device 0:", json.dumps(dev))
        check("device name gpu-<minor>", dev["name"] == f"gpu-{minor}", f"{dev['name']} vs minor {minor}")
        check("uuid", attrs["uuid"]["string"] == first[1])
        check("productName", attrs["productName"]["string"] == first[2], attrs["productName"])
        check("memory", dev["capacity"]["memory"]["value"] == f"{first[3]}Mi",
              f"{dev['capacity']['memory']} vs {first[3]} MiB")
        check("brand (go-nvlib's name for nvidia-smi's Product Brand)",
              attrs["brand"]["string"].lower() == brand.lower(), f"{attrs['brand']} vs {brand}")
        check("pciBusID", attrs["resource.kubernetes.io/pciBusID"]["string"] == bus,
              f"{attrs['resource.kubernetes.io/pciBusID']} vs {first[6]}")
        check("pcieRoot", attrs.get("resource.kubernetes.io/pcieRoot", {}).get("string") == root,
              f"{attrs.get('resource.kubernetes.io/pcieRoot')} vs sysfs {root}")
        check("index and minor", attrs["index"] == {"int": 0} and attrs["minor"] == {"int": int(minor)})
        check("cudaComputeCapability", attrs["cudaComputeCapability"]["version"] == f"{first[4]}.0",
              f"{attrs['cudaComputeCapability']} vs {first[4]}")
        check("driverVersion", attrs["driverVersion"]["version"].split(".")[:2] == first[5].split(".")[:2],
              f"{attrs['driverVersion']} vs {first[5]}")
        # A claim on it, shared through MPS with its limits.
        api.claims[("ns", "c-mps")] = {
            "kind": "ResourceClaim", "metadata": {"name": "c-mps", "namespace": "ns", "uid": "u-mps"},
            "status": {"allocation": {"devices": {
                "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": dev["name"]}],
                "config": [{"source": "FromClaim", "opaque": {"driver": "gpu.nvidia.com", "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                    "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50,
                                                                 "defaultPinnedDeviceMemoryLimit": "8Gi"}}}}}]}}}}
        sock = tmp / "k" / "plugins" / "gpu.nvidia.com" / "dra.sock"
        t0 = time.monotonic()
        r = call(sock, "NodePrepareResources", pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace="ns", uid="u-mps", name="c-mps")]), pb.NodePrepareResourcesResponse)
        took = time.monotonic() - t0
        got = claim_answer(r, "u-mps")
        check("prepared", not got.error, got.error)
        print(f"prepare answered in {took * 1000:.0f} ms (the MPS daemon started and took the limits)")
        ids = list(got.devices[0].cdi_device_ids)
        check("CDI devices", ids == [f"nvidia.com/gpu={first[1]}", "gpu.nvidia.com/claim=u-mps"], str(ids))
        check("the claim's daemon runs", any("nvidia-cuda-mps-control" in p for p in mps_processes()),
              str(mps_processes()))
        spec = json.loads((tmp / "cdi" / "gpu.nvidia.com-claim_u-mps.json").read_text())
        edits = spec["devices"][0]["containerEdits"]
        print("claim CDI edits:", json.dumps(edits))
        client = run_client(edits, "claim", 6)
        time.sleep(8)
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                               "--format=csv,noheader"], capture_output=True, text=True).stdout
        out = client.communicate(timeout=300)[0]
        print(out)
        print("compute apps while the client ran:\n" + apps)
        line = [l for l in out.splitlines() if "allocated" in l]
        gib = int(line[0].split("allocated ")[1].split(" GiB")[0]) if line else -1
        check("the client stops at the claim's 8Gi", 5 <= gib <= 8, line[0] if line else out)
        check("the client ran its job", "matmuls" in out)
        check("through the claim's MPS server", "mps-server" in apps or
              any("nvidia-cuda-mps-server" in p for p in mps_processes()), apps)
        call(sock, "NodeUnprepareResources", pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace="ns", uid="u-mps", name="c-mps")]), pb.NodeUnprepareResourcesResponse)
        deadline = time.monotonic() + 30
        while mps_processes() and time.monotonic() < deadline:
            time.sleep(0.5)
        check("unprepare stops the daemon", not mps_processes(), str(mps_processes()))
        check("and removes its directory and spec", not (tmp / "mps" / "claim-u-mps").exists() and
              not (tmp / "cdi" / "gpu.nvidia.com-claim_u-mps.json").exists())
        # Shares of GPU 0 (consumable capacity): 8Gi and 16Gi, one daemon.
        check("GPU 0 published for shares", dev.get("allowMultipleAllocations") is True and
              dev["capacity"]["memory"].get("requestPolicy", {}).get("validRange", {}).get("step") == "1Gi",
              json.dumps(dev["capacity"]))
        for uid, mem in (("u-s8", "8Gi"), ("u-s16", "16Gi")):
            api.claims[("ns", f"c-{uid}")] = {
                "kind": "ResourceClaim", "metadata": {"name": f"c-{uid}", "namespace": "ns", "uid": uid},
                "status": {"allocation": {"devices": {"results": [{
                    "request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": dev["name"],
                    "shareID": f"share-{uid}", "consumedCapacity": {"memory": mem}}]}}}}
        t0 = time.monotonic()
        r = call(sock, "NodePrepareResources", pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace="ns", uid=u, name=f"c-{u}") for u in ("u-s8", "u-s16")]),
            pb.NodePrepareResourcesResponse)
        print(f"two shares prepared in {(time.monotonic() - t0) * 1000:.0f} ms (their GPU's daemon started)")
        shares = {u: claim_answer(r, u) for u in ("u-s8", "u-s16")}
        check("shares prepared", all(not a.error for a in shares.values()),
              str([a.error for a in shares.values()]))
        check("each answer carries its shareID",
              all(a.devices and a.devices[0].share_id == f"share-{u}" for u, a in shares.items()))
        daemons = [p for p in mps_processes() if "nvidia-cuda-mps-control" in p]
        check("one daemon for both shares", len(daemons) == 1, str(mps_processes()))
        clients = {}
        for u in ("u-s8", "u-s16"):
            e = json.loads((tmp / "cdi" / f"gpu.nvidia.com-claim_{u}.json").read_text())["devices"][0]["containerEdits"]
            print(f"{u} CDI edits:", json.dumps(e))
            clients[u] = run_client(e, u, 3)
        outs = {u: c.communicate(timeout=300)[0] for u, c in clients.items()}
        for u, limit in (("u-s8", 8), ("u-s16", 16)):
            print(outs[u])
            line = [l for l in outs[u].splitlines() if "allocated" in l]
            gib = int(line[0].split("allocated ")[1].split(" GiB")[0]) if line else -1
            check(f"the share {u} stops at its {limit}Gi", limit - 3 <= gib <= limit, line[0] if line else outs[u])
        call(sock, "NodeUnprepareResources", pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace="ns", uid="u-s8", name="c-u-s8")]), pb.NodeUnprepareResourcesResponse)
        time.sleep(1)
        check("the daemon stays for the other share", len(mps_processes()) >= 1, str(mps_processes()))
        call(sock, "NodeUnprepareResources", pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace="ns", uid="u-s16", name="c-u-s16")]), pb.NodeUnprepareResourcesResponse)
        deadline = time.monotonic() + 30
        while mps_processes() and time.monotonic() < deadline:
            time.sleep(0.5)
        check("and stops after the last", not mps_processes(), str(mps_processes()))
    finally:
        agent.terminate()
        agent.wait(timeout=30)
        api.stop()
    check("agent exit 0", agent.returncode == 0)
    check("the slice deleted on exit", "n1-gpu.nvidia.com" not in api.slices)
    print((tmp / "agent.log").read_text())
mode_after = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=compute_mode", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
check("compute mode unchanged", mode_before == mode_after, f"{mode_before} -> {mode_after}")
check("no MPS daemon after", not mps_processes(), str(mps_processes()))
print("ALL PASS" if ok else "SOME CHECKS FAILED")
sys.exit(0 if ok else 1)
