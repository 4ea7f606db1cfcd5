"""The GPU Operator's MIG manager, built in (--mig-parted-config): the
Node's label nvidia.com/mig.config names a layout of a mig-parted file;
the GPUs are made so on the simulator as mig-parted makes them, and
nvidia.com/mig.config.state says pending, success or failed. A GPU that
runs a process waits; the plugins advertise the new devices with no
restart of gpulet; layouts in turn come out as NVIDIA's nvidia-mig-parted
left them (data/migparted-reference.json)."""
import json
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import GPULET, SOURCE
from fakeapi import FakeAPI

# What NVIDIA's nvidia-mig-parted left on the simulator, step by step, for
# deploy/mig-manager/mig-parted.yaml's layouts applied in turn
# (bench/migparted_reference.py --record).
REFERENCE = json.loads((Path(__file__).parent / "data" / "migparted-reference.json").read_text())

LAYOUTS = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.18gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.18gb": 7
  all-balanced:
    - device-filter: ["0x233510DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.18gb": 2
        "2g.35gb": 1
        "3g.71gb": 1
    - devices: [3]
      mig-enabled: false
  too-many:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.71gb": 3
  unknown-profile:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.99gb": 1
"""


@pytest.fixture
def api():
    a = FakeAPI("n1")
    yield a
    a.stop()


def start(plugin_agent, api, tmp_path, kubelet=None, *more, env=None):
    """h200-mig-mixed: GPUs 0-2 with MIG on, GPU 3 whole; mixed: four resources."""
    cfg = tmp_path / "mig-parted.yaml"
    cfg.write_text(LAYOUTS)
    a = plugin_agent("--simulate", "h200-mig-mixed", "--mig-strategy", "mixed", "--mig-parted-config",
                     str(cfg), "--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig")),
                     "--node-name", "n1", *more, env=env)
    if kubelet:
        kubelet.wait_registrations(4, timeout=20)
    return a


def state(api, want, timeout=20):
    """Waits for the state `want`, or for an end (success, failed) that is
    not it: a change that should wait and did not fails at once."""
    def now():
        return api.node["metadata"]["labels"].get("nvidia.com/mig.config.state")
    api.wait_for(lambda: now() in (want, "success", "failed"), f"nvidia.com/mig.config.state={want}",
                 timeout=timeout)
    assert now() == want


def event(api, reason, text):
    """Waits for an Event on the Node of that reason whose message has text."""
    def found():
        return [e for e in api.node_events.values()
                if e["reason"] == reason and text in e["message"] and e["involvedObject"]["name"] == "n1"]
    api.wait_for(found, f"an Event {reason} saying {text!r}", timeout=20)
    return found()[0]


def said(gpulet, tmp_path):
    """What `gpulet health` and doctor's mig-config check say of the layout."""
    sock = str(tmp_path / "status.sock")
    health = gpulet("health", "--status-socket", sock)
    assert health.returncode == 0, health.stderr
    doctor = gpulet("doctor", "--status-socket", sock, "-o", "json")
    check = next(c for c in json.loads(doctor.stdout)["checks"] if c["id"] == "mig-config")
    return health.stdout, check["status"], check["message"]


def advertised(kubelet, since, names):
    """{resource: [device IDs]} of names, each from its last registration
    after the first `since` (waited for)."""
    kubelet.wait_for(lambda: set(names) <= {r.resource_name for _, r in kubelet.registrations[since:]},
                     f"registrations of {names}", timeout=20)
    last = {r.resource_name: r for _, r in kubelet.registrations[since:]}
    out = {}
    for name in names:
        channel, stub = kubelet.plugin(last[name].endpoint)
        out[name] = [d.ID for d in next(stub.ListAndWatch(kubelet.pb.Empty(), timeout=5)).devices]
        channel.close()
    return out


def layout(tmp_path, sim_env):
    """Each GPU's MIG mode and its MIG devices' profiles, as the running agent has them."""
    out = subprocess.run([GPULET, "list", "--status-socket", str(tmp_path / "status.sock"), "-o", "json"],
                         capture_output=True, text=True, env=sim_env, check=True).stdout
    return [(g.get("mig_mode"), sorted(m["profile"] for m in g.get("mig_devices", [])))
            for g in json.loads(out)["gpus"]]


def test_label_applies_a_layout(plugin_agent, kubelet, api, tmp_path, sim_env):
    """all-1g.18gb on four H200s: seven 1g.18gb on each, advertised under
    nvidia.com/mig-1g.18gb; labelled again, nothing is touched; the label's
    removal leaves the layout and the state label goes."""
    a = start(plugin_agent, api, tmp_path, kubelet)
    a.wait_log("MIG config: 5 layout(s) from")
    assert "nvidia.com/mig.config.state" not in api.labels()  # no label: nothing applied
    n = len(kubelet.registrations)
    api.set_label("nvidia.com/mig.config", "all-1g.18gb")
    state(api, "success")
    assert all(profiles == ["1g.18gb"] * 7 for _, profiles in layout(tmp_path, sim_env)), \
        layout(tmp_path, sim_env)
    got = advertised(kubelet, n, ["nvidia.com/mig-1g.18gb"])
    assert len(got["nvidia.com/mig-1g.18gb"]) == 28, got
    assert not (kubelet.dir / "gpulet-nvidia-mig-3g.71gb.sock").exists()  # its resource is gone
    # Everything else follows, with no restart: the labels and the CDI spec.
    sock = str(tmp_path / "status.sock")
    labels = subprocess.run([GPULET, "labels", "--status-socket", sock], capture_output=True, text=True,
                            env=sim_env, check=True).stdout
    assert "nvidia.com/mig-1g.18gb.count=28" in labels and "nvidia.com/mig-3g.71gb.count" not in labels, labels
    cdi = json.loads(subprocess.run([GPULET, "cdi", "generate", "--format", "json", "--status-socket", sock],
                                    capture_output=True, text=True, env=sim_env, check=True).stdout)
    migs = {d["name"] for d in cdi["devices"] if d["name"].startswith("MIG-")}
    assert len(migs) == 28, sorted(d["name"] for d in cdi["devices"])
    # The same label again (a Node update): idempotent, nothing made or destroyed.
    a.wait_log("MIG config 'all-1g.18gb': success")
    before = a.log().count("MIG devices changed") + a.log().count("as MIG config")
    api.set_label("example.com/other", "x")
    api.set_label("nvidia.com/mig.config", "all-1g.18gb")
    state(api, "success")
    assert a.log().count("MIG devices changed") + a.log().count("as MIG config") == before
    api.set_label("nvidia.com/mig.config", None)
    api.wait_for(lambda: "nvidia.com/mig.config.state" not in api.node["metadata"]["labels"],
                 "the state label gone with the config label")
    assert all(profiles == ["1g.18gb"] * 7 for _, profiles in layout(tmp_path, sim_env))


def test_filters_indexes_and_mode(plugin_agent, kubelet, api, tmp_path, sim_env):
    """all-balanced: the H200s (0x233510DE) get 1g.18gb x2, 2g.35gb, 3g.71gb;
    GPU 3's later entry turns MIG off there (Hopper: at once, no reset)."""
    start(plugin_agent, api, tmp_path, kubelet)
    n = len(kubelet.registrations)
    api.set_label("nvidia.com/mig.config", "all-balanced")
    state(api, "success")
    got = layout(tmp_path, sim_env)
    balanced = sorted(["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"])
    assert [p for _, p in got[:3]] == [balanced] * 3, got
    assert got[3][1] == [], got
    got = advertised(kubelet, n, ["nvidia.com/gpu", "nvidia.com/mig-1g.18gb", "nvidia.com/mig-2g.35gb",
                                  "nvidia.com/mig-3g.71gb"])
    assert len(got["nvidia.com/mig-1g.18gb"]) == 6 and len(got["nvidia.com/mig-3g.71gb"]) == 3, got


def test_a_gpu_in_use_waits(plugin_agent, api, tmp_path, sim_env, gpulet):
    """A process on GPU 1: the others change, GPU 1 waits (pending, naming
    it) and changes once the process is gone."""
    start(plugin_agent, api, tmp_path)
    assert gpulet("sim", "proc", "1", "add", "4242", "1024").returncode == 0
    api.set_label("nvidia.com/mig.config", "all-1g.18gb")
    state(api, "pending")
    a = None
    got = layout(tmp_path, sim_env)
    assert got[0][1] == ["1g.18gb"] * 7 and got[1][1] != ["1g.18gb"] * 7, got
    # Said where an operator looks: an Event, gpulet health, doctor.
    event(api, "MIGConfigWaiting", "MIG config 'all-1g.18gb' waits: GPU 1")
    health, status, message = said(gpulet, tmp_path)
    assert "MIG config 'all-1g.18gb' (the Node's nvidia.com/mig.config): pending: GPU 1" in health, health
    assert status == "WARN" and "pending: GPU 1" in message, message
    assert gpulet("sim", "proc", "1", "clear").returncode == 0
    state(api, "success", timeout=30)
    assert layout(tmp_path, sim_env)[1][1] == ["1g.18gb"] * 7
    event(api, "MIGConfigApplied", "MIG config 'all-1g.18gb' applied")
    health, status, message = said(gpulet, tmp_path)
    assert "MIG config" not in health and status == "PASS", (health, message)


def test_a_gpu_in_use_fails_at_once_by_option(plugin_agent, api, tmp_path, sim_env, gpulet):
    """--mig-config-in-use fail: a process on GPU 1 fails the layout at
    once, naming it; the GPUs not in use changed all the same."""
    start(plugin_agent, api, tmp_path, None, "--mig-config-in-use", "fail")
    assert gpulet("sim", "proc", "1", "add", "4242", "1024").returncode == 0
    api.set_label("nvidia.com/mig.config", "all-1g.18gb")
    state(api, "failed")
    got = layout(tmp_path, sim_env)
    assert got[0][1] == ["1g.18gb"] * 7 and got[1][1] != ["1g.18gb"] * 7, got
    ev = event(api, "MIGConfigFailed", "MIG config 'all-1g.18gb' failed: GPU 1")
    assert ev["type"] == "Warning"
    health, status, message = said(gpulet, tmp_path)
    assert "failed: GPU 1" in health and status == "FAIL" and "failed: GPU 1" in message, (health, message)


def test_a_gpu_a_pod_holds_waits(plugin_agent, kubelet, api, tmp_path, sim_env):
    """A pod holds one of GPU 0's MIG devices (the kubelet's PodResources
    List says so; it runs no process): GPU 0 keeps its layout (pending,
    naming the pod) while the others change, and changes once the pod is
    gone."""
    from kubelet import FakePodResources, load_podresources_stubs
    pb, pb_grpc = load_podresources_stubs(tmp_path / "prstubs")
    pods = FakePodResources(kubelet.root, pb, pb_grpc)
    pods.start()
    try:
        gpus = json.loads(subprocess.run([GPULET, "list", "--simulate", "h200-mig-mixed", "-o", "json"],
                                         capture_output=True, text=True, env=sim_env, check=True).stdout)["gpus"]
        held = gpus[0]["mig_devices"][0]
        pods.pods = [("trainer", "ml", "c", "nvidia.com/mig-" + held["profile"], [held["uuid"]])]
        a = start(plugin_agent, api, tmp_path, kubelet)
        api.set_label("nvidia.com/mig.config", "all-1g.18gb")
        state(api, "pending")
        a.wait_log("GPU 0: pod ml/trainer holds a device of it")
        got = layout(tmp_path, sim_env)
        assert got[0][1] == sorted(m["profile"] for m in gpus[0]["mig_devices"]), got
        assert got[1][1] == ["1g.18gb"] * 7, got
        pods.pods = []
        state(api, "success", timeout=30)
        assert layout(tmp_path, sim_env)[0][1] == ["1g.18gb"] * 7
    finally:
        pods.stop()


def held_places(path):
    """{GPU: [mode, [[profile, start]...]]} from the state file, as --record writes it."""
    gpus = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        w = line.split()
        if w and w[0] == "gpu":
            gpus[w[1]] = [w[3], []]
        elif w and w[0] == "instance":
            gpus[w[1]][1].append([w[2], int(w[3])])
    return {k: [mode, sorted(insts)] for k, (mode, insts) in gpus.items()}


def held_layout(path):
    """{GPU: (MIG mode, [profiles])} as the simulator's state file
    (GPULET_SIM_STATE) holds them: the driver's view, not gpulet's."""
    return {int(k): (mode, sorted(p for p, _ in insts)) for k, (mode, insts) in held_places(path).items()}


def test_a_restart_in_the_middle_finishes(plugin_agent, api, tmp_path, sim_env, gpulet):
    """The MIG state outlives gpulet, as the driver's does (the simulator's
    state file). gpulet is killed while GPU 1's lane hangs in the change
    (GPUs 0 and 3 made; GPU 2 had the layout), and GPU 0 is then left half made (three of seven
    instances, as a kill between two creations leaves it): the next gpulet
    finishes the layout, says success, and touches no GPU already in it."""
    held = tmp_path / "mig.state"
    env = dict(sim_env, GPULET_SIM_STATE=str(held))
    a = start(plugin_agent, api, tmp_path, env=env)
    assert gpulet("sim", "hang", "1").returncode == 0
    api.set_label("nvidia.com/mig.config", "all-1g.18gb")
    seven = ("on", ["1g.18gb"] * 7)
    api.wait_for(lambda: held.exists() and all(held_layout(held).get(i) == seven for i in (0, 2, 3)),
                 "GPUs 0 and 3 made", timeout=20)
    assert held_layout(held)[1] != seven and api.labels()["nvidia.com/mig.config.state"] == "pending", a.log()
    a.proc.kill()
    a.proc.wait(timeout=10)
    lines = held.read_text().splitlines()
    gpu0 = [i for i, line in enumerate(lines) if line.startswith("instance 0 ")]
    held.write_text("\n".join(line for i, line in enumerate(lines) if i not in gpu0[3:]) + "\n")
    assert held_layout(held)[0] == ("on", ["1g.18gb"] * 3)
    b = start(plugin_agent, api, tmp_path, env=env)
    b.wait_log("MIG config 'all-1g.18gb': success")
    state(api, "success")
    assert held_layout(held) == {i: seven for i in range(4)}, held_layout(held)
    made = [line for line in b.log().splitlines() if "as MIG config 'all-1g.18gb'" in line]
    assert sorted(line.split("GPU ")[1][0] for line in made) == ["0", "1"], made  # 2 and 3 untouched


def mig_config(sock):
    """The status socket's mig-config: (state, config, reason)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(sock))
        s.sendall(b"mig-config\n")
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    return tuple((reply.decode().rstrip("\n").split("\t") + ["", ""])[:3])


@pytest.mark.parametrize("product", sorted(REFERENCE["products"]))
def test_layouts_in_turn_as_nvidia_mig_parted_left_them(agent, api, tmp_path, sim_env, product):
    """deploy/mig-manager/mig-parted.yaml's layouts in turn (each from the
    one before; all-1g.10gb to all-balanced among them) on two GPUs of each
    MIG-capable product, beside what NVIDIA's nvidia-mig-parted left on the
    simulator for the same steps (data/migparted-reference.json). Where
    both succeed, every GPU has the same mode and the same instances in the
    same places; where mig-parted fails, gpulet fails; a profile the GPU
    lacks makes mig-parted clear the GPU and say success, and gpulet fail,
    naming it, with the GPU as it was."""
    ref = REFERENCE["products"][product]
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(ref["scenario"])
    held = tmp_path / "mig.state"
    sock = tmp_path / "s.sock"
    a = agent("--simulate", str(scenario), "--mig-strategy", "mixed", "--mig-parted-config",
              str(SOURCE / "deploy" / "mig-manager" / "mig-parted.yaml"), "--kubeconfig",
              str(api.kubeconfig(tmp_path / "kc")), "--node-name", "n1", "--no-metrics", "--kubelet-root",
              str(tmp_path / "k"), "--status-socket", str(sock), env=dict(sim_env, GPULET_SIM_STATE=str(held)))
    a.wait_log("agent running")
    before = None
    for step in ref["steps"]:
        api.set_label("nvidia.com/mig.config", step["layout"])
        api.wait_for(lambda: mig_config(sock)[:2] in ((s, step["layout"]) for s in ("success", "failed")),
                     f"{step['layout']} applied or failed", timeout=20)
        state, _, why = mig_config(sock)
        now = held_places(held) or before
        where = f"{product}, {step['layout']}: gpulet {state} {why!r} {now}, mig-parted {step}"
        if not step["ok"]:
            assert state == "failed", where
        elif state == "failed":  # mig-parted cleared the GPUs: its parser dropped the profile
            assert "has no MIG profile" in why and not any(i for _, i in step["gpus"].values()), where
            assert before is None or now == before, where
        else:
            assert now == step["gpus"] or (now is None and not any(i for _, i in step["gpus"].values())), where
        before = now


@pytest.mark.parametrize("name,why", [
    ("nope", "no MIG config named 'nope'"),
    ("unknown-profile", "has no MIG profile 1g.99gb"),
    ("too-many", "the layout does not fit"),
])
def test_bad_layouts_fail_and_change_nothing_else(plugin_agent, api, tmp_path, sim_env, name, why):
    a = start(plugin_agent, api, tmp_path)
    before = layout(tmp_path, sim_env)
    api.set_label("nvidia.com/mig.config", name)
    state(api, "failed")
    a.wait_log(why)
    assert layout(tmp_path, sim_env) == before  # refused before anything was touched
    assert why in event(api, "MIGConfigFailed", f"MIG config '{name}' failed: ")["message"]


def test_the_file_is_read_again_at_each_label(plugin_agent, api, tmp_path, sim_env):
    """The file changes in place (a mounted ConfigMap edited): the next
    label applies the layout as the file says it now, with no restart; a
    file that no longer parses fails that label with its error, and the
    fixed file applies at the label after."""
    a = start(plugin_agent, api, tmp_path)
    cfg = tmp_path / "mig-parted.yaml"
    cfg.write_text(LAYOUTS + "  all-2g.35gb:\n    - devices: all\n      mig-enabled: true\n"
                   "      mig-devices: {\"2g.35gb\": 3}\n")
    api.set_label("nvidia.com/mig.config", "all-2g.35gb")
    state(api, "success")
    assert all(p == ["2g.35gb"] * 3 for _, p in layout(tmp_path, sim_env)), layout(tmp_path, sim_env)
    def now(want):  # from an end to another: state() would take the first for the answer
        api.wait_for(lambda: api.labels().get("nvidia.com/mig.config.state") == want, want)
    cfg.write_text("version: v1\nmig-configs:\n  all-1g.18gb: [oops\n")
    api.set_label("nvidia.com/mig.config", "all-1g.18gb")
    a.wait_log(f"MIG config 'all-1g.18gb': failed: {cfg}:")
    now("failed")
    cfg.write_text(LAYOUTS)
    api.set_label("nvidia.com/mig.config", "all-disabled")
    a.wait_log("MIG config 'all-disabled': success")
    now("success")
    assert all(mode == "disabled" for mode, _ in layout(tmp_path, sim_env)), layout(tmp_path, sim_env)


def test_bad_file_is_refused_at_start(agent, tmp_path):
    cfg = tmp_path / "mig-parted.yaml"
    cfg.write_text("version: v2\nmig-configs: {}\n")
    a = agent("--simulate", "h200-mig-mixed", "--no-metrics", "--mig-parted-config", str(cfg))
    assert a.proc.wait(timeout=20) == 1
    assert "unknown version: v2" in a.log(), a.log()
