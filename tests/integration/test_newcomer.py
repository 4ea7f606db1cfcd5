"""What a first-time user meets: the README's demo in the user's own
directory (never the node's paths, never another user's), the agent's
words while it waits for a kubelet, what it leaves behind, a path that is
not the user's, and exit codes and help that follow the README's rule."""
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import GPULET, Agent, check_clean

NOBODY = 65534


@pytest.fixture
def user_env(sim_env, tmp_path):
    """The environment of a user running the README's demo: no gpulet path
    set at all, and XDG_RUNTIME_DIR in the test's own directory."""
    env = dict(sim_env)
    for var in ("GPULET_SIM_CONTROL", "GPULET_KUBELET_ROOT", "GPULET_STATUS_SOCKET",
                "GPULET_CDI_SPEC_DIR"):
        env.pop(var)
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    env["XDG_RUNTIME_DIR"] = str(xdg)
    return env


def run(env, *args):
    p = subprocess.run([GPULET, *args], capture_output=True, text=True, env=env, timeout=30)
    check_clean(p.stderr)
    return p


def test_demo_in_the_users_own_directory(user_env, tmp_path):
    """`gpulet agent --simulate dgx-h100` as README says: its kubelet root,
    status socket and the simulator's socket are in $XDG_RUNTIME_DIR/gpulet;
    `gpulet health` and `gpulet sim` find them with no flag; the log says it
    waits for a kubelet; SIGTERM leaves nothing behind."""
    mine = tmp_path / "xdg" / "gpulet"
    a = Agent(["--simulate", "dgx-h100", "--no-metrics"], user_env, tmp_path / "agent.log")
    try:
        a.wait_log("agent running")
        a.wait_log(f"waiting for the kubelet's {mine}/kubelet/device-plugins/kubelet.sock")
        assert (mine / "kubelet" / "device-plugins" / "gpulet-nvidia-gpu.sock").is_socket()
        assert oct(mine.stat().st_mode & 0o777) == "0o700"
        assert run(user_env, "sim", "xid", "3", "79").stdout.startswith("ok")
        deadline = time.monotonic() + 10
        while not re.search(r"^3 +Unhealthy ", (out := run(user_env, "health").stdout), re.M):
            assert time.monotonic() < deadline, out
            time.sleep(0.1)
        assert len(out.splitlines()) == 9 and out.split()[:4] == ["GPU", "HEALTH", "UUID", "REASON"], out
        listed = run(user_env, "list", "--simulate", "dgx-h100")
        assert "Unhealthy (XID 79" in listed.stdout and not listed.stderr, listed
    finally:
        assert a.stop() == 0
    assert "waiting for the kubelet" in a.log()
    assert a.log().count("waiting for the kubelet") == 1
    assert not mine.exists(), list(mine.rglob("*"))


def test_a_demo_with_cdi_and_a_feature_file_leaves_nothing(user_env, tmp_path):
    """A demo agent with a cdi-* strategy and labels in NFD's file writes
    both in the user's directory; its stop takes them, and the directory,
    with it (a node's CDI spec stays: pods may start while gpulet restarts)."""
    mine = tmp_path / "xdg" / "gpulet"
    a = Agent(["--simulate", "t4", "--no-metrics", "--device-list-strategy", "cdi-cri",
               "--labels", "file"], user_env, tmp_path / "agent.log")
    try:
        a.wait_log("agent running")
        wait = time.monotonic() + 10
        while not ((mine / "cdi" / "nvidia.com-gpu.json").exists() and (mine / "features.d" / "gfd").exists()):
            assert time.monotonic() < wait, list(mine.rglob("*"))
            time.sleep(0.1)
    finally:
        assert a.stop() == 0
    assert not mine.exists(), list(mine.rglob("*"))


def test_a_second_demo_agent_of_its_own(user_env, tmp_path):
    """README's second demo agent: another XDG_RUNTIME_DIR and metrics port
    give it everything of its own (paths, metrics, fault injection)."""
    from test_metrics import free_port
    second = tmp_path / "xdg2"
    second.mkdir(mode=0o700)
    env2 = dict(user_env, XDG_RUNTIME_DIR=str(second))
    ports = free_port(), free_port()
    a = Agent(["--simulate", "dgx-h100", "--metrics-listen", f"127.0.0.1:{ports[0]}"], user_env,
              tmp_path / "a.log")
    b = Agent(["--simulate", "t4", "--metrics-listen", f"127.0.0.1:{ports[1]}"], env2, tmp_path / "b.log")
    try:
        a.wait_log("metrics ready")
        b.wait_log("metrics ready")
        assert run(env2, "sim", "xid", "0", "79").stdout.startswith("ok")
        deadline = time.monotonic() + 10
        while "Unhealthy" not in run(env2, "health").stdout:
            assert time.monotonic() < deadline, run(env2, "health").stdout
            time.sleep(0.1)
        assert "Unhealthy" not in run(user_env, "health").stdout  # the first one's GPUs: untouched
        assert len(run(env2, "health").stdout.splitlines()) == 2  # the t4: one GPU
    finally:
        assert a.stop() == 0 and b.stop() == 0


def test_node_paths_are_kept_when_given(user_env, tmp_path):
    """A path given by flag or variable wins over the user's directory, as
    the end-to-end tests need with the real kubelet."""
    env = dict(user_env, GPULET_STATUS_SOCKET=str(tmp_path / "given.sock"))
    a = Agent(["--simulate", "t4", "--no-metrics", "--kubelet-root", str(tmp_path / "kr")], env,
              tmp_path / "agent.log")
    try:
        a.wait_log("agent running")
        assert (tmp_path / "kr" / "device-plugins" / "gpulet-nvidia-gpu.sock").is_socket()
        assert (tmp_path / "given.sock").is_socket()
    finally:
        assert a.stop() == 0
    # The directories it made go with it; the given root it made, too.
    assert not (tmp_path / "kr").exists() and not (tmp_path / "given.sock").exists()


def as_nobody():
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def test_a_path_that_is_not_the_users(user_env, tmp_path):
    """A kubelet root the agent may not create in: one error naming the
    path (and its owner, where another user owns it), exit 1, no retrying
    forever; `gpulet health` says permission denied, not "is the agent
    running?"."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    env = dict(user_env)
    prefix = None
    if os.geteuid() == 0:
        # The README's second user: root's leftovers, seen by someone else.
        os.chmod(tmp_path, 0o755)
        xdg = tmp_path / "xdg-nobody"
        xdg.mkdir(mode=0o700)
        os.chown(xdg, NOBODY, NOBODY)
        env["XDG_RUNTIME_DIR"] = str(xdg)
        prefix = as_nobody
    else:
        os.chmod(theirs, 0o555)
    p = subprocess.run([GPULET, "agent", "--simulate", "t4", "--no-metrics", "--kubelet-root",
                        str(theirs / "kubelet")], capture_output=True, text=True, env=env,
                       timeout=30, preexec_fn=prefix)
    check_clean(p.stderr)
    assert p.returncode == 1, p.stderr
    assert f"cannot create {theirs}/kubelet: Permission denied" in p.stderr, p.stderr
    if prefix:
        assert f"({theirs} belongs to uid 0, not to uid {NOBODY})" in p.stderr, p.stderr
    assert "retrying" not in p.stderr
    # A status socket the user may not reach.
    sock = tmp_path / "status.sock"
    a = Agent(["--simulate", "t4", "--no-metrics", "--status-socket", str(sock)], user_env,
              tmp_path / "agent.log")
    try:
        a.wait_log("agent running")
        if prefix:
            q = subprocess.run([GPULET, "health", "--status-socket", str(sock)], capture_output=True,
                               text=True, env=env, timeout=30, preexec_fn=prefix)
            assert q.returncode == 1
            assert "Permission denied (the socket is another user's" in q.stderr, q.stderr
            assert "is the agent running" not in q.stderr
    finally:
        assert a.stop() == 0


def test_users_directory_owned_by_someone_else(user_env, tmp_path):
    """$XDG_RUNTIME_DIR/gpulet that is not a private directory of the user's
    is refused with what to do."""
    mine = tmp_path / "xdg" / "gpulet"
    mine.mkdir(mode=0o777)
    os.chmod(mine, 0o777)
    p = run(user_env, "agent", "--simulate", "t4", "--no-metrics")
    assert p.returncode == 1
    assert f"{mine} is writable by others (mode 777): run chmod 700 {mine}" in p.stderr, p.stderr


EXIT_CODES = [
    # a bad command line: 2, on every command alike
    (["list", "--simulate", "dgx-h1000"], 2, "unknown simulator preset 'dgx-h1000'"),
    (["labels", "--simulate", "dgx-h1000"], 2, "unknown simulator preset 'dgx-h1000'"),
    (["cdi", "generate", "--simulate", "dgx-h1000"], 2, "unknown simulator preset 'dgx-h1000'"),
    (["agent", "--simulate", "dgx-h1000", "--no-metrics"], 2, "unknown simulator preset 'dgx-h1000'"),
    (["agent", "--mig-strategy", "mixd"], 2, "--mig-strategy must be one of none, single, mixed"),
    (["labels", "--simulate", "t4", "--mig-strategy", "mixd"], 2, "--mig-strategy must be one of"),
    (["agent", "--device-list-strategy", "envvar,nope"], 2,
     "each must be one of envvar, volume-mounts, cdi-annotations, cdi-cri, driver-mounts, not 'nope'"),
    (["sim", "show", "dgx-h1000"], 2, "the presets are:\n  dgx-h100\n"),
    (["replace-nvidia", "--label", "novalue"], 2, "--label must be KEY=VALUE"),
    # a failure: 1, on every command alike
    (["agent", "--simulate", "t4", "--no-metrics", "--config-file", "{bad}"], 1,
     "unknown key 'flags.nope'"),
    (["labels", "--simulate", "t4", "--config-file", "{bad}"], 1, "unknown key 'flags.nope'"),
    (["cdi", "generate", "--simulate", "t4", "--config-file", "{bad}"], 1, "unknown key 'flags.nope'"),
    (["replace-nvidia", "-f", "{bad}"], 1, "has no spec.template.spec: give a DaemonSet"),
]


@pytest.mark.parametrize("args,code,text", EXIT_CODES)
def test_exit_codes(gpulet, tmp_path, args, code, text):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\nflags:\n  nope: 1\n")
    p = gpulet(*[a.replace("{bad}", str(bad)) for a in args])
    assert p.returncode == code, p.stderr
    assert text in p.stderr, p.stderr


def test_no_gpu_hints(gpulet):
    """Without a GPU, each command that needs one names the --simulate that works."""
    for cmd in (["list"], ["labels"], ["cdi", "generate"]):
        p = gpulet(*cmd)
        if p.returncode == 0:
            pytest.skip("this machine has NVML")
        assert p.returncode == 1
        assert f"try `gpulet {' '.join(cmd)} --simulate dgx-h100`" in p.stderr, p.stderr


def test_help_says_how(gpulet, user_env):
    p = gpulet("sim", "xid", "--help", env=user_env)
    assert p.returncode == 0 and "usage: gpulet sim" in p.stdout
    assert "The control socket: " + user_env["XDG_RUNTIME_DIR"] + "/gpulet/sim.sock" in p.stdout
    p = gpulet("health", "--help", env=user_env)
    assert p.returncode == 0 and "/run/gpulet/status.sock (the node's agent)" in p.stdout
    assert user_env["XDG_RUNTIME_DIR"] + "/gpulet/status.sock (your simulated one)" in p.stdout
    p = gpulet("agent", "--help", env=user_env)
    assert "  --kubelet-root PATH\n" in p.stdout and "  --no-metrics[=BOOL]\n" in p.stdout
    assert "  --mig-strategy none|single|mixed\n" in p.stdout
    assert "--no-metrics=false turns it off" in p.stdout
    assert "[with --simulate: " + user_env["XDG_RUNTIME_DIR"] + "/gpulet/kubelet]" in p.stdout
    p = gpulet("--help")
    assert "replace-nvidia" in p.stdout and "Exit codes: 0 success, 1 failure, 2" in p.stdout


def test_a_second_demo_agent_is_refused(user_env, tmp_path):
    """A user's second demo agent would share the first's sockets: it
    refuses to start, naming the first (its PID) and the flags that give it
    paths of its own, and takes nothing of the first's with it."""
    mine = tmp_path / "xdg" / "gpulet"
    a = Agent(["--simulate", "dgx-h100", "--no-metrics"], user_env, tmp_path / "a.log")
    try:
        a.wait_log("agent running")
        b = Agent(["--simulate", "a100-mig-mixed", "--no-metrics"], user_env, tmp_path / "b.log")
        assert b.proc.wait(timeout=20) == 1, b.log()
        assert (f"another gpulet agent (PID {a.proc.pid}) serves {mine}/status.sock: stop it, or give "
                "this one paths of its own with --status-socket and --kubelet-root") in b.log(), b.log()
        assert "was removed" not in a.log()
        assert (mine / "status.sock").is_socket()
        assert len(run(user_env, "health").stdout.splitlines()) == 9  # the first still answers (8 and a header)
        # One with a status socket of its own but the same kubelet directory:
        # refused at the plugin socket the first serves.
        d = Agent(["--simulate", "t4", "--no-metrics", "--status-socket", str(tmp_path / "d.sock")],
                  dict(user_env, GPULET_SIM_CONTROL=str(tmp_path / "d-sim.sock")), tmp_path / "d.log")
        assert d.proc.wait(timeout=20) == 1, d.log()
        assert "another process serves it (another gpulet agent on the same paths?)" in d.log(), d.log()
        assert (mine / "kubelet" / "device-plugins" / "gpulet-nvidia-gpu.sock").is_socket()
        # One with paths of its own runs beside it.
        c = Agent(["--simulate", "t4", "--no-metrics", "--status-socket", str(tmp_path / "c.sock"),
                   "--kubelet-root", str(tmp_path / "c-kubelet")],
                  dict(user_env, GPULET_SIM_CONTROL=str(tmp_path / "c-sim.sock")), tmp_path / "c.log")
        c.wait_log("agent running")
        assert c.stop() == 0
        assert len(run(user_env, "health").stdout.splitlines()) == 9
    finally:
        assert a.stop() == 0
    assert not mine.exists(), list(mine.rglob("*"))


def test_the_commands_after_the_demo_use_the_running_agent(user_env, tmp_path):
    """While the demo agent runs, the user's next commands show its node with
    no flag: list (its GPUs, health and MIG layout as changed since start),
    labels, its CDI spec, and doctor on its own paths and configuration."""
    mine = tmp_path / "xdg" / "gpulet"
    a = Agent(["--simulate", "a100-mig-mixed", "--mig-strategy", "mixed", "--no-metrics",
               "--write-cdi-spec", "true"], user_env,
              tmp_path / "agent.log")
    try:
        a.wait_log("agent running")
        assert run(user_env, "sim", "mig", "0", "7g.40gb").returncode == 0   # a new layout on GPU 0
        assert run(user_env, "sim", "xid", "7", "79").returncode == 0
        deadline = time.monotonic() + 20
        while True:
            listed = run(user_env, "list")
            rows = listed.stdout.splitlines()
            mig0 = [r for r in rows if r.startswith("0:")]
            if len(mig0) == 1 and "7g.40gb" in mig0[0] and "Unhealthy (XID 79" in listed.stdout:
                break
            assert listed.returncode == 0 and time.monotonic() < deadline, listed
            time.sleep(0.2)
        wide = run(user_env, "list", "-o", "wide").stdout
        assert "MINOR" in wide.splitlines()[0], wide
        labels = run(user_env, "labels")
        assert labels.returncode == 0, labels.stderr
        # The running agent's node (a100-mig-mixed), not a default one.
        assert "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB" in labels.stdout.splitlines(), labels.stdout
        spec = run(user_env, "cdi", "generate", "--format", "json")
        assert spec.returncode == 0, spec.stderr
        assert json.loads(spec.stdout)["kind"] == "nvidia.com/gpu"
        # The demo agent found no driver: said, not left for a container to find.
        assert "the agent's spec has no driver files" in spec.stderr, spec.stderr
        assert json.loads(spec.stdout) == json.loads((mine / "cdi" / "nvidia.com-gpu.json").read_text())
        doc = run(user_env, "doctor", "-o", "json")
        checks = {c["id"]: c for c in json.loads(doc.stdout)["checks"]}
        # It asked the demo agent (its resources, not "gpulet does not answer"),
        # and looked for the kubelet where the demo agent does.
        assert "nvidia.com/mig-1g.5gb" in checks["registration"]["message"], checks["registration"]
        assert str(mine / "kubelet") in json.dumps(checks), checks
        # It agrees with the agent: GPU 7 is unhealthy there, so here, said
        # with the agent it asked; the simulator's socket stays the agent's.
        sock = str(mine / "status.sock")
        assert doc.returncode == 2, doc.stdout
        health = checks["gpu-health"]
        assert health["status"] == "FAIL" and "GPU 7: XID 79" in health["message"], health
        assert sock in health["message"] and sock in checks["nvml"]["message"], checks
        assert "control socket" not in doc.stderr, doc.stderr
        failed = [c for c in checks.values() if c["status"] == "FAIL"]
        # GPU 7 is lost to NVML as well (XID 79): nvml says so, no other check fails
        assert failed == [checks["nvml"], health], failed
        assert "NVML has lost GPU 7" in checks["nvml"]["message"], checks["nvml"]
        assert run(user_env, "sim", "recover", "7").returncode == 0
        deadline = time.monotonic() + 20
        while run(user_env, "doctor").returncode != 0:
            assert time.monotonic() < deadline, run(user_env, "doctor").stdout
            time.sleep(0.5)
        # The checks that cannot apply to a demo say why.
        doc = json.loads(run(user_env, "doctor", "-o", "json").stdout)
        why = {c["id"]: c["message"] for c in doc["checks"] if c["status"] == "SKIP"}
        for check in ("kernel-module", "driver-library", "nvidia-uvm", "runtime", "kernel-log"):
            assert "simulated GPUs" in why[check], why
        assert "no kubelet" in why["kubelet"] and "no kubelet" in why["pod-resources"], why
        # The demo's own flag finds the same agent (it looked at the node's
        # /run/gpulet and /var/lib/kubelet before).
        doc = run(user_env, "doctor", "--simulate", "a100-mig-mixed", "-o", "json")
        checks = {c["id"]: c for c in json.loads(doc.stdout)["checks"]}
        assert checks["registration"]["status"] == "SKIP" and sock in checks["registration"]["message"], checks
        assert str(mine / "kubelet") in checks["kubelet"]["message"], checks["kubelet"]
    finally:
        assert a.stop() == 0
    # Without an agent: a clear word, and the local way where there is one.
    assert "--simulate" in run(user_env, "labels").stderr


def docs_block(doc, marker):
    """The ```sh block of docs/DOC that holds marker, as commands: a line
    continued with a backslash joined to the next, comments kept apart."""
    text = (Path(__file__).resolve().parents[2] / "docs" / doc).read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if marker in b)
    commands, pending = [], ""
    for line in block.splitlines():
        line = pending + line.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        code, _, comment = line.partition("  #")
        commands.append((code.strip(), comment.strip().lstrip("# ")))
    return commands


def test_docs_mps_without_a_gpu(user_env, tmp_path):
    """docs/sharing.md's "Trying MPS without a GPU", run as written by a
    user who is not root: the agent says its daemon is up with the limits,
    and the stand-in answers the thread percentage."""
    home = tmp_path / "home"
    home.mkdir()
    env = dict(user_env, HOME=str(home), PATH=f"{Path(GPULET).resolve().parent}:{os.environ['PATH']}")
    prefix = None
    if os.geteuid() == 0:
        os.chmod(tmp_path, 0o755)
        xdg = tmp_path / "xdg-nobody"
        xdg.mkdir(mode=0o700)
        for d in (xdg, home):
            os.chown(d, NOBODY, NOBODY)
        env["XDG_RUNTIME_DIR"] = str(xdg)
        prefix = as_nobody
    commands = docs_block("sharing.md", "nvidia-cuda-mps-control")
    agent_at = next(i for i, (c, _) in enumerate(commands) if c.startswith("gpulet agent"))
    for code, _ in commands[:agent_at]:
        p = subprocess.run(["bash", "-c", code], capture_output=True, text=True, env=env, timeout=30,
                           preexec_fn=prefix)
        assert p.returncode == 0, (code, p.stderr)
    log = open(tmp_path / "agent.log", "w")
    # (metrics off: the suite shares the machine, and port 9400 with it)
    agent = subprocess.Popen(["bash", "-c", "exec " + commands[agent_at][0] + " --no-metrics"],
                             stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=prefix)
    try:
        deadline = time.monotonic() + 30
        while "MPS daemon for nvidia.com/gpu is up" not in (tmp_path / "agent.log").read_text():
            assert agent.poll() is None and time.monotonic() < deadline, (tmp_path / "agent.log").read_text()
            time.sleep(0.1)
        assert "active threads 50%" in (tmp_path / "agent.log").read_text()
        for code, want in commands[agent_at + 1:]:
            p = subprocess.run(["bash", "-c", code], capture_output=True, text=True, env=env,
                               timeout=30, preexec_fn=prefix)
            assert p.returncode == 0 and p.stdout.split()[0] == want, (code, p.stdout, p.stderr)
    finally:
        agent.terminate()
        assert agent.wait(timeout=15) == 0, (tmp_path / "agent.log").read_text()
        log.close()
