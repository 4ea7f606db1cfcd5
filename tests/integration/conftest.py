"""Shared fixtures: the gpulet binary, its simulator, and a running agent."""
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from limits import limit

SOURCE = Path(os.environ.get("GPULET_SOURCE", Path(__file__).resolve().parents[2]))
BUILD = Path(os.environ.get("GPULET_BUILD", SOURCE / "build"))
GPULET = os.environ.get("GPULET_BIN", str(BUILD / "gpulet"))
SIM_LIB = os.environ.get("GPULET_SIM_LIB", str(BUILD / "libgpulet-nvml-sim.so"))
# GPULET_SANITIZE: ON for the ASan+UBSan build, thread for ThreadSanitizer's.
SANITIZE = os.environ.get("GPULET_SANITIZE", "OFF").upper()
SANITIZED = SANITIZE in ("ON", "1", "TRUE", "THREAD")
TSAN = SANITIZE == "THREAD"
# No ListAndWatch stream of a test lives longer: one that goes silent ends
# with DEADLINE_EXCEEDED there, a named failure, not a wait for pytest's timeout.
STREAM_S = 60

# A test of memory use: ASan's quarantine and shadow would be measured too,
# so it skips on a sanitized build and scripts/test.sh runs it on the plain one.
plain = pytest.mark.skipif(SANITIZED, reason="measures memory: runs on the plain build (-m plain)")


# CI's machine is meant to run every test here: what a test needs that is
# missing (a tool scripts/install-deps.sh --test installs, root) fails it
# there, and skips it elsewhere. tests/e2e/README.md lists the skips that remain.
CI = os.environ.get("CI") == "true"


def skip_or_fail(reason):
    (pytest.fail if CI else pytest.skip)(reason)


def needs(missing, reason):
    """A mark: the test cannot run where missing is true (why: reason)."""
    return pytest.mark.needs(missing, reason=reason)


def tool(name):
    """needs() for a program on PATH."""
    return needs(not shutil.which(name), f"{name} is not installed (scripts/install-deps.sh --test)")


def pytest_configure(config):
    config.addinivalue_line("markers", "plain: measures memory; scripts/test.sh runs it on the plain build")
    config.addinivalue_line("markers", "needs(missing, reason): skipped where missing, failed in CI")


def pytest_runtest_setup(item):
    for m in item.iter_markers("needs"):
        if m.args[0]:
            skip_or_fail(m.kwargs["reason"])


# The last two: the simulator's report of an NVML call on the agent's loop,
# and tests/shim/loop_disk.c's of a file touched there.
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "WARNING: ThreadSanitizer", "an NVML call on the agent's loop thread",
                   "a file touched on the agent's loop thread")


def check_clean(stderr):
    """Fails the test if a sanitizer reported anything."""
    for mark in SANITIZER_MARKS:
        assert mark not in stderr, stderr


@pytest.fixture
def tmp_path():
    """A short temporary directory instead of pytest's own: unix socket paths
    are limited to 107 bytes, and pytest's grow with the user name and the
    test's name (/tmp/pytest-of-<user>/pytest-N/<test>/kubelet/...)."""
    d = Path(tempfile.mkdtemp(prefix="gpulet-"))
    yield d
    end_mps_daemons(d)
    if not os.environ.get("GPULET_KEEP_TMP"):  # set it to read the agents' logs after a test
        shutil.rmtree(d, ignore_errors=True)


def mps_daemons(root):
    """The MPS control daemons (stand-ins) running with pipe directories
    under root, from their pid files: {pid file: pid}."""
    found = {}
    for pidfile in Path(root).rglob("nvidia-cuda-mps-control.pid"):
        try:
            pid = int(pidfile.read_text())
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except (OSError, ValueError):
            continue
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        if f"CUDA_MPS_PIPE_DIRECTORY={pidfile.parent}".encode() in env and state not in "ZX":
            found[pidfile] = pid
    return found


def end_mps_daemons(root):
    """MPS daemons outlive gpulet by design: a test's are ended with it,
    and so are their keepers and any control client still waiting on one
    (each names a path under root)."""
    for pid in mps_daemons(root).values():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    mark = str(root).encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if int(proc.name) == os.getpid() or mark not in (proc / "cmdline").read_bytes() + (
                    proc / "environ").read_bytes():
                continue
            if b"mps" in (proc / "cmdline").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            pass


def ctypes_env(env):
    """env for a plain python that loads the simulator with ctypes: the
    sanitized simulator needs the ASan runtime loaded first."""
    env = dict(env)
    if SANITIZED:
        lib = "libtsan.so" if TSAN else "libasan.so"
        runtime = subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True,
                                 text=True).stdout.strip()
        env.update(LD_PRELOAD=runtime, ASAN_OPTIONS="detect_leaks=0")
    return env


@pytest.fixture(scope="session")
def loop_disk(tmp_path_factory):
    """tests/shim/loop_disk.c built here (plain): preloaded into every agent
    a test starts, it reports a file touched on the agent's loop thread
    (docs/architecture.md, "Executors"). Not under ThreadSanitizer, whose
    runtime must see the process's first calls itself."""
    if TSAN:
        return None
    lib = tmp_path_factory.mktemp("shim") / "loop_disk.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(SOURCE / "tests/shim/loop_disk.c"),
                    "-ldl"], check=True, timeout=60)
    return lib


@pytest.fixture
def sim_env(tmp_path, loop_disk):
    """Environment with a private simulator control socket, and the agent's
    node paths (kubelet root, status socket) under tmp_path: a test that
    leaves them out must not reach a real node's kubelet or /run."""
    env = dict(os.environ)
    if loop_disk:
        env["LD_PRELOAD"] = " ".join(filter(None, [env.get("LD_PRELOAD"), str(loop_disk)]))
        # ASan's runtime would insist on coming first among preloaded libraries.
        env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "verify_asan_link_order=0"]))
    env["GPULET_SIM_CONTROL"] = str(tmp_path / "sim.sock")
    env["GPULET_KUBELET_ROOT"] = str(tmp_path / "node-kubelet")
    env["GPULET_STATUS_SOCKET"] = str(tmp_path / "node-status.sock")
    # Nor a real cluster: no API server credentials, no Node name, no /etc file.
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NODE_NAME", "GPULET_LABELS",
                "GFD_OUTPUT_FILE", "GPULET_CONFIG_MAP", "DEFAULT_CONFIG", "NODE_LABEL",
                "POD_NAMESPACE"):
        env.pop(var, None)
    # Nor the node's CDI directory.
    env["GPULET_CDI_SPEC_DIR"] = str(tmp_path / "node-cdi")
    # Nor the node's processes and container logs (per-container usage).
    env["GPULET_PROC_ROOT"] = str(tmp_path / "node-proc")
    env["GPULET_CONTAINER_LOG_DIR"] = str(tmp_path / "node-containers")
    env["GFD_MACHINE_TYPE_FILE"] = str(tmp_path / "product_name")
    (tmp_path / "product_name").write_text("DGX H100\n")
    return env


@pytest.fixture(scope="session")
def slow_fsync(tmp_path_factory):
    """An environment maker: env with tests/shim/slow_fsync.c preloaded, so
    that every fsync of the process takes ms longer, and waits until the
    file gate exists where one is named (the shim built here, plain)."""
    lib = tmp_path_factory.mktemp("shim") / "slow_fsync.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(SOURCE / "tests/shim/slow_fsync.c"),
                    "-ldl"], check=True, timeout=60)

    def env(base, ms, gate=None, full=None):
        e = dict(base, GPULET_SLOW_FSYNC_MS=str(ms))
        if gate:
            e["GPULET_FSYNC_GATE"] = str(gate)
        if full:  # fsync fails with ENOSPC while this file exists
            e["GPULET_FSYNC_FAIL"] = str(full)
        e["LD_PRELOAD"] = " ".join(filter(None, [base.get("LD_PRELOAD"), str(lib)]))
        # ASan's runtime would insist on coming first among preloaded libraries.
        e["ASAN_OPTIONS"] = ":".join(filter(None, [base.get("ASAN_OPTIONS"), "verify_asan_link_order=0"]))
        return e
    return env


@pytest.fixture
def gpulet(sim_env):
    """Runs gpulet with args; returns the CompletedProcess (text)."""
    def run(*args, env=None, timeout=30):
        p = subprocess.run([GPULET, *args], capture_output=True, text=True,
                           env=env or sim_env, timeout=limit(timeout))
        check_clean(p.stderr)
        return p
    return run


class Agent:
    """A gpulet agent process whose log is collected from stderr."""

    def __init__(self, args, env, log_path, prefix=()):
        self.log_path = log_path
        self.log_file = open(log_path, "w")
        self.proc = subprocess.Popen([*prefix, GPULET, "agent", *args], stdout=self.log_file,
                                     stderr=subprocess.STDOUT, env=env)

    def log(self):
        return Path(self.log_path).read_text()

    def wait_log(self, text, timeout=10.0):
        deadline = time.monotonic() + limit(timeout)
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"agent log lacks {text!r}:\n{self.log()}")

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=limit(timeout))
        self.log_file.close()
        check_clean(self.log())
        return self.proc.returncode


@pytest.fixture
def agent(sim_env, tmp_path):
    """Starts `gpulet agent ARGS...`; stops it at the end of the test."""
    started = []

    def start(*args, prefix=(), env=None):
        a = Agent(args, env or sim_env, tmp_path / f"agent{len(started)}.log", prefix)
        started.append(a)
        return a
    yield start
    # Every agent is stopped before any one's log is judged: a report in the
    # first must not leave the others running.
    for a in started:
        if a.proc.poll() is None:
            a.proc.kill()
    for a in started:
        a.stop(sig=signal.SIGKILL)


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    from kubelet import load_stubs
    return load_stubs(tmp_path_factory.mktemp("stubs"))


@pytest.fixture
def kubelet(tmp_path, stubs):
    """A running fake kubelet under tmp_path/kubelet."""
    from kubelet import FakeKubelet
    k = FakeKubelet(tmp_path / "kubelet", *stubs)
    k.start()
    yield k
    k.stop()


@pytest.fixture
def plugin_agent(agent, kubelet, tmp_path):
    """Starts an agent against the fake kubelet; returns (agent, kubelet)."""
    def start(*args, wait=True, prefix=(), env=None):
        # Metrics have their own tests (test_metrics.py); here they would all want :9400.
        metrics = [] if "--metrics-listen" in args else ["--no-metrics", "true"]
        a = agent("--kubelet-root", str(kubelet.root), "--status-socket",
                  str(tmp_path / "status.sock"), *metrics, *args, prefix=prefix, env=env)
        if wait:
            kubelet.wait_registrations(len(kubelet.registrations) + 1, timeout=30)
            a.wait_log("agent running")  # NVML events are watched from here on
        return a
    return start
