#!/usr/bin/python3
"""What gpulet relies on of nvidia-cuda-mps-control, observed (issue 42): the
same probes run against the driver's real program on a GPU machine (its
record is tests/realgpu/data/mps-control-580.json) and against the
project's stand-ins (test_sharing.py's test_stand_ins_keep_the_real_contract),
so that a stand-in cannot drift from what the real one does.

Probes, each in a fresh pipe and log directory: a client with no daemon;
`-f` (its pid file); a second `-f` on the same pipe; the set_default_*
and get_default_* commands gpulet sends; quit while an MPS client runs
(whether it returns, what it ends), and once the client ends; quit with no
client; SIGTERM. Prints one JSON object. Starts only daemons of its
own, and stops them whatever happens; changes no GPU setting.

usage: mps_contract.py CONTROL CLIENT... (CLIENT: a command that runs as an
MPS client until SIGTERM, printing a line once it is bound)"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

control, client_cmd = sys.argv[1], sys.argv[2:]
seen = {}
started = []


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not reaped yet) is not alive.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def wait(cond, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def fresh():
    d = Path(tempfile.mkdtemp(prefix="mps-contract-"))
    (d / "pipe").mkdir()
    (d / "log").mkdir()
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(d / "pipe"), CUDA_MPS_LOG_DIRECTORY=str(d / "log"))
    return d, env


def command(env, text):
    p = subprocess.run([control], input=text + "\n", capture_output=True, text=True, env=env, timeout=30)
    return {"rc": p.returncode, "stdout": p.stdout.strip(), "stderr": p.stderr.strip()}


def start(d, env):
    p = subprocess.Popen([control, "-f"], stdout=open(d / "control.out", "w"), stderr=subprocess.STDOUT,
                         env=env, start_new_session=True)
    started.append(p)
    pidfile = d / "pipe" / "nvidia-cuda-mps-control.pid"
    up = wait(lambda: pidfile.exists() and pidfile.read_text().strip() == str(p.pid), 10)
    return p, up


def logs(d):
    """What the control daemon says: with -f, on its output (the stand-ins
    keep a control.log too)."""
    return "".join(f.read_text() for f in (d / "control.out", d / "log" / "control.log") if f.exists())


def probe():
    d, env = fresh()
    seen["no daemon"] = command(env, "get_server_list")

    p, up = start(d, env)
    seen["-f"] = {"pid file holds its pid": up, "pipe files": sorted(x.name for x in (d / "pipe").iterdir())}
    second = subprocess.run([control, "-f"], capture_output=True, text=True, env=env, timeout=30)
    seen["second -f"] = {"rc": second.returncode, "stdout": second.stdout.strip(),
                         "stderr": second.stderr.strip(), "first still runs": alive(p.pid)}
    for text in ("set_default_active_thread_percentage 50", "get_default_active_thread_percentage",
                 "set_default_device_pinned_mem_limit 0 7680M", "get_default_device_pinned_mem_limit 0"):
        seen[text] = command(env, text)

    c = subprocess.Popen(client_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True)
    started.append(c)
    seen["client bound"] = bool(c.stdout.readline())
    before = logs(d)
    q = subprocess.Popen([control], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    started.append(q)
    q.stdin.write("quit\n")
    q.stdin.close()
    # The daemon says it will not shut down (the real one within 3 s); on a
    # busy machine a stand-in may take longer to say it: its word is waited
    # for (10 s at most), then what runs is looked at.
    time.sleep(3)
    wait(lambda: "will not shutdown" in logs(d)[len(before):], 10)
    seen["quit with a client"] = {"quit has returned": q.poll() is not None, "control still runs": alive(p.pid),
                                  "client still runs": c.poll() is None,
                                  "log": [l.split("] ", 1)[-1] for l in logs(d)[len(before):].strip().splitlines()]}
    c.send_signal(signal.SIGTERM)
    c.wait(timeout=30)
    seen["after the client ends"] = {"quit returns within 10 s": wait(lambda: q.poll() is not None, 10),
                                     "quit's status": q.returncode,
                                     "quit's output": (q.stdout.read() + q.stderr.read()).strip()
                                     if q.returncode is not None else None,
                                     "control ends within 10 s": wait(lambda: p.poll() is not None, 10),
                                     "pipe files after": sorted(x.name for x in (d / "pipe").iterdir()),
                                     "log since quit": [l.split("] ", 1)[-1] for l in
                                                        logs(d)[len(before):].strip().splitlines()]}

    d, env = fresh()
    p, up = start(d, env)
    q = command(env, "quit")
    seen["quit with none"] = {**q, "control ends within 10 s": wait(lambda: p.poll() is not None, 10)}

    d, env = fresh()
    p, up = start(d, env)
    p.send_signal(signal.SIGTERM)
    seen["SIGTERM"] = {"up first": up, "ends within 10 s": wait(lambda: p.poll() is not None, 10),
                       "status": p.returncode}


try:
    probe()
finally:
    for p in started:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
print(json.dumps(seen, indent=1, sort_keys=True))
