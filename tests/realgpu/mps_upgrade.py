"""What an upgrade, a crash and a reload of gpulet do to a running MPS job,
on a real GPU (issue 38): gpulet runs the driver's nvidia-cuda-mps-control
for a 2-replica MPS resource; a client started with its Allocate response
(mps_ticker.py) works every 200 ms through gpulet SIGTERM then start,
SIGKILL then start, and SIGHUP with the config unchanged. The daemon must
be the same process throughout (adopted, never started twice) and the
client must never fail. Never changes the GPU's settings; the daemon this
starts is quit at the end. usage: mps_upgrade.py GPULET"""
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from kubelet import FakeKubelet, load_stubs  # noqa: E402

gpulet = sys.argv[1]
here = Path(__file__).resolve().parent
ok = True


def check(what, cond, detail=""):
    global ok
    ok &= bool(cond)
    print(f"{'PASS' if cond else 'FAIL'}  {what}  {detail}", flush=True)


def controls():
    """The control daemons: nvidia-cuda-mps-control processes that run on
    (the commands gpulet sends are short-lived clients of the same name)."""
    out = subprocess.run(["pgrep", "-a", "-x", "nvidia-cuda-mps"], capture_output=True,
                         text=True).stdout  # the name, cut to 15 characters
    return sorted(int(l.split()[0]) for l in out.splitlines() if l.rstrip().endswith(" -f"))


def mps_processes():
    return subprocess.run(["pgrep", "-a", "-x", "nvidia-cuda-mps"], capture_output=True,
                          text=True).stdout.strip().splitlines()


def client(resp, name):
    """As the container runtime starts it: the response's mounts in a private
    mount namespace, its environment."""
    binds = [f"mkdir -p {shlex.quote(m.container_path)} && mount --bind "
             f"{shlex.quote(m.host_path)} {shlex.quote(m.container_path)}" for m in resp.mounts]
    # The pure-Python protobuf (the old stubs need it) may give a map as entries.
    envs = resp.envs.items() if hasattr(resp.envs, "items") else [(e.key, e.value) for e in resp.envs]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in envs)
    script = " && ".join(binds + [f"exec env {env} python3 {here / 'mps_ticker.py'} {name}"])
    return subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_log(path, text, count=1, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Path(path).read_text().count(text) >= count:
            return True
        time.sleep(0.05)
    return False


with tempfile.TemporaryDirectory() as tmp:
  agent = job = None
  try:
      check("no MPS daemon before", not mps_processes(), str(mps_processes()))
      pb, pbg = load_stubs(Path(tmp) / "stubs")
      k = FakeKubelet(Path(tmp) / "kubelet", pb, pbg)
      k.start()
      cfg = Path(tmp) / "config.yaml"
      cfg.write_text("version: v1\nsharing:\n  mps:\n    resources:\n"
                     "    - {name: nvidia.com/gpu, replicas: 2}\n")
      root = Path(tmp) / "mps"
      n = [0]

      def start():
          n[0] += 1
          log = f"{tmp}/agent{n[0]}.log"
          p = subprocess.Popen([gpulet, "agent", "--kubelet-root", str(k.root), "--no-metrics",
                                "--labels", "none", "--status-socket", f"{tmp}/status.sock",
                                "--config-file", str(cfg), "--mps-root", str(root)],
                               stderr=open(log, "w"))
          return p, log

      agent, log = start()
      k.wait_registrations(1, timeout=30)
      channel, stub = k.plugin()
      stream = stub.ListAndWatch(pb.Empty())
      devs = next(stream).devices
      while any(d.health != "Healthy" for d in devs):
          devs = next(stream).devices
      resp = stub.Allocate(pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
          devices_ids=[devs[0].ID])])).container_responses[0]
      stream.cancel()
      channel.close()
      daemon = controls()
      check("one control daemon", len(daemon) == 1, str(mps_processes()))
      job = client(resp, "job")
      time.sleep(8)
      check("the job runs", job.poll() is None)

      def survived(what, t0):
          alive = job.poll() is None
          check(f"{what}: the job kept running", alive,
                "" if alive else job.stdout.read())
          check(f"{what}: the same control daemon", controls() == daemon,
                f"{controls()} vs {daemon}")

      # 1. An upgrade: SIGTERM, 5 s without gpulet, a new gpulet.
      t0 = time.monotonic()
      agent.send_signal(signal.SIGTERM)
      agent.wait(timeout=30)
      print(open(log).read().splitlines()[-3:])
      time.sleep(5)
      agent, log = start()
      check("SIGTERM then start: adopted", wait_log(log, "is up, adopted"),
            open(log).read()[-400:])
      print(f"new gpulet: the daemon adopted {time.monotonic() - t0 - 5:.2f} s after the old one "
            "was told to stop (5 s of it without gpulet)")
      time.sleep(5)
      survived("SIGTERM then start", t0)
      # 2. A crash: SIGKILL, a new gpulet at once.
      agent.send_signal(signal.SIGKILL)
      agent.wait(timeout=30)
      time.sleep(3)
      agent, log = start()
      check("SIGKILL then start: adopted", wait_log(log, "is up, adopted"), open(log).read()[-400:])
      time.sleep(5)
      survived("SIGKILL then start", t0)
      # 3. A reload with the config unchanged.
      agent.send_signal(signal.SIGHUP)
      check("SIGHUP: adopted again", wait_log(log, "is up, adopted", count=2), open(log).read()[-400:])
      time.sleep(8)
      survived("SIGHUP unchanged", t0)
      job.send_signal(signal.SIGTERM)
      out = job.communicate(timeout=60)[0]
      print(out)
      check("the job ended cleanly, never failing", job.returncode == 0 and "FAILED" not in out)
      env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(root / "nvidia.com/gpu/pipe"),
                 CUDA_MPS_LOG_DIRECTORY=str(root / "nvidia.com/gpu/log"))
      control = subprocess.run(["sh", "-c", "command -v nvidia-cuda-mps-control || "
                                "ls /usr/local/nvidia/bin/nvidia-cuda-mps-control"],
                               capture_output=True, text=True).stdout.split()[0]
      servers = subprocess.run([control], input="get_server_list\n", env=env, capture_output=True,
                               text=True, timeout=30)
      print(f"get_server_list once the job ended: {servers.stdout.strip()!r}")
      agent.send_signal(signal.SIGTERM)
      agent.wait(timeout=30)
      check("gpulet's stop leaves the daemon", controls() == daemon, str(mps_processes()))
      subprocess.run([control], input="quit\n", env=env, capture_output=True, text=True, timeout=30)
      deadline = time.monotonic() + 20
      while mps_processes() and time.monotonic() < deadline:
          time.sleep(0.2)
      check("no MPS process after quit", not mps_processes(), str(mps_processes()))
      for p in controls():
          os.kill(p, signal.SIGKILL)
      for i in range(1, n[0] + 1):
          print(f"--- agent{i}.log (MPS lines)")
          print("\n".join(l for l in open(f"{tmp}/agent{i}.log").read().splitlines() if "MPS" in l))
      k.stop()
  finally:
    for p in (job, agent):
        if p is not None and p.poll() is None:
            p.kill()
print("mps_upgrade: all checks passed" if ok else "mps_upgrade: FAILED")
sys.exit(0 if ok else 1)
