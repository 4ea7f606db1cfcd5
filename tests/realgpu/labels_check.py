#!/usr/bin/python3
"""GPU Feature Discovery's label rules, computed on their own from pynvml,
sysfs and DMI (not through gpulet), and compared key for key with
`gpulet labels` on the same machine. For real GPUs (docs/real-gpu.md).

usage: tests/realgpu/labels_check.py GPULET_BINARY"""
import re
import subprocess
import sys

import pynvml


def sanitise(s):
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", s).split())


def family(major, minor):
    table = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper",
             10: "blackwell", 12: "blackwell", 13: "rubin"}
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return table.get(major, "undefined")


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def gfd_labels():
    pynvml.nvmlInit()
    n = pynvml.nvmlDeviceGetCount()
    h = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
    driver = text(pynvml.nvmlSystemGetDriverVersion())
    major, minor, *rev = driver.split(".")
    rev = rev[0] if rev else ""
    cuda = pynvml.nvmlSystemGetCudaDriverVersion()
    cmaj, cmin = cuda // 1000, cuda % 1000 // 10
    labels = {
        "nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.runtime.major": str(cmaj), "nvidia.com/cuda.runtime.minor": str(cmin),
        "nvidia.com/cuda.runtime-version.major": str(cmaj),
        "nvidia.com/cuda.runtime-version.minor": str(cmin),
        "nvidia.com/cuda.runtime-version.full": f"{cmaj}.{cmin}",
    }
    try:
        machine = open("/sys/class/dmi/id/product_name").read().strip()
    except OSError:
        machine = "unknown"
    labels["nvidia.com/gpu.machine"] = machine.replace(" ", "-")
    capable = False
    for d in h:
        try:
            pynvml.nvmlDeviceGetMigMode(d)
            capable = True
        except pynvml.NVMLError:
            pass
    labels["nvidia.com/mig.capable"] = str(capable).lower()
    labels["nvidia.com/mps.capable"] = "false"
    d = h[0]
    ccmaj, ccmin = pynvml.nvmlDeviceGetCudaComputeCapability(d)
    labels.update({
        "nvidia.com/gpu.product": sanitise(text(pynvml.nvmlDeviceGetName(d))),
        "nvidia.com/gpu.count": str(n), "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": str(pynvml.nvmlDeviceGetMemoryInfo(d).total // 2**20),
        "nvidia.com/gpu.family": family(ccmaj, ccmin),
        "nvidia.com/gpu.compute.major": str(ccmaj), "nvidia.com/gpu.compute.minor": str(ccmin),
    })
    classes = set()
    for x in h:
        bus = text(pynvml.nvmlDeviceGetPciInfo(x).busId).lower()[4:]  # 0000:xx:yy.z
        classes.add(open(f"/sys/bus/pci/devices/{bus}/class").read().strip())
    mode = {"0x030000": "graphics", "0x030200": "compute"}
    labels["nvidia.com/gpu.mode"] = mode.get(classes.pop(), "unknown") if len(classes) == 1 \
        else "unknown"
    return labels


def main():
    want = gfd_labels()
    out = subprocess.run([sys.argv[1], "labels"], capture_output=True, text=True, check=True)
    got = dict(line.split("=", 1) for line in out.stdout.splitlines())
    print("key | GFD's rules | gpulet")
    for k in sorted(set(want) | set(got)):
        mark = "" if want.get(k) == got.get(k) else "  <-- differs"
        print(f"{k} | {want.get(k, '-')} | {got.get(k, '-')}{mark}")
    same = [k for k in want if want[k] == got.get(k)]
    print(f"{len(same)} of GFD's {len(want)} labels identical; gpulet adds "
          f"{len(set(got) - set(want))}")


if __name__ == "__main__":
    main()
