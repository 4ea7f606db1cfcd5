"""Issue 5: gpulet on a machine with several GPUs (see docs/real-gpu.md).

1. `gpulet list -o json` against nvidia-smi -q (index, UUID, minor, bus id, NUMA)
   and the pairwise interconnect against `nvidia-smi topo -m`.
2. GetPreferredAllocation through the grpcio kubelet for sizes 2, 4 (and 8
   where there are 8 GPUs), with and without must_include, each compared
   with the best set found by an independent search over the topo -m matrix.
3. Isolation: Allocate one GPU with device specs, then run nvidia-smi -L and
   torch in a new mount namespace whose /dev holds only the returned nodes.
4. The NVLink details NVML reports per link, to compare with the simulator.
usage: multigpu.py GPULET OUTDIR"""
import ctypes
import csv
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from kubelet import FakeKubelet, load_stubs  # noqa: E402

GPULET, OUT = sys.argv[1], Path(sys.argv[2])
ok = True


def check(what, cond, detail=""):
    global ok
    ok &= bool(cond)
    print(f"{'PASS' if cond else 'FAIL'}  {what}  {detail}", flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, **kw).stdout


# --- 1. inventory and topology -------------------------------------------------
doc = json.loads(sh(f"{GPULET} list -o json"))
(OUT / "list.json").write_text(json.dumps(doc, indent=1))
print(sh(f"{GPULET} list"), sh(f"{GPULET} list -o topology"))
smi_q = sh("nvidia-smi -q")
(OUT / "smi-q.txt").write_text(smi_q)
rows = list(csv.reader(sh("nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader").splitlines()))
minors = re.findall(r"Minor Number\s*:\s*(\S+)", smi_q)
topo = re.sub(r"\x1b\[[0-9;]*m", "", sh("nvidia-smi topo -m"))
(OUT / "topo.txt").write_text(topo)
print(topo)
lines = [l for l in topo.splitlines() if l.strip()]
header = [h.strip() for h in lines[0].split("\t") if h.strip()]
n = doc["count"]
matrix, numa = {}, {}
for line in lines[1:]:
    cells = [c.strip() for c in line.split("\t")]
    if not re.match(r"^GPU\d+$", cells[0]):
        continue
    i = int(cells[0][3:])
    for j in range(n):
        matrix[i, j] = cells[1 + j]
    col = header.index("NUMA Affinity") + 1
    numa[i] = None if cells[col] in ("N/A", "") else int(cells[col])
check("GPU count", n == len(rows) and n > 1, f"gpulet {n}, nvidia-smi {len(rows)}")
for g in doc["gpus"]:
    i = g["index"]
    check(f"GPU {i} uuid/minor/bus", g["uuid"] == rows[i][1].strip() and str(g["minor"]) == minors[i]
          and g["pci_bus_id"] == rows[i][2].strip(), f"{g['uuid']} minor {g['minor']} {g['pci_bus_id']}")
    check(f"GPU {i} NUMA", g["numa_node"] == numa[i], f"gpulet {g['numa_node']}, topo {numa[i]}")
    for l in g["links"]:
        j, cell = l["peer"], matrix[i, l["peer"]]
        ours = f"NV{l['nvlinks']}" if l["nvlinks"] else l["pcie"]
        check(f"link {i}-{j}", ours == cell, f"gpulet {ours}, topo -m {cell}")

# --- 4. NVLink details per link (for the simulator's model) ---------------------
nv = ctypes.CDLL("libnvidia-ml.so.1")
nv.nvmlInit_v2()
with open(OUT / "nvlinks.txt", "w") as f:
    for i in range(n):
        h = ctypes.c_void_p()
        nv.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
        for link in range(18):
            st, typ = ctypes.c_uint(), ctypes.c_uint(0xFF)
            rc = nv.nvmlDeviceGetNvLinkState(h, link, ctypes.byref(st))
            pci = ctypes.create_string_buffer(68)
            rc2 = nv.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, link, pci)
            rc3 = nv.nvmlDeviceGetNvLinkRemoteDeviceType(h, link, ctypes.byref(typ))
            bus = pci.raw[36:68].split(b"\0")[0].decode(errors="replace")
            f.write(f"gpu {i} link {link}: state rc={rc} active={st.value} remote rc={rc2} bus={bus} "
                    f"type rc={rc3} type={typ.value}\n")
nv.nvmlShutdown()
print((OUT / "nvlinks.txt").read_text().splitlines()[:20])

# --- 2. preferred allocation ------------------------------------------------------
LEVEL = {"X": 60, "PIX": 50, "PXB": 40, "PHB": 30, "NODE": 20, "SYS": 10}


def pair(i, j):
    """Scored from nvidia-smi alone: topo -m hides the PCIe level of an NVLink
    pair, so its NUMA affinity column stands in for it there."""
    c = matrix[i, j]
    m = re.match(r"NV(\d+)", c)
    if m:
        return 100 * int(m.group(1)) + (20 if numa[i] == numa[j] else 10)
    return LEVEL.get(c, 0)


def best(size, must):
    top, choice = -1, None
    for combo in itertools.combinations(range(n), size):
        if not set(must) <= set(combo):
            continue
        s = sum(pair(a, b) for a, b in itertools.combinations(combo, 2))
        if s > top:
            top, choice = s, list(combo)
    return choice, top


with tempfile.TemporaryDirectory() as tmp:
    pb, pbg = load_stubs(Path(tmp) / "stubs")
    k = FakeKubelet(Path(tmp) / "kubelet", pb, pbg)
    k.start()
    t0 = time.monotonic()
    agent = subprocess.Popen([GPULET, "agent", "--kubelet-root", str(k.root), "--device-id-strategy",
                              "index", "--pass-device-specs", "true", "--status-socket",
                              f"{tmp}/status.sock"], stderr=open(OUT / "agent.log", "w"))
    t_reg, _ = k.wait_registrations(1, timeout=60)
    print(f"start -> registered with {n} GPUs: {(t_reg - t0) * 1000:.1f} ms")
    channel, stub = k.plugin()
    ids = [str(i) for i in range(n)]
    for size in (2, 4, 8):
        if size > n:
            print(f"size {size}: not possible with {n} GPUs")
            continue
        for must in ([], [n - 1], [0, n - 1] if size >= 2 else []):
            r = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
                pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=size,
                                                       must_include_deviceIDs=[str(m) for m in must])]))
            got = sorted(int(x) for x in r.container_responses[0].deviceIDs)
            want, score = best(size, must)
            got_score = sum(pair(a, b) for a, b in itertools.combinations(got, 2))
            check(f"preferred size {size} must {must}", got_score == score,
                  f"gpulet {got} (score {got_score}), best by topo -m {want} (score {score})")

    # --- 3. isolation ---------------------------------------------------------------
    target = n - 1
    r = stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=[str(target)])])).container_responses[0]
    specs = [(s.container_path, s.host_path) for s in r.devices]
    print("Allocate:", dict(r.envs), specs)
    uuid = doc["gpus"][target]["uuid"]
    bus = doc["gpus"][target]["pci_bus_id"]
    procdir = f"{bus[4:8]}{bus[8:]}".lower()          # 00000000:00:09.0 -> 0000:00:09.0
    # /dev as a container gets it: the OCI default devices plus the allocated nodes.
    standard = [(f"/dev/{d}", f"/dev/{d}") for d in ("null", "zero", "full", "random", "urandom", "tty")]
    mknods = "; ".join(
        f"mknod {c} c {os.major(os.stat(h).st_rdev)} {os.minor(os.stat(h).st_rdev)}; chmod 666 {c}"
        for c, h in specs + standard)
    modprobe = sh("command -v nvidia-modprobe").strip()
    hide_modprobe = f"mount --bind /dev/null {modprobe}" if modprobe else "true"
    mask_proc = (f"mkdir -p /tmp/keep-gpu && mount --bind /proc/driver/nvidia/gpus/{procdir} /tmp/keep-gpu && "
                 f"mount -t tmpfs tmpfs /proc/driver/nvidia/gpus && "
                 f"mkdir /proc/driver/nvidia/gpus/{procdir} && "
                 f"mount --bind /tmp/keep-gpu /proc/driver/nvidia/gpus/{procdir}")
    probe = ("echo '--- nvidia-smi -L'; $NOMKNOD nvidia-smi -L; echo '--- torch'; "
             "$NOMKNOD python3 -c 'import torch; n=torch.cuda.device_count(); "
             "print(n, [str(torch.cuda.get_device_properties(i).uuid) for i in range(n)])'; "
             "echo '--- /dev after'; ls /dev | tr '\\n' ' '")
    variants = {
        "A: only the allocated /dev nodes": f"mount -t tmpfs tmpfs /dev && {mknods}",
        "B: A, and no nvidia-modprobe": f"mount -t tmpfs tmpfs /dev && {mknods} && {hide_modprobe}",
        "C: B, and /proc/driver/nvidia/gpus holds only the allocated GPU (as the toolkit does)":
            f"mount -t tmpfs tmpfs /dev && {mknods} && {hide_modprobe} && {mask_proc}",
        # A pod's device cgroup (built from the DeviceSpecs) forbids creating or
        # opening other GPUs' nodes; without CAP_MKNOD, nothing can create them here.
        "D: C, without CAP_MKNOD (as a pod's device cgroup forbids other nodes)":
            f"mount -t tmpfs tmpfs /dev && {mknods} && {hide_modprobe} && {mask_proc} && "
            "export NOMKNOD='setpriv --bounding-set -mknod --inh-caps -mknod --'",
    }
    env = dict(os.environ, NVIDIA_VISIBLE_DEVICES=r.envs["NVIDIA_VISIBLE_DEVICES"])
    log = []
    seen = {}
    for name, setup in variants.items():
        iso = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                              f"NOMKNOD=; {setup} && ls /dev | tr '\\n' ' ' && echo && {probe}"],
                             capture_output=True, text=True, env=env, timeout=180)
        smi = re.findall(r"UUID: (GPU-[0-9a-f-]+)", iso.stdout.split("--- torch")[0])
        m = re.search(r"--- torch\n(\d+) (.*)", iso.stdout)
        after = iso.stdout.split("--- /dev after")[-1].strip()
        seen[name] = (smi, m.group(1) if m else "error", m.group(2) if m else iso.stderr[-300:])
        log.append(f"=== {name}\n{iso.stdout}\n{iso.stderr[-2000:]}")
        print(f"{name}: nvidia-smi -L {len(smi)} GPU(s) {smi}; torch {seen[name][1]} "
              f"{seen[name][2][:200]}; /dev afterwards: {after}")
    (OUT / "isolation.txt").write_text("\n".join(log))
    smi, count, uuids = seen[list(variants)[-1]]
    check("container-like namespace: nvidia-smi -L lists only the allocated GPU", smi == [uuid],
          f"listed {smi}, allocated {uuid}")
    check("container-like namespace: torch sees exactly the allocated GPU",
          count == "1" and uuid[4:] in uuids, f"{count} {uuids}")
    agent.terminate()
    agent.wait(timeout=10)
    k.stop()
print("ALL PASS" if ok else "SOME CHECKS FAILED")
