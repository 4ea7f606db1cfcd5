#!/usr/bin/python3
"""A stand-in for nvidia-cuda-mps-control, which needs a GPU: with -f it is
the control daemon (it writes its pid file in CUDA_MPS_PIPE_DIRECTORY, as
the real one does, records its environment and /dev/shm in
CUDA_MPS_LOG_DIRECTORY/control.log, and runs until told to quit or
signalled); without arguments it is the client, which appends the commands
read on stdin to CUDA_MPS_LOG_DIRECTORY/commands.log and answers quit by
stopping the daemon. A client finding no daemon fails, as the real one does."""
import os
import signal
import sys
import time

pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
logdir = os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")
pidfile = os.path.join(pipe, "nvidia-cuda-mps-control.pid")


def daemon():
    with open(pidfile, "w") as f:
        f.write(str(os.getpid()))
    shm = os.stat("/dev/shm")
    with open(os.path.join(logdir, "control.log"), "a") as f:
        f.write(f"start pid={os.getpid()} CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES')} shm_ino={shm.st_ino}\n")
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    while not stop:
        time.sleep(0.05)
    os.unlink(pidfile)
    with open(os.path.join(logdir, "control.log"), "a") as f:
        f.write("quit\n")


def client():
    try:
        pid = int(open(pidfile).read())
        os.kill(pid, 0)
    except (OSError, ValueError):
        print("Cannot find MPS control daemon process", file=sys.stderr)
        return 1
    text = sys.stdin.read()
    with open(os.path.join(logdir, "commands.log"), "a") as f:
        f.write(text)
    if any(line.strip() == "quit" for line in text.splitlines()):
        os.kill(pid, signal.SIGTERM)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["-f"]:
        daemon()
    else:
        sys.exit(client())
