"""MIG strategies against the grpcio kubelet on the MIG presets: what
NVIDIA's plugin would advertise (resource and socket names, device IDs),
Allocate (MIG UUIDs, the parent's node and the GI and CI access
capabilities), preferred allocation, and single's refusals."""
import json
import shutil
import subprocess

import pytest

from conftest import GPULET, SANITIZED, ctypes_env


def mig_devices(sim_env, preset):
    out = subprocess.run([GPULET, "list", "--simulate", preset, "-o", "json"], capture_output=True,
                         text=True, env=sim_env, check=True).stdout
    return json.loads(out)["gpus"]


def advertised(kubelet):
    """{resource: (endpoint, [device IDs])} of every registration so far."""
    out = {}
    for _, reg in kubelet.registrations:
        channel, stub = kubelet.plugin(reg.endpoint)
        devs = next(stub.ListAndWatch(kubelet.pb.Empty(), timeout=5)).devices
        out[reg.resource_name] = (reg.endpoint, [d.ID for d in devs])
        channel.close()
    return out


def start(plugin_agent, kubelet, preset, strategy, n, *args):
    a = plugin_agent("--simulate", preset, "--mig-strategy", strategy, *args, wait=False)
    kubelet.wait_registrations(n, timeout=30)
    a.wait_log("agent running")
    return a


def test_mixed_h200(plugin_agent, kubelet, sim_env):
    gpus = mig_devices(sim_env, "h200-mig-mixed")
    start(plugin_agent, kubelet, "h200-mig-mixed", "mixed", 4)
    got = advertised(kubelet)
    assert sorted(got) == ["nvidia.com/gpu", "nvidia.com/mig-1g.18gb", "nvidia.com/mig-2g.35gb",
                           "nvidia.com/mig-3g.71gb"]
    assert got["nvidia.com/mig-1g.18gb"][0] == "gpulet-nvidia-mig-1g.18gb.sock"
    assert got["nvidia.com/gpu"][1] == [gpus[3]["uuid"]]  # the GPU without MIG, whole
    want = {}
    for g in gpus[:3]:
        for m in g["mig_devices"]:
            want.setdefault("nvidia.com/mig-" + m["profile"], []).append(m["uuid"])
    for name, ids in want.items():
        assert sorted(got[name][1]) == sorted(ids), name
    assert len(got["nvidia.com/mig-1g.18gb"][1]) == 11


def test_mixed_a100_names_and_me(plugin_agent, kubelet):
    start(plugin_agent, kubelet, "a100-mig-mixed", "mixed", 7)
    counts = {k: len(v[1]) for k, v in advertised(kubelet).items()}
    assert counts == {
        "nvidia.com/gpu": 1, "nvidia.com/mig-1g.5gb": 17, "nvidia.com/mig-1g.5gb.me": 1,
        "nvidia.com/mig-2g.10gb": 4, "nvidia.com/mig-3g.20gb": 4, "nvidia.com/mig-4g.20gb": 1,
        "nvidia.com/mig-7g.40gb": 1}, counts


def test_single_h100(plugin_agent, kubelet, sim_env):
    gpus = mig_devices(sim_env, "h100-mig-single")
    start(plugin_agent, kubelet, "h100-mig-single", "single", 1, "--device-id-strategy", "index")
    got = advertised(kubelet)
    assert list(got) == ["nvidia.com/gpu"]
    ids = got["nvidia.com/gpu"][1]
    assert len(ids) == 56 and sorted(ids) == sorted(f"{g}:{k}" for g in range(8) for k in range(7))
    assert all(len(g["mig_devices"]) == 7 for g in gpus)


def test_none_advertises_mig_gpus_whole(plugin_agent, kubelet, sim_env):
    gpus = mig_devices(sim_env, "a100-mig-mixed")
    start(plugin_agent, kubelet, "a100-mig-mixed", "none", 1)
    got = advertised(kubelet)
    assert sorted(got["nvidia.com/gpu"][1]) == sorted(g["uuid"] for g in gpus)


def test_single_refuses_unlike_gpus(agent, tmp_path):
    a = agent("--simulate", "a100-mig-mixed", "--mig-strategy", "single", "--no-metrics",
              "--kubelet-root", str(tmp_path / "k"), "--status-socket", str(tmp_path / "s.sock"))
    assert a.proc.wait(timeout=20) == 1
    assert ("MIG strategy single: GPU 0 has MIG devices of two profiles, 3g.20gb and 2g.10gb; "
            "single needs one profile on the whole node (use mixed)") in a.log()
    b = agent("--simulate", "h200-mig-mixed", "--mig-strategy", "single", "--no-metrics",
              "--kubelet-root", str(tmp_path / "k2"), "--status-socket", str(tmp_path / "s2.sock"))
    assert b.proc.wait(timeout=20) == 1
    assert "GPU 0 has MIG devices of two profiles, 3g.71gb and 2g.35gb" in b.log()


def test_allocate_mig_device(plugin_agent, kubelet, sim_env, tmp_path):
    caps = tmp_path / "node-proc" / "driver" / "nvidia-caps"
    caps.mkdir(parents=True)
    # The driver's numbering, except one line, to see the file is read.
    lines = ["config 1", "monitor 2"]
    for gpu in range(4):
        for gi in range(15):
            base = 3 + gpu * 135 + gi * 9
            lines.append(f"gpu{gpu}/gi{gi}/access {base}")
            lines += [f"gpu{gpu}/gi{gi}/ci{ci}/access {base + 1 + ci}" for ci in range(8)]
    lines = [l if l != "gpu2/gi3/ci0/access 301" else "gpu2/gi3/ci0/access 9999" for l in lines]
    (caps / "mig-minors").write_text("\n".join(lines) + "\n")
    gpus = mig_devices(sim_env, "h200-mig-mixed")
    start(plugin_agent, kubelet, "h200-mig-mixed", "mixed", 4, "--pass-device-specs")
    got = advertised(kubelet)
    endpoint, ids = got["nvidia.com/mig-1g.18gb"]
    pb = kubelet.pb
    channel, stub = kubelet.plugin(endpoint)
    # GPU 2's third MIG device: GI 3.
    mig = gpus[2]["mig_devices"][2]
    r = stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[mig["uuid"]])])).container_responses[0]
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == mig["uuid"]
    paths = [d.container_path for d in r.devices]
    assert paths[-3:] == ["/dev/nvidia2", f"/dev/nvidia-caps/nvidia-cap{3 + 2 * 135 + 3 * 9}",
                          "/dev/nvidia-caps/nvidia-cap9999"], paths
    # Preferred allocation: two 1g devices come from two GPUs.
    pr = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=2)]))
    chosen = list(pr.container_responses[0].deviceIDs)
    owner = {m["uuid"]: g["index"] for g in gpus for m in g.get("mig_devices", [])}
    assert len({owner[c] for c in chosen}) == 2, chosen
    channel.close()


def test_reconfiguration_live(plugin_agent, kubelet, sim_env):
    """mig-parted's kind of change on a running node: gpulet notices it,
    registers the new devices within seconds, and says what went."""
    a = start(plugin_agent, kubelet, "h200-mig-mixed", "mixed", 4)
    before = mig_devices(sim_env, "h200-mig-mixed")[2]["mig_devices"]
    p = subprocess.run([GPULET, "sim", "mig", "2", "7g.141gb,1g.18gb"], capture_output=True,
                       text=True, env=sim_env)
    assert p.returncode == 1
    assert "the profiles take 8 compute slices; a GPU has 7" in p.stdout + p.stderr
    p = subprocess.run([GPULET, "sim", "mig", "2", "3g.71gb,3g.71gb"], capture_output=True,
                       text=True, env=sim_env)
    assert p.returncode == 0, p.stdout + p.stderr
    a.wait_log("GPU 2: MIG devices changed: gone 1g.18gb " + before[0]["uuid"], timeout=10)
    kubelet.wait_registrations(4 + 4, timeout=10)
    got = {k: len(v[1]) for k, v in advertised(kubelet).items()}
    assert got["nvidia.com/mig-1g.18gb"] == 4 and got["nvidia.com/mig-3g.71gb"] == 4, got
    assert "pods holding a device that went keep running" in a.log()
    # A device that went: Allocate names it and fails, and nothing is allocated.
    import grpc
    ep = {r.resource_name: r.endpoint for _, r in kubelet.registrations[4:]}
    channel, stub = kubelet.plugin(ep["nvidia.com/mig-1g.18gb"])
    try:
        stub.Allocate(kubelet.pb.AllocateRequest(container_requests=[
            kubelet.pb.ContainerAllocateRequest(devices_ids=[before[0]["uuid"]])]), timeout=5)
        raise AssertionError("Allocate of a MIG device that went succeeded")
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"unknown device ID '{before[0]['uuid']}'" in err.details()
    finally:
        channel.close()
    # Nothing more changes: no more registrations.
    import time
    time.sleep(2.5)
    assert len(kubelet.registrations) == 8
    assert a.stop() == 0


def health_of(kubelet, endpoint):
    channel, stub = kubelet.plugin(endpoint)
    try:
        return {d.ID: d.health for d in next(stub.ListAndWatch(kubelet.pb.Empty(), timeout=5)).devices}
    finally:
        channel.close()


def wait_health(kubelet, endpoint, pred, timeout=10.0):
    import time
    deadline = time.monotonic() + timeout
    while not pred(h := health_of(kubelet, endpoint)):
        assert time.monotonic() < deadline, h
        time.sleep(0.1)
    return h


def test_health_per_gpu_instance(plugin_agent, kubelet, sim_env):
    """An XID in a GPU instance marks its MIG device only; one on the GPU
    marks all of its MIG devices; both recover as whole GPUs do."""
    gpus = mig_devices(sim_env, "h200-mig-mixed")
    a = start(plugin_agent, kubelet, "h200-mig-mixed", "mixed", 4, "--health-probe-ms", "100",
              "--xid-recovery-seconds", "1")
    ep = {r.resource_name: r.endpoint for _, r in kubelet.registrations}
    two_g = gpus[0]["mig_devices"][1]               # 2g.35gb, GPU instance 2 on GPU 0
    assert two_g["profile"] == "2g.35gb" and two_g["gpu_instance_id"] == 2
    sim(sim_env, "xid", "0", "94", "2")
    h = wait_health(kubelet, ep["nvidia.com/mig-2g.35gb"], lambda h: h[two_g["uuid"]] == "Unhealthy")
    assert list(h.values()).count("Unhealthy") == 1  # GPU 1's 2g.35gb is fine
    one_g = health_of(kubelet, ep["nvidia.com/mig-1g.18gb"])
    assert set(one_g.values()) == {"Healthy"}        # GPU 0's other instances too
    a.wait_log("GPU 0: XID 94 in GPU instance 2: MIG device " + two_g["uuid"] + " is unhealthy")
    # The whole GPU 2: all seven of its 1g devices.
    sim(sim_env, "xid", "2", "94")
    gpu2 = {m["uuid"] for m in gpus[2]["mig_devices"]}
    h = wait_health(kubelet, ep["nvidia.com/mig-1g.18gb"],
                    lambda h: all(h[u] == "Unhealthy" for u in gpu2))
    assert [u for u, s in h.items() if s == "Unhealthy" and u not in gpu2] == []
    # Quiet for a second, and the GPU answers: healthy again.
    wait_health(kubelet, ep["nvidia.com/mig-1g.18gb"], lambda h: set(h.values()) == {"Healthy"})
    wait_health(kubelet, ep["nvidia.com/mig-2g.35gb"], lambda h: set(h.values()) == {"Healthy"})
    # The log speaks of GPU 2, which was unhealthy, and never of GPU 0 as a
    # whole: only its MIG device was.
    assert "GPU 2 (" in a.log() and "GPU 0 (" not in a.log().split("MIG device " + two_g["uuid"])[1]
    p = subprocess.run([GPULET, "sim", "xid", "3", "94", "1"], capture_output=True, text=True,
                       env=sim_env)
    assert p.returncode == 1 and "GPU 3 has no GPU instance 1" in p.stdout + p.stderr


def sim(env, *args):
    p = subprocess.run([GPULET, "sim", *args], capture_output=True, text=True, env=env, timeout=10)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_metrics_per_gpu_instance(agent, tmp_path, sim_env):
    """dcgm-exporter's per-GPU-instance framebuffer series, with
    GPU_I_PROFILE and GPU_I_ID after modelName, and the pod that holds the
    MIG device (PodResources with nvidia.com/mig-* IDs)."""
    from kubelet import FakePodResources, load_podresources_stubs
    from test_metrics import free_port, get, parse, wait_for
    gpus = mig_devices(sim_env, "h200-mig-mixed")
    mig = gpus[0]["mig_devices"][2]                  # a 1g.18gb, GPU instance 3
    pb, pbg = load_podresources_stubs(tmp_path / "prstubs")
    pods = FakePodResources(tmp_path / "kubelet", pb, pbg)
    pods.pods = [("infer-0", "ml", "main", "nvidia.com/mig-1g.18gb", [mig["uuid"]])]
    pods.start()
    port = free_port()
    try:
        agent("--simulate", "h200-mig-mixed", "--mig-strategy", "mixed", "--kubelet-root",
              str(tmp_path / "kubelet"), "--status-socket", str(tmp_path / "s.sock"),
              "--metrics-listen", f"127.0.0.1:{port}", "--metrics-interval-ms", "200",
              "--pod-resources-interval-ms", "1000").wait_log("metrics ready")
        url = f"http://127.0.0.1:{port}/metrics"

        def owned():
            s = parse(get(url)[2])
            rows = [(l, v, o) for l, v, o in s.get("DCGM_FI_DEV_FB_USED", []) if "GPU_I_ID" in l]
            return rows if any(l.get("pod") == "infer-0" for l, _, _ in rows) else None
        rows = wait_for(owned)
        assert rows, get(url)[2][:3000]
        # 4 + 4 + 7 GPU instances; GPU 3 is whole.
        assert len(rows) == 15
        l, v, order = next(r for r in rows if r[0]["GPU_I_ID"] == "3" and r[0]["gpu"] == "0")
        assert l["GPU_I_PROFILE"] == "1g.18gb" and l["pod"] == "infer-0" and l["namespace"] == "ml"
        assert order[:7] == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE",
                             "GPU_I_ID"]
        assert 0 <= v <= 16384
        free = {(l["gpu"], l["GPU_I_ID"]): v for l, v, _ in parse(get(url)[2])["DCGM_FI_DEV_FB_FREE"]
                if "GPU_I_ID" in l}
        assert free[("0", "1")] + [v for l, v, _ in rows if l["gpu"] == "0" and l["GPU_I_ID"] == "1"][0] \
            <= 71424
        # The resource of each MIG device; a GPU in MIG mode has no row of its own.
        served = {(l["gpu"], l.get("GPU_I_ID")): l["resource"]
                  for l, _, _ in parse(get(url)[2])["gpulet_gpu_resource"]}
        assert len(served) == 16
        assert served[("0", "3")] == "nvidia.com/mig-1g.18gb"
        assert served[("3", None)] == "nvidia.com/gpu"
        assert ("0", None) not in served
    finally:
        pods.stop()


def test_time_sliced_mig_devices(plugin_agent, kubelet, sim_env, tmp_path):
    """Time-slicing a MIG profile, as NVIDIA's plugin allows: each device of
    nvidia.com/mig-1g.18gb becomes two replicas (<MIG UUID>::<n>); Allocate
    of two replicas of one device gives that device once; GFD's labels say
    replicas 2, time-slicing and -SHARED for that profile only."""
    gpus = mig_devices(sim_env, "h200-mig-mixed")
    cfg = tmp_path / "ts.yaml"
    cfg.write_text("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                   "    - name: nvidia.com/mig-1g.18gb\n      replicas: 2\n")
    start(plugin_agent, kubelet, "h200-mig-mixed", "mixed", 4, "--config-file", str(cfg))
    got = advertised(kubelet)
    ones = [m["uuid"] for g in gpus for m in g.get("mig_devices", []) if m["profile"] == "1g.18gb"]
    assert sorted(got["nvidia.com/mig-1g.18gb"][1]) == sorted(f"{u}::{n}" for u in ones
                                                              for n in range(2))
    assert len(got["nvidia.com/mig-2g.35gb"][1]) == 2  # the other profiles stay whole
    channel, stub = kubelet.plugin("gpulet-nvidia-mig-1g.18gb.sock")
    try:
        resp = stub.Allocate(kubelet.pb.AllocateRequest(container_requests=[
            kubelet.pb.ContainerAllocateRequest(devices_ids=[f"{ones[0]}::0", f"{ones[0]}::1"])]),
            timeout=10).container_responses[0]
    finally:
        channel.close()
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == ones[0]
    p = subprocess.run([GPULET, "labels", "--simulate", "h200-mig-mixed", "--mig-strategy", "mixed",
                        "--config-file", str(cfg)], capture_output=True, text=True, env=sim_env)
    labels = dict(l.split("=", 1) for l in p.stdout.splitlines())
    assert labels["nvidia.com/mig-1g.18gb.replicas"] == "2"
    assert labels["nvidia.com/mig-1g.18gb.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/mig-1g.18gb.product"] == "NVIDIA-H200-MIG-1g.18gb-SHARED"
    assert labels["nvidia.com/mig-2g.35gb.replicas"] == "1"
    assert labels["nvidia.com/mig-2g.35gb.sharing-strategy"] == "none"
    # nvidia.com/gpu: every GPU of the model counted; the whole one unshared.
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert labels["nvidia.com/gpu.replicas"] == "1"
    # single: the entry names nvidia.com/gpu, which the MIG devices are.
    cfg.write_text("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                   "    - name: nvidia.com/gpu\n      replicas: 3\n")
    p = subprocess.run([GPULET, "labels", "--simulate", "h100-mig-single", "--mig-strategy",
                        "single", "--config-file", str(cfg)], capture_output=True, text=True,
                       env=sim_env)
    labels = dict(l.split("=", 1) for l in p.stdout.splitlines())
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "3"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"


@pytest.mark.skipif(SANITIZED or not shutil.which("valgrind"), reason="valgrind runs on the plain build")
def test_valgrind_mig(plugin_agent, kubelet, sim_env):
    """Mixed on MIG GPUs, an XID in a GPU instance, a reconfiguration and
    an Allocate, under valgrind: no leaks, no invalid accesses."""
    gpus = mig_devices(sim_env, "h200-mig-mixed")
    a = plugin_agent("--simulate", "h200-mig-mixed", "--mig-strategy", "mixed", "--pass-device-specs",
                     "--health-probe-ms", "200", wait=False,
                     prefix=("valgrind", "--error-exitcode=9", "--leak-check=full",
                             "--errors-for-leak-kinds=definite,indirect", "-q"))
    kubelet.wait_registrations(4, timeout=60)
    a.wait_log("agent running", timeout=60)
    sim(sim_env, "xid", "0", "94", "2")
    sim(sim_env, "mig", "2", "3g.71gb,3g.71gb")
    kubelet.wait_registrations(8, timeout=60)
    ep = {r.resource_name: r.endpoint for _, r in kubelet.registrations}
    channel, stub = kubelet.plugin(ep["nvidia.com/mig-2g.35gb"])
    pb = kubelet.pb
    r = stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
        devices_ids=[gpus[1]["mig_devices"][1]["uuid"]])]), timeout=30).container_responses[0]
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == gpus[1]["mig_devices"][1]["uuid"]
    channel.close()
    assert a.stop(timeout=60) == 0, a.log()


PROFILE_INFO = """
import ctypes, json, sys
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint) for n in ("id", "isP2pSupported", "sliceCount", "instanceCount",
               "multiprocessorCount", "copyEngineCount", "decoderCount", "encoderCount", "jpegCount",
               "ofaCount")] + [("memorySizeMB", ctypes.c_ulonglong)]
class Placement(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]
nvml = ctypes.CDLL(sys.argv[1])
assert nvml.nvmlInit_v2() == 0
h = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
mode, pending, count = ctypes.c_uint(9), ctypes.c_uint(9), ctypes.c_uint(9)
out = {"mig_mode": [None, None], "profiles": []}
if nvml.nvmlDeviceGetMigMode(h, ctypes.byref(mode), ctypes.byref(pending)) == 0:
    out["mig_mode"] = [mode.value, pending.value]
nvml.nvmlDeviceGetMaxMigDeviceCount(h, ctypes.byref(count))
out["max_mig_devices"] = count.value
for p in range(16):
    info = Info()
    if nvml.nvmlDeviceGetGpuInstanceProfileInfo(h, p, ctypes.byref(info)) != 0:
        continue
    row = {"profile": p, **{n: getattr(info, n) for n, _ in Info._fields_}}
    arr, n = (Placement * 16)(), ctypes.c_uint(16)
    assert nvml.nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, info.id, arr, ctypes.byref(n)) == 0
    row["placements"] = [[arr[k].start, arr[k].size] for k in range(n.value)]
    out["profiles"].append(row)
print(json.dumps(out))
"""


@pytest.mark.parametrize("card,scenario,profiles", [
    ("h200", "h200x4-vm", ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")),
    ("h100", "dgx-h100", ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
])
def test_tables_match_the_real_card(sim_env, tmp_path, card, scenario, profiles):
    """What the simulator's H200 and H100 answer with MIG disabled, read as
    tests/realgpu/mig_probe.py read the real cards: the same (the profiles
    and placements --dra-mig publishes, and its counters' values)."""
    from conftest import SIM_LIB, SOURCE
    real = json.loads((SOURCE / f"tests/realgpu/data/{card}-mig-disabled.json").read_text())["gpus"][0]
    env = ctypes_env(dict(sim_env, GPULET_SIM_SCENARIO=scenario, GPULET_SIM_CONTROL="off"))
    p = subprocess.run(["/usr/bin/python3", "-c", PROFILE_INFO, SIM_LIB], capture_output=True,
                       text=True, env=env, check=True)
    sim = json.loads(p.stdout)
    assert sim["mig_mode"] == real["mig_mode"] and sim["max_mig_devices"] == real["max_mig_devices"]
    want = [{k: v for k, v in row.items() if k not in ("version", "placements_error", "name")}
            for row in real["gpu_instance_profiles"] if "error" not in row]
    # The driver's names are the simulator's table's (which gpulet derives: unit test).
    names = sorted(row["name"] for row in real["gpu_instance_profiles"] if "name" in row)
    assert names == sorted("MIG " + n for n in profiles)
    for row in want:
        row["placements"] = [list(x) for x in row["placements"]]
    assert sim["profiles"] == want


def test_strategy_by_reload(plugin_agent, kubelet, sim_env, tmp_path):
    """none to mixed by SIGHUP: MIG devices advertised, and watched for
    changes from then on; a single that cannot be is refused, mixed kept."""
    import signal
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: v1\nflags:\n  migStrategy: none\n")
    a = plugin_agent("--simulate", "h200-mig-mixed", "--config-file", str(cfg))
    cfg.write_text("version: v1\nflags:\n  migStrategy: mixed\n")
    a.proc.send_signal(signal.SIGHUP)
    kubelet.wait_registrations(1 + 4, timeout=10)
    cfg.write_text("version: v1\nflags:\n  migStrategy: single\n")
    a.proc.send_signal(signal.SIGHUP)
    a.wait_log("SIGHUP: config not reloaded, keeping the running one: MIG strategy single: GPU 0")
    sim(sim_env, "mig", "1", "7g.141gb")
    a.wait_log("GPU 1: MIG devices changed", timeout=10)
    assert a.stop() == 0



GO_NVLIB = """
import ctypes, json, sys
class Placement(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]
class GiInfo(ctypes.Structure):
    _fields_ = [("device", ctypes.c_void_p), ("id", ctypes.c_uint), ("profileId", ctypes.c_uint),
                ("placement", Placement)]
class CiInfo(ctypes.Structure):
    _fields_ = [("device", ctypes.c_void_p), ("gpuInstance", ctypes.c_void_p), ("id", ctypes.c_uint),
                ("profileId", ctypes.c_uint), ("placement", Placement)]
class CiProfile(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint) for n in ("id", "sliceCount", "instanceCount", "multiprocessorCount",
               "sharedCopyEngineCount", "sharedDecoderCount", "sharedEncoderCount", "sharedJpegCount",
               "sharedOfaCount")]
nvml = ctypes.CDLL(sys.argv[1])
assert nvml.nvmlInit_v2() == 0
out = []
dev = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
n = ctypes.c_uint()
assert nvml.nvmlDeviceGetMaxMigDeviceCount(dev, ctypes.byref(n)) == 0
for k in range(n.value):
    mig = ctypes.c_void_p()
    if nvml.nvmlDeviceGetMigDeviceHandleByIndex(dev, k, ctypes.byref(mig)) != 0:
        continue
    gi_id, ci_id, parent = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_void_p()
    assert nvml.nvmlDeviceGetGpuInstanceId(mig, ctypes.byref(gi_id)) == 0
    assert nvml.nvmlDeviceGetComputeInstanceId(mig, ctypes.byref(ci_id)) == 0
    assert nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, ctypes.byref(parent)) == 0
    assert parent.value == dev.value
    gi = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetGpuInstanceById(parent, gi_id, ctypes.byref(gi)) == 0
    gii = GiInfo()
    assert nvml.nvmlGpuInstanceGetInfo(gi, ctypes.byref(gii)) == 0
    ci = ctypes.c_void_p()
    assert nvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id, ctypes.byref(ci)) == 0
    cii = CiInfo()
    assert nvml.nvmlComputeInstanceGetInfo_v2(ci, ctypes.byref(cii)) == 0
    cip = CiProfile()
    assert nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, cii.profileId, 0, ctypes.byref(cip)) == 0
    out.append({"gi": gii.id, "gi_profile_id": gii.profileId, "start": gii.placement.start,
                "size": gii.placement.size, "ci": cii.id, "ci_slices": cip.sliceCount,
                "ci_sms": cip.multiprocessorCount})
print(json.dumps(out))
"""


def test_instances_as_go_nvlib_reads_them(sim_env):
    """NVIDIA's plugin names a MIG device's profile through go-nvlib: the
    GPU instance by ID, its info (profile ID, placement), the compute
    instance and its profile. The simulator answers that walk."""
    from conftest import SIM_LIB
    env = ctypes_env(dict(sim_env, GPULET_SIM_SCENARIO="h200-mig-mixed", GPULET_SIM_CONTROL="off"))
    p = subprocess.run(["/usr/bin/python3", "-c", GO_NVLIB, SIM_LIB], capture_output=True,
                       text=True, env=env)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    # 3g.71gb (ID 9) at 4, 2g.35gb (ID 14) at 0, two 1g.18gb (ID 19) at 2 and 3.
    assert [(d["gi"], d["gi_profile_id"], d["start"], d["size"]) for d in got] == [
        (1, 9, 4, 4), (2, 14, 0, 2), (3, 19, 2, 1), (4, 19, 3, 1)]
    assert [(d["ci"], d["ci_slices"], d["ci_sms"]) for d in got] == [
        (0, 3, 60), (0, 2, 32), (0, 1, 16), (0, 1, 16)]


def test_a_gpu_instance_fault_reaches_every_reader(agent, gpulet, sim_env, tmp_path):
    """An XID in one GPU instance is seen by every reader of the agent's
    record, not only the device plugin: gpulet health (GPU:MIG), list,
    the status socket's health lines, metrics (gpulet_gpu_health with
    GPU_I_ID), the labels (gpulet.io/mig.healthy), and the Node condition
    and Event of the fault report; the GPU itself stays healthy."""
    import re
    import time
    import urllib.request
    from fakeapi import FakeAPI
    from test_metrics import free_port
    api = FakeAPI("n1")
    port = free_port()
    try:
        a = agent("--simulate", "h200-mig-mixed", "--mig-strategy", "mixed", "--kubelet-root",
                  str(tmp_path / "k"), "--status-socket", str(tmp_path / "s.sock"), "--metrics-listen",
                  f"127.0.0.1:{port}", "--metrics-interval-ms", "200", "--labels", "api",
                  "--kubeconfig", str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1")
        a.wait_log("agent running")
        gpus = mig_devices(sim_env, "h200-mig-mixed")
        two_g = gpus[0]["mig_devices"][1]                 # 2g.35gb, GPU instance 2 on GPU 0
        sim(sim_env, "xid", "0", "94", "2")
        a.wait_log("XID 94 in GPU instance 2")
        health = json.loads(gpulet("health", "-o", "json", "--status-socket", str(tmp_path / "s.sock")).stdout)
        row = next(h for h in health if h["gpu"] == "0:1")
        assert (row["uuid"], row["health"], row["xid"]) == (two_g["uuid"], "Unhealthy", 94), health
        assert "XID 94" in row["detail"] and row["since"].endswith("Z"), row
        assert health[0]["gpu"] == "0" and health[0]["health"] == "Healthy", health
        listed = gpulet("list", "--status-socket", str(tmp_path / "s.sock")).stdout.splitlines()
        row = next(l for l in listed if l.startswith("0:1 "))
        assert "Unhealthy (XID 94" in row and listed[1].split()[-1] == "Healthy", listed
        deadline = time.monotonic() + 10
        while True:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            row = [l for l in text.splitlines() if l.startswith("gpulet_gpu_health{") and
                   'gpu="0"' in l and 'GPU_I_ID="2"' in l]
            if row and row[0].endswith(" 0"):
                break
            assert time.monotonic() < deadline, row
            time.sleep(0.2)
        assert 'reason="xid"' in row[0] and 'GPU_I_PROFILE="2g.35gb"' in row[0], row
        assert re.search(r'gpulet_gpu_health\{gpu="0",[^}]*reason=""\} 1', text)  # the GPU whole
        api.wait_for(lambda: (api.node["metadata"]["labels"].get("gpulet.io/mig.healthy") == "14"),
                     "gpulet.io/mig.healthy 14 of 15", timeout=10)
        api.wait_for(lambda: any(c["type"] == "GPUUnhealthy" and c["status"] == "True"
                                 for c in api.node.get("status", {}).get("conditions", [])),
                     "the condition", timeout=10)
        cond = api.condition()
        assert cond["reason"] == "XID94", cond
        assert f"GPU 0 MIG device 0:1 2g.35gb ({two_g['uuid']}): XID 94" in cond["message"], cond
        api.wait_for(lambda: any(two_g["uuid"] in e.get("message", "") for e in api.node_events.values()),
                     "an Event naming the MIG device", timeout=10)
        assert a.stop() == 0
    finally:
        api.stop()
