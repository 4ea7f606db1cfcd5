"""gpulet's MIG manager beside NVIDIA's nvidia-mig-parted, both on the
NVML simulator: for each MIG-capable product and each layout of a
mig-parted config file, the layout each leaves on the GPUs (MIG mode, and
each GPU instance's profile and placement) and whether each said it
succeeded, compared (docs/mig.md, "Beside nvidia-mig-parted").

Nothing of NVIDIA's is in this repository: build nvidia-mig-parted from
NVIDIA's source and name it (docs/mig.md says how the figures there were
made). It runs as on a node: NVML from libnvidia-ml.so.1 (the simulator's
here), the GPUs from /sys/bus/pci/devices and the `nvidia` line of
/proc/modules, both made for it in a private mount namespace (so: root).
Its NVML sessions are short and many; the MIG state goes from one to the
next through the simulator's state file (GPULET_SIM_STATE). gpulet runs
as the agent, its Node's label nvidia.com/mig.config set on a stand-in
API server, and leaves its state in a file of the same form at its stop.

usage: bench/migparted_reference.py --mig-parted PATH --config FILE
           [--gpulet build/gpulet] [--sim build/libgpulet-nvml-sim.so] [--gpus 2]
           [--products a100-40gb,a100-80gb,h100-sxm,h200,gh200] [--names all-1g.18gb,...]
           [--record FILE]"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "integration"))
from fakeapi import FakeAPI  # noqa: E402

# Before Hopper a MIG mode change waits for a GPU reset: those start with
# MIG on, so that the layouts are compared, not the reset neither makes.
RESET_FOR_MODE = {"a100-40gb", "a100-80gb"}


def scenario(tmp, product, gpus):
    path = tmp / f"{product}.yaml"
    mig = "true" if product in RESET_FOR_MODE else "false"
    path.write_text(f"name: ref-{product}\ndriver_version: \"580.159.04\"\ncuda_version: \"13.0\"\ngpus:\n" +
                    "".join(f"  - {{product: {product}, mig: {mig}}}\n" for _ in range(gpus)))
    return path


def fake_sysfs(tmp, o, scen):
    """/sys/bus/pci/devices as nvpci reads it, for the scenario's GPUs."""
    listed = json.loads(subprocess.run([o.gpulet, "list", "--simulate", str(scen), "-o", "json"],
                                       capture_output=True, text=True, check=True,
                                       env=dict(os.environ, GPULET_SIM_LIB=o.sim)).stdout)["gpus"]
    root = tmp / f"sys-{scen.stem}"
    root.mkdir()
    product = next(p for p in PRODUCTS if p[0] == scen.stem)
    for g in listed:
        dom, rest = g["pci_bus_id"].split(":", 1)
        d = root / f"{int(dom, 16):04x}:{rest.lower()}"
        d.mkdir()
        for name, text in (("vendor", "0x10de"), ("device", product[1]), ("class", "0x030200"),
                           ("numa_node", "0"), ("resource", "0x0 0x0 0x0")):
            (d / name).write_text(text + "\n")
    return root


# product, its PCI device ID as sysfs says it
PRODUCTS = [("a100-40gb", "0x20b0"), ("a100-80gb", "0x20b2"), ("h100-sxm", "0x2330"),
            ("h200", "0x2335"), ("gh200", "0x2342")]


def layout(state):
    """{GPU: (mode, [(profile, start)...])} from a state file, or None."""
    if not state.exists():
        return None
    out = {}
    for line in state.read_text().splitlines():
        w = line.split()
        if w and w[0] == "gpu":
            out[int(w[1])] = (w[3], [])
        elif w and w[0] == "instance":
            out[int(w[1])][1].append((w[2], int(w[3])))
    return {k: (mode, sorted(insts)) for k, (mode, insts) in out.items()}


# mig-parted's node, in a private mount namespace: /sys/bus/pci/devices
# from fake_sysfs, and a /proc whose entries are a fresh procfs's but for
# `modules`, which names the nvidia module (a container may have no
# /proc/modules at all, and a file cannot be made in a procfs).
NODE = """set -e
mount -t proc proc "$1/realproc"
fake=$(mktemp -d)
for n in $(ls "$1/realproc"); do ln -s "$1/realproc/$n" "$fake/$n"; done
echo "nvidia 1 0 - Live 0x0" >"$fake/modules"
mount --bind "$2" /sys/bus/pci/devices
mount --bind "$fake" /proc
shift 2
exec "$@"
"""


def run_mig_parted(o, tmp, scen, sysfs, name, state):
    (tmp / "realproc").mkdir(exist_ok=True)
    libdir = tmp / "lib"
    libdir.mkdir(exist_ok=True)
    if not (libdir / "libnvidia-ml.so.1").exists():
        (libdir / "libnvidia-ml.so.1").symlink_to(pathlib.Path(o.sim).resolve())
    env = dict(os.environ, GPULET_SIM_SCENARIO=str(scen), GPULET_SIM_STATE=str(state),
               GPULET_SIM_CONTROL="off", LD_LIBRARY_PATH=str(libdir))
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", NODE, "sh", str(tmp),
                        str(sysfs), o.mig_parted, "apply", "-f", o.config, "-c", name],
                       capture_output=True, text=True, env=env, timeout=120)
    return p.returncode == 0, (p.stderr.strip().splitlines() or [""])[-1]


def run_gpulet(o, tmp, scen, name, state):
    api = FakeAPI("n1")
    api.set_label("nvidia.com/mig.config", name)
    run = tmp / "gpulet-run"
    run.mkdir(exist_ok=True)
    env = dict(os.environ, GPULET_SIM_LIB=o.sim, GPULET_SIM_STATE=str(state), GPULET_SIM_CONTROL="off")
    log = open(run / "agent.log", "w")
    p = subprocess.Popen([o.gpulet, "agent", "--simulate", str(scen), "--mig-strategy", "mixed",
                          "--mig-parted-config", o.config, "--kubelet-root", str(run / "kubelet"),
                          "--kubeconfig", str(api.kubeconfig(run / "kc")), "--node-name", "n1",
                          "--no-metrics", "--labels", "api", "--status-socket", str(run / "s.sock")],
                         stdout=log, stderr=subprocess.STDOUT, env=env)
    said = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and p.poll() is None:
            said = api.node["metadata"]["labels"].get("nvidia.com/mig.config.state")
            if said in ("success", "failed"):
                break
            time.sleep(0.05)
    finally:
        p.terminate()
        p.wait(timeout=20)
        log.close()
        api.stop()
    why = ""
    if said != "success":
        lines = [l for l in (run / "agent.log").read_text().splitlines() if "MIG config" in l]
        why = lines[-1] if lines else f"state {said}"
    return said == "success", why


def compare(ref_ok, ref_l, my_ok, my_why, my_l):
    """Which kind of outcome a layout had on both.
    - same layout: both succeeded, every GPU in the same mode with the same
      instances in the same places;
    - both refused: both failed (a mode change that needs a reset, ...);
    - a profile the GPU lacks: mig-parted's profile parser drops a profile
      no GPU of the node has, so it clears the GPU and says success, where
      gpulet fails the layout naming the profile and touches nothing;
    - other: anything else (listed)."""
    if ref_ok and my_ok and ref_l == my_l:
        return "same layout"
    if not ref_ok and not my_ok:
        return "both refused"
    if ref_ok and not my_ok and "has no MIG profile" in my_why and all(not i for _, i in ref_l.values()):
        return "a profile the GPU lacks"
    return "other"


def record(o, names):
    """Each product's scenario, then each layout applied in turn by
    mig-parted: whether it said it succeeded, and what it left."""
    out = {"mig-parted": o.mig_parted_version, "config": o.config, "gpus": o.gpus, "products": {}}
    with tempfile.TemporaryDirectory(prefix="gpulet-migref-") as tmp:
        tmp = pathlib.Path(tmp)
        for product in o.products.split(","):
            scen = scenario(tmp, product, o.gpus)
            sysfs = fake_sysfs(tmp, o, scen)
            state = tmp / f"{product}.state"
            steps = []
            for name in names:
                ok, _ = run_mig_parted(o, tmp, scen, sysfs, name, state)
                left = layout(state) or {}
                steps.append({"layout": name, "ok": ok,
                              "gpus": {str(k): [mode, [list(i) for i in insts]] for k, (mode, insts) in left.items()}})
            out["products"][product] = {"scenario": scen.read_text(), "steps": steps}
            print(f"{product}: {sum(s['ok'] for s in steps)} of {len(steps)} layouts applied in turn")
    pathlib.Path(o.record).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mig-parted", required=True, help="NVIDIA's nvidia-mig-parted, built from its source")
    ap.add_argument("--config", required=True, help="a mig-parted config file (the GPU Operator's default)")
    ap.add_argument("--gpulet", default="build/gpulet")
    ap.add_argument("--sim", default="build/libgpulet-nvml-sim.so")
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--products", default=",".join(p for p, _ in PRODUCTS))
    ap.add_argument("--names", default="", help="only these layouts, in this order (comma list; default all)")
    ap.add_argument("--mig-parted-version", default="nvidia-mig-parted v0.12.1",
                    help="what --record says made it (a build from source says version unknown)")
    ap.add_argument("--record", help="mig-parted alone, the layouts in turn (each from the one before), "
                    "what it left written to this JSON file (tests/integration/test_migmgr.py replays it)")
    o = ap.parse_args()
    o.sim = str(pathlib.Path(o.sim).resolve())
    names = list(yaml.safe_load(pathlib.Path(o.config).read_text())["mig-configs"])
    if o.names:  # in the order given, a name again where it comes again
        unknown = [n for n in o.names.split(",") if n not in names]
        if unknown:
            ap.error(f"--names: not in {o.config}: {', '.join(unknown)}")
        names = o.names.split(",")
    if o.record:
        return record(o, names)
    kinds = ["same layout", "both refused", "a profile the GPU lacks", "other"]
    totals = dict.fromkeys(kinds, 0)
    with tempfile.TemporaryDirectory(prefix="gpulet-migref-") as tmp:
        tmp = pathlib.Path(tmp)
        for product in o.products.split(","):
            scen = scenario(tmp, product, o.gpus)
            sysfs = fake_sysfs(tmp, o, scen)
            counts, other = dict.fromkeys(kinds, 0), []
            for name in names:
                ref, mine = tmp / "ref.state", tmp / "mine.state"
                ref.unlink(missing_ok=True)
                mine.unlink(missing_ok=True)
                ref_ok, ref_why = run_mig_parted(o, tmp, scen, sysfs, name, ref)
                my_ok, my_why = run_gpulet(o, tmp, scen, name, mine)
                kind = compare(ref_ok, layout(ref), my_ok, my_why, layout(mine))
                counts[kind] += 1
                if kind == "other":
                    other.append((name, ref_ok, ref_why, layout(ref), my_ok, my_why, layout(mine)))
            for k in kinds:
                totals[k] += counts[k]
            print(f"{product} ({o.gpus} GPUs): {len(names)} layouts: " +
                  ", ".join(f"{counts[k]} {k}" for k in kinds))
            for name, ref_ok, ref_why, ref_l, my_ok, my_why, my_l in other:
                print(f"  {name}: mig-parted {'ok' if ref_ok else 'failed: ' + ref_why} {ref_l}")
                print(f"  {' ' * len(name)}  gpulet     {'ok' if my_ok else 'failed: ' + my_why} {my_l}")
    print("in all: " + ", ".join(f"{totals[k]} {k}" for k in kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
