#!/usr/bin/python3
"""Chaos, measured (docs/benchmarks.md, "Chaos"). For --seconds, on the
simulated dgx-h100:
- a kubelet stand-in (grpcio) allocates continuously from what
  ListAndWatch calls healthy, and now and then on purpose a device it
  knows is unhealthy, or one that does not exist;
- the simulator gets XIDs (fatal and not), ECC errors, hangs, losses and
  recoveries at random;
- the kubelet restarts now and then, and gpulet is killed with SIGKILL at
  random moments and started again;
- a reader keeps parsing the CDI spec and the NFD feature file gpulet
  writes (atomically: a torn file is a failure);
- a stand-in API server takes the Node condition GPUUnhealthy.

It checks and counts: every Allocate of devices ListAndWatch calls healthy
answered with exactly those GPUs, or refused only where their health or
the plugin changed meanwhile; no Allocate answered for an unknown device or
one unhealthy before and after it; after every restart, the plugin socket is
new and registered, and the condition comes to agree with `gpulet health`
in a quiet moment (10 s at most); RSS and threads per agent life. Exits 1 on any
failure; prints a summary (JSON with --json).

usage: bench/chaos.py [--seconds 180] [--gpulet build/gpulet] [--seed 1] [--json]"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from fakeapi import FakeAPI  # noqa: E402
from kubelet import FakeKubelet, load_stubs  # noqa: E402

FATAL = ["79", "94", "48", "74", "119"]
HARMLESS = ["13", "31", "43"]


class Chaos:
    def __init__(self, opts, tmp):
        self.o, self.tmp = opts, Path(tmp)
        self.rng = random.Random(opts.seed)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.failures = []
        self.count = dict(allocations=0, allocated_healthy=0, refused_healthy_in_a_change=0,
                          refused_unhealthy=0, refused_unknown=0, faults=0,
                          kubelet_restarts=0, gpulet_kills=0, file_reads=0, condition_checks=0)
        self.health = {}                 # device ID -> "Healthy"/"Unhealthy", as ListAndWatch said
        self.law_seq = 0                 # ListAndWatch updates seen (and stream ends)
        self.changed = {}                # device ID -> law_seq of its last change
        self.proc = None
        self.lives = []                  # per agent life: rss and thread samples
        self.quiet = threading.Event()   # set: inject no faults
        self.env = dict(os.environ, GPULET_SIM_CONTROL=str(self.tmp / "sim.sock"),
                        GPULET_SIM_LIB=opts.sim_lib)

    def fail(self, what):
        with self.lock:
            self.failures.append(what)
        print("FAIL:", what, flush=True)

    # --- gpulet ----------------------------------------------------------------------
    def start_gpulet(self):
        t = self.tmp
        args = [self.o.gpulet, "agent", "--simulate", "dgx-h100", "--kubelet-root", str(t / "kubelet"),
                "--status-socket", str(t / "status.sock"), "--no-metrics", "--labels", "file",
                "--output-file", str(t / "features.d" / "gfd"), "--kubeconfig", str(t / "kubeconfig"),
                "--node-name", "n1", "--device-list-strategy", "cdi-cri,envvar",
                "--nvidia-driver-root", str(t / "driver"), "--cdi-spec-dir", str(t / "cdi"),
                "--hang-seconds", "2", "--health-probe-ms", "250", "--xid-recovery-seconds", "3",
                "--log-level", "warn"]
        before = len(self.kubelet.registrations)
        self.log = open(t / "gpulet.log", "a")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        self.lives.append({"pid": self.proc.pid, "rss": [], "threads": []})
        self.kubelet.wait_registrations(before + 1, timeout=20)
        sock = t / "kubelet" / "device-plugins" / "gpulet-nvidia-gpu.sock"
        if not sock.is_socket():
            self.fail("registered, but the plugin socket is not there")

    def sample(self):
        life = self.lives[-1]
        try:
            status = Path(f"/proc/{life['pid']}/status").read_text()
            life["rss"].append(int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024)
            life["threads"].append(len(os.listdir(f"/proc/{life['pid']}/task")))
        except (OSError, AttributeError):
            pass

    # --- the kubelet's side -------------------------------------------------------------
    def watch(self):
        """Follows ListAndWatch of whatever plugin is registered now."""
        while not self.stop.is_set():
            try:
                channel, stub = self.kubelet.plugin()
                for update in stub.ListAndWatch(self.kubelet.pb.Empty(), timeout=5):
                    with self.lock:
                        self.law_seq += 1
                        for d in update.devices:
                            if self.health.get(d.ID) != d.health:
                                self.changed[d.ID] = self.law_seq
                        self.health = {d.ID: d.health for d in update.devices}
                    if self.stop.is_set():
                        break
                channel.close()
            except Exception:  # the plugin or kubelet went: follow the next one
                time.sleep(0.05)
            with self.lock:  # what the last plugin said is not the next one's
                self.law_seq += 1
                self.changed = {d: self.law_seq for d in self.health}
                self.health = {}

    def allocate(self):
        pb = self.kubelet.pb
        while not self.stop.is_set():
            time.sleep(0.01)
            with self.lock:
                health, seq = dict(self.health), self.law_seq
            if not health:
                continue
            with self.lock:
                restarts = self.count["gpulet_kills"] + self.count["kubelet_restarts"]
            roll = self.rng.random()
            bad = [d for d, h in health.items() if h != "Healthy"]
            if roll < 0.1:
                ids, kind = ["GPU-00000000-0000-0000-0000-000000000000"], "unknown"
            elif roll < 0.3 and bad:
                ids, kind = [self.rng.choice(bad)], "unhealthy"
            else:
                good = [d for d, h in health.items() if h == "Healthy"]
                if not good:
                    continue
                ids, kind = self.rng.sample(good, min(len(good), self.rng.choice([1, 2]))), "healthy"
            answer, detail = None, ""
            try:
                channel, stub = self.kubelet.plugin()
                answer = stub.Allocate(pb.AllocateRequest(container_requests=[
                    pb.ContainerAllocateRequest(devices_ids=ids)]), timeout=5)
                ok = True
            except Exception as e:
                ok = False
                detail = str(e)
            finally:
                channel.close()
            if (kind == "unhealthy" and ok) or (kind == "healthy" and not ok):
                time.sleep(0.3)  # an update (or a stream's end) that crossed the Allocate is in now
            with self.lock:
                self.count["allocations"] += 1
                still_bad = kind == "unhealthy" and self.health.get(ids[0]) not in (None, "Healthy")
                changed = self.changed.get(ids[0], 0) > seq
                # A healthy device's refusal is right only where its health,
                # or the plugin (a restart), changed meanwhile.
                any_changed = (any(self.changed.get(d, 0) > seq for d in ids) or self.law_seq > seq or
                               self.count["gpulet_kills"] + self.count["kubelet_restarts"] > restarts)
                still_good = all(self.health.get(d) == "Healthy" for d in ids)
            if kind == "healthy":
                self.check_healthy(ids, answer, detail, any_changed or not still_good)
            if kind == "unknown":
                if ok:
                    self.fail(f"Allocate answered for an unknown device {ids}")
                else:
                    self.count["refused_unknown"] += 1
            elif kind == "unhealthy" and ok and still_bad and not changed:
                self.fail(f"Allocate answered for {ids[0]}, unhealthy before and after")
            elif kind == "unhealthy" and not ok:
                self.count["refused_unhealthy"] += 1
                if "is unhealthy" not in detail and "UNAVAILABLE" not in detail:
                    self.fail(f"Allocate of an unhealthy device refused oddly: {detail[:200]}")

    def check_healthy(self, ids, answer, detail, moved):
        """An Allocate of devices ListAndWatch called healthy: answered with
        exactly those GPUs (the envvar strategy's list and the CDI names),
        or refused only where something changed meanwhile."""
        if answer is None:
            if moved or "UNAVAILABLE" in detail:
                with self.lock:
                    self.count["refused_healthy_in_a_change"] += 1
            else:
                self.fail(f"Allocate of healthy {ids} refused: {detail[:200]}")
            return
        r = answer.container_responses[0]
        listed = set(r.envs.get("NVIDIA_VISIBLE_DEVICES", "").split(","))
        cdi = {d.name.split("=", 1)[-1] for d in r.cdi_devices}
        if listed != set(ids) or cdi != set(ids):
            self.fail(f"Allocate of {ids} answered NVIDIA_VISIBLE_DEVICES={sorted(listed)}, "
                      f"CDI devices {sorted(cdi)}")
            return
        with self.lock:
            self.count["allocated_healthy"] += 1

    # --- the world's side ---------------------------------------------------------------
    def sim(self, *args):
        return subprocess.run([self.o.gpulet, "sim", *args], capture_output=True, text=True,
                              env=self.env, timeout=5).returncode == 0

    def inject(self):
        while not self.stop.is_set():
            time.sleep(self.rng.uniform(0.1, 0.6))
            if self.quiet.is_set():
                continue
            gpu = str(self.rng.randrange(8))
            what = self.rng.choices(["xid", "harmless", "ecc", "hang", "lose", "recover"],
                                    weights=[3, 2, 1, 1, 1, 5])[0]
            args = {"xid": ["xid", gpu, self.rng.choice(FATAL)], "harmless": ["xid", gpu, self.rng.choice(HARMLESS)],
                    "ecc": ["ecc", gpu], "hang": ["hang", gpu], "lose": ["lose", gpu],
                    "recover": ["recover", gpu]}[what]
            if self.sim(*args):
                self.count["faults"] += 1

    def read_files(self):
        """The CDI spec and the feature file are always whole."""
        spec, nfd = self.tmp / "cdi" / "nvidia.com-gpu.json", self.tmp / "features.d" / "gfd"
        while not self.stop.is_set():
            for path in (spec, nfd):
                try:
                    text = path.read_text()
                except OSError:
                    continue
                self.count["file_reads"] += 1
                if path == spec:
                    try:
                        if json.loads(text)["kind"] != "nvidia.com/gpu":
                            self.fail("the CDI spec names another kind")
                    except (ValueError, KeyError):
                        self.fail(f"the CDI spec is not whole ({len(text)} bytes)")
                elif not text.endswith("\n") or any("=" not in l for l in text.splitlines()):
                    self.fail(f"the feature file is not whole ({len(text)} bytes)")
            time.sleep(0.002)

    def check_condition(self):
        """In a quiet moment: the condition comes to say what `gpulet health`
        says. Both are read again until they agree: a fault injected just
        before (a hang takes its 2 s to show) may reach one first, and on a
        busy machine the condition's write takes its time. What fails is a
        condition that stays wrong (10 s; a missed change is never written
        again)."""
        self.quiet.set()
        time.sleep(2.5)
        deadline = time.monotonic() + 10.0
        while True:
            out = subprocess.run([self.o.gpulet, "health", "--status-socket", str(self.tmp / "status.sock")],
                                 capture_output=True, text=True).stdout
            unhealthy = sum(1 for l in out.splitlines() if " Unhealthy " in l)
            c = self.api.condition()
            want = "True" if unhealthy else "False"
            if c and c["status"] == want and (not unhealthy or c["message"].startswith(f"{unhealthy} of 8")):
                break
            if time.monotonic() > deadline:
                self.log.flush()
                said = [l for l in (self.tmp / "gpulet.log").read_text().splitlines()
                        if "fault report" in l or "Node" in l or "healthy" in l]
                self.fail(f"condition {c} while gpulet health says {unhealthy} unhealthy; "
                          f"gpulet health: {out!r}; the agent's log: {said[-25:]}")
                break
            time.sleep(0.1)
        self.count["condition_checks"] += 1
        self.quiet.clear()

    def run(self):
        pb, pb_grpc = load_stubs(self.tmp / "stubs")
        self.kubelet = FakeKubelet(self.tmp / "kubelet", pb, pb_grpc)
        self.kubelet.start()
        self.api = FakeAPI(node="n1")
        self.api.kubeconfig(self.tmp / "kubeconfig")
        subprocess.run([self.o.gpulet, "sim", "driver-root", str(self.tmp / "driver")], check=True)
        self.start_gpulet()
        threads = [threading.Thread(target=f, daemon=True)
                   for f in (self.watch, self.allocate, self.inject, self.read_files)]
        for t in threads:
            t.start()
        end = time.monotonic() + self.o.seconds
        next_kubelet = time.monotonic() + self.rng.uniform(8, 15)
        next_kill = time.monotonic() + self.rng.uniform(5, 12)
        next_check = time.monotonic() + 10
        while time.monotonic() < end:
            time.sleep(0.2)
            self.sample()
            now = time.monotonic()
            if now > next_kubelet:
                self.kubelet.restart()
                self.count["kubelet_restarts"] += 1
                before = len(self.kubelet.registrations)
                try:
                    self.kubelet.wait_registrations(before + 1, timeout=10)
                except AssertionError as e:
                    self.fail(f"no registration after a kubelet restart: {e}")
                next_kubelet = now + self.rng.uniform(8, 15)
            if now > next_kill:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait()
                self.count["gpulet_kills"] += 1
                self.start_gpulet()
                self.check_condition()  # right after the restart
                next_kill = time.monotonic() + self.rng.uniform(5, 12)
            if now > next_check:
                self.check_condition()
                next_check = now + 10
        self.stop.set()
        for t in threads:
            t.join(timeout=10)
        self.proc.terminate()
        rc = self.proc.wait(timeout=10)
        if rc != 0:
            self.log.flush()
            tail = (self.tmp / "gpulet.log").read_text()[-1500:]
            self.fail(f"gpulet exited {rc} on SIGTERM; its log ends: {tail}")
        self.kubelet.stop()
        self.api.stop()
        self.log.close()
        text = (self.tmp / "gpulet.log").read_text()
        for mark in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
            if mark in text:
                self.fail(f"the agent's log has {mark}: {text[text.index(mark):][:600]}")

    def summary(self):
        lives = [l for l in self.lives if len(l["rss"]) >= 10]
        def spread(key):
            # Within each life: the last third's max against the first third's max.
            return max((max(l[key][-len(l[key]) // 3:]) - max(l[key][:len(l[key]) // 3])
                        for l in lives), default=0)
        return {"seconds": self.o.seconds, "seed": self.o.seed, **self.count,
                "agent_lives": len(self.lives),
                "rss_mib_max": round(max((max(l["rss"]) for l in lives), default=0), 2),
                "rss_growth_mib": round(spread("rss"), 2),
                "threads_max": max((max(l["threads"]) for l in lives), default=0),
                "threads_growth": spread("threads"),
                "failures": self.failures}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=180)
    ap.add_argument("--gpulet", default=str(ROOT / "build" / "gpulet"))
    ap.add_argument("--sim-lib", default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    o = ap.parse_args()
    o.sim_lib = o.sim_lib or str(Path(o.gpulet).resolve().parent / "libgpulet-nvml-sim.so")
    with tempfile.TemporaryDirectory(prefix="gpulet-chaos-") as tmp:
        c = Chaos(o, tmp)
        try:
            c.run()
        except Exception as e:  # the summary still comes, with the failure in it
            c.fail(f"the run stopped: {type(e).__name__}: {e}")
            c.stop.set()
            if c.proc and c.proc.poll() is None:
                c.proc.kill()
        s = c.summary()
    print(json.dumps(s, indent=None if o.json else 2))
    sys.exit(1 if s["failures"] or s["threads_growth"] > 0 else 0)


if __name__ == "__main__":
    main()
