#!/usr/bin/python3
"""A stand-in for nvidia-cuda-mps-control, which needs a GPU, that keeps the
simulator's (`gpulet sim driver-root`) protocol, so that its client stand-in
`gpulet-mps-client` works with both: with -f it is the control daemon (it
refuses to start where one runs already, as the real one does; writes its
pid file in CUDA_MPS_PIPE_DIRECTORY, its instance and a heartbeat there;
records its environment and /dev/shm in CUDA_MPS_LOG_DIRECTORY/control.log;
runs until told to quit or signalled); without arguments it is the client,
which appends the commands read on stdin to CUDA_MPS_LOG_DIRECTORY/commands.log
and answers quit as the real one does (tests/realgpu/mps_contract.py's
record): while MPS clients are active it does not return, and the daemon
says its server "will not shutdown"; once they have gone, the daemon ends
and quit returns. A client finding no daemon fails, as the real one does."""
import fcntl
import os
import signal
import sys
import time

pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
logdir = os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")
pidfile = os.path.join(pipe, "nvidia-cuda-mps-control.pid")
instance = os.path.join(pipe, "instance")
heartbeat = os.path.join(pipe, "heartbeat")
clients = os.path.join(pipe, "clients")
lockfile = os.path.join(pipe, "control_lock")


def log(line):
    with open(os.path.join(logdir, "control.log"), "a") as f:
        f.write(line + "\n")


def running():
    """The daemon's pid while one holds the lock (a dead one, even one not
    reaped yet, holds none)."""
    try:
        with open(lockfile, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        pass
    except OSError:
        return None
    try:
        return int(open(pidfile).read())
    except (OSError, ValueError):
        return None


def daemon():
    lock = open(lockfile, "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("An instance of this daemon is already running")
        return 1
    os.makedirs(clients, exist_ok=True)
    with open(pidfile, "w") as f:
        f.write(str(os.getpid()))
    with open(instance, "w") as f:
        f.write(f"{os.getpid()}-{time.time_ns()}\n")
    shm = os.stat("/dev/shm")
    log(f"start pid={os.getpid()} CUDA_VISIBLE_DEVICES="
        f"{os.environ.get('CUDA_VISIBLE_DEVICES')} shm_ino={shm.st_ino}")
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    while not stop:
        open(heartbeat, "w").close()
        time.sleep(0.05)
    for path in (pidfile, instance):
        os.unlink(path)
    log("quit")
    return 0


def active_clients():
    now = time.time()
    try:
        names = os.listdir(clients)
    except OSError:
        return 0
    n = 0
    for name in names:
        try:
            n += now - os.stat(os.path.join(clients, name)).st_mtime <= 5
        except OSError:
            pass
    return n


def client():
    pid = running()
    if not pid:
        print("Cannot find MPS control daemon process", file=sys.stderr)
        return 1
    text = sys.stdin.read()
    with open(os.path.join(logdir, "commands.log"), "a") as f:
        f.write(text)
    threads = os.path.join(pipe, "threads")
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["set_default_active_thread_percentage"] and len(words) == 2:
            with open(threads, "w") as f:
                f.write(words[1])
            print(f"{float(words[1]):.1f}")
        elif words == ["get_default_active_thread_percentage"]:
            print(f"{float(open(threads).read()) if os.path.exists(threads) else 100.0:.1f}")
    if any(line.strip() == "quit" for line in text.splitlines()):
        while running() == pid:  # the daemon asked, not one started after it
            n = active_clients()
            if not n:
                os.kill(pid, signal.SIGTERM)
                time.sleep(0.1)
                continue
            log(f"Server {pid} has {n} active worker threads. Server will not shutdown.")
            time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(daemon() if sys.argv[1:] == ["-f"] else client())
