"""Issue 20 on a real GPU: the agent with a lane per GPU against the one
before lanes, in the same lease: CPU per second while sampling at 1 s
(every thread's schedstat), threads, RSS, the round's duration, the DCGM
series and their freshness; doctor's per-GPU reads; no GPU called hung.
(A hang cannot be made on a card whose settings must not change: the
simulator shows that one.)

usage: faults_check.py NEW_GPULET BASE_GPULET OUTDIR [SECONDS] [RUNS]"""
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

NEW, BASE, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
SECONDS = float(sys.argv[4]) if len(sys.argv) > 4 else 20
RUNS = int(sys.argv[5]) if len(sys.argv) > 5 else 3
ok = True


def check(what, cond, detail=""):
    global ok
    ok &= bool(cond)
    print(f"{'PASS' if cond else 'FAIL'}  {what}  {detail}", flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cpu_ns(pid):
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
        except OSError:
            pass
    return total


def scrape(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def one(binary, tmp):
    port = free_port()
    p = subprocess.Popen([binary, "agent", "--kubelet-root", f"{tmp}/k", "--status-socket",
                          f"{tmp}/s.sock", "--metrics-listen", f"127.0.0.1:{port}"],
                         stdout=open(f"{tmp}/agent.log", "w"), stderr=subprocess.STDOUT)
    try:
        for _ in range(200):
            try:
                scrape(port)
                break
            except OSError:
                time.sleep(0.05)
        time.sleep(3)
        c0, t0 = cpu_ns(p.pid), time.monotonic()
        time.sleep(SECONDS)
        cpu = (cpu_ns(p.pid) - c0) / 1e9 / (time.monotonic() - t0) * 100
        body = scrape(port)
        status = open(f"/proc/{p.pid}/status").read()
        health = subprocess.run([binary, "health", "--status-socket", f"{tmp}/s.sock"],
                                capture_output=True, text=True).stdout
        return {"cpu": cpu, "body": body, "health": health,
                "rss": int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024,
                "threads": int(re.search(r"Threads:\s+(\d+)", status).group(1)),
                "round_ms": float(re.search(r"^gpulet_sample_duration_seconds (\S+)$", body,
                                            re.M).group(1)) * 1000}
    finally:
        p.terminate()
        p.wait()


results = {}
for name, binary in (("before lanes", BASE), ("lanes", NEW)):
    runs = []
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(one(binary, tmp))
            log = open(f"{tmp}/agent.log").read()
    results[name] = runs
    print(f"{name}: CPU % of a core {[round(r['cpu'], 3) for r in runs]} median "
          f"{statistics.median(r['cpu'] for r in runs):.3f}; round ms "
          f"{statistics.median(r['round_ms'] for r in runs):.3f}; RSS MiB {runs[-1]['rss']:.2f}; "
          f"threads {runs[-1]['threads']}")
new = results["lanes"][-1]
gpus = len(new["health"].splitlines()) - 1  # a header, then a row per GPU
check("every GPU healthy, none hung", gpus and new["health"].count(" Healthy ") == gpus, new["health"])
temps = re.findall(r'^DCGM_FI_DEV_GPU_TEMP\{gpu="(\d+)"', new["body"], re.M)
check("a temperature series per GPU", len(temps) == gpus, temps)
ages = [time.time() - float(v) for v in
        re.findall(r"^gpulet_gpu_last_sample_timestamp_seconds\{.*\} (\S+)$", new["body"], re.M)]
check("each GPU read within the last two intervals at the scrape",
      ages and max(ages) < 2 + 1, [round(a, 2) for a in ages])
check("no XID gauge lost", len(re.findall(r"^DCGM_FI_DEV_XID_ERRORS\{", new["body"], re.M)) == gpus)
d = subprocess.run([NEW, "doctor", "-o", "json"], capture_output=True, text=True)
checks = {c["id"]: c for c in json.loads(d.stdout)["checks"]}
print("doctor nvml:", checks["nvml"]["status"], checks["nvml"]["message"])
check("doctor reads each GPU on its lane", checks["nvml"]["status"] == "PASS" and
      "the slowest in" in checks["nvml"]["message"])
with open(f"{OUT}/faults.json", "w") as f:
    json.dump({k: [{x: r[x] for x in ("cpu", "rss", "threads", "round_ms")} for r in v]
               for k, v in results.items()} | {"doctor_nvml": checks["nvml"]["message"]}, f, indent=1)
print("ALL PASS" if ok else "SOME FAILED")
sys.exit(0 if ok else 1)
