"""bench/chaos.py, briefly: faults, kubelet restarts and SIGKILLs while a
kubelet stand-in allocates; no Allocate for a bad device, whole files, the
condition in step, no thread growth (docs/benchmarks.md has a long run)."""
import json
import os
import subprocess
import sys

from conftest import GPULET, SIM_LIB, SOURCE


def test_chaos_briefly():
    p = subprocess.run([sys.executable, str(SOURCE / "bench" / "chaos.py"), "--seconds", "25",
                        "--json", "--gpulet", GPULET, "--sim-lib", SIM_LIB],
                       capture_output=True, text=True, timeout=180,
                       env=dict(os.environ, GPULET_STUBS=os.environ.get("GPULET_STUBS", "")))
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert p.returncode == 0 and not summary["failures"], (summary["failures"], p.stderr[-2000:])
    assert summary["gpulet_kills"] >= 1 and summary["kubelet_restarts"] >= 1
    assert summary["refused_unknown"] > 0 and summary["allocations"] > 100
    # Most Allocates are of healthy devices, and are answered (a build that
    # refused them all would pass every other check).
    assert summary["allocated_healthy"] > summary["allocations"] / 3, summary
