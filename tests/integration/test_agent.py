"""The agent on the simulator: inventory at start, health events from fault
injection through the control socket, clean shutdown."""
import os
import signal
import subprocess
import time

import pytest

from conftest import GPULET


def sim(env, *args):
    return subprocess.run([GPULET, "sim", *args], capture_output=True, text=True, env=env,
                          timeout=10)


def test_agent_reports_injected_faults(agent, sim_env):
    a = agent("--simulate", "dgx-h100")
    a.wait_log("agent running")
    log = a.log()
    assert "8 GPU(s)" in log and "GPU 7: GPU-" in log
    assert sim(sim_env, "ping").stdout == "ok dgx-h100 8\n"
    assert sim(sim_env, "xid", "3", "79").returncode == 0
    a.wait_log("GPU 3 (GPU-", timeout=2)
    a.wait_log("XID 79")
    assert sim(sim_env, "ecc", "1").returncode == 0
    a.wait_log("GPU 1 (GPU-")
    a.wait_log("double-bit ECC error")
    a.wait_log("XID 48")
    assert sim(sim_env, "lose", "6").returncode == 0
    a.wait_log("NVML event wait: GPU is lost")
    assert a.stop() == 0
    assert "agent stopped" in a.log()
    assert not os.path.exists(sim_env["GPULET_SIM_CONTROL"])


def test_agent_fault_by_uuid(agent, sim_env, gpulet):
    import json
    uuid = json.loads(gpulet("list", "--simulate", "l4-pcie", "-o", "json").stdout)["gpus"][2]["uuid"]
    a = agent("--simulate", "l4-pcie")
    a.wait_log("agent running")
    assert sim(sim_env, "xid", uuid, "31").returncode == 0
    a.wait_log(f"GPU 2 ({uuid}): XID 31")
    bad = sim(sim_env, "xid", "GPU-nope", "31")
    assert bad.returncode == 1 and "no GPU 'GPU-nope'" in bad.stderr


def test_agent_sigint(agent):
    a = agent("--simulate", "t4")
    a.wait_log("agent running")
    t0 = time.monotonic()
    assert a.stop(sig=signal.SIGINT) == 0
    assert time.monotonic() - t0 < 3
    assert "received SIGINT" in a.log()


def test_agent_bad_scenario_exits(agent, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("gpus:\n  - product: h100-sxm\n    mig: maybe\n")
    a = agent("--simulate", str(f))
    assert a.proc.wait(timeout=10) == 1
    assert f"{f}:3:10: mig must be true or false, not 'maybe'" in a.log()


@pytest.mark.parametrize("value, why", [
    ("nonsense", "--metrics-listen: metrics address 'nonsense' needs a port, as in :9400"),
    (":99999", "--metrics-listen: metrics address ':99999': bad port"),
    ("300.1.1.1:9400", "bad IPv4 address"),
])
def test_agent_bad_metrics_address_exits_2(agent, value, why):
    """A metrics address that cannot be listened on is the command line's
    fault, found at start, not an agent that runs with metrics off."""
    a = agent("--simulate", "t4", "--metrics-listen", value)
    assert a.proc.wait(timeout=10) == 2
    assert why in a.log(), a.log()


def test_take_over_from_an_agent_that_goes(plugin_agent, tmp_path):
    """A rolling update's old pod may be ended as the new one starts (the
    DaemonSet controller does so; seen on a real node, issue 48): it takes
    the new agent's questions and closes without an answer, then its socket
    goes. That is nothing to take over from: the new agent says so and
    serves, rather than failing its start (and being restarted)."""
    import socket
    import threading
    path = tmp_path / "status.sock"
    old = socket.socket(socket.AF_UNIX)
    old.bind(str(path))
    old.listen(4)
    asked = []

    def stopping():
        """Each question read and left unanswered; after the hand-over, gone."""
        while True:
            c, _ = old.accept()
            line = c.recv(256).decode()
            asked.append(line.split()[0] if line else "")
            c.close()
            if line.startswith("hand-over"):
                old.close()
                path.unlink()
                return
    t = threading.Thread(target=stopping, daemon=True)
    t.start()
    a = plugin_agent("--simulate", "t4", "--take-over")
    a.wait_log("stopped before it handed over: nothing to take over")
    t.join(timeout=10)
    assert asked == ["pid", "hand-over"], asked
    assert a.stop() == 0
