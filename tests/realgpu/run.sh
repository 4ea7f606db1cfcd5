#!/usr/bin/env bash
# Everything checked on a real GPU machine in one go (see docs/real-gpu.md).
# Needs the carried build/gpulet and build/libgpulet-nvml-sim.so; writes to $OUT.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpulet-real}
mkdir -p "$OUT" build/sim
ln -sf ../libgpulet-nvml-sim.so build/sim/libnvidia-ml.so.1
log() { echo; echo "=== $*"; }
log "machine"; date -u; nvidia-smi --version; uname -r; ldd --version | head -1
log "gpulet list (real NVML)"
build/gpulet list; build/gpulet list -o topology
build/gpulet list -o json > "$OUT/list.json"; cat "$OUT/list.json"
nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,driver_version,compute_cap,mig.mode.current \
    --format=csv,noheader,nounits > "$OUT/smi.csv"
nvidia-smi topo -m > "$OUT/topo.txt"; cat "$OUT/topo.txt"
nvidia-smi -q > "$OUT/smi-q.txt"
grep -E 'Minor Number|Bus Id|Product Name|GPU UUID|Total  *:' "$OUT/smi-q.txt" | head -8
log "compare with nvidia-smi"
python3 tests/realgpu/compare_list.py "$OUT/list.json" "$OUT/smi.csv" "$OUT/topo.txt" "$OUT/smi-q.txt"
log "ABI layout: ours vs NVIDIA's nvml.h"
H=$(dirname "$(find / -name nvml.h -path '*cuda*' -not -path '/proc/*' 2>/dev/null | head -1)")
gcc -std=c17 -Isrc -o /tmp/abi_ours tests/abi/abi_layout.c && /tmp/abi_ours > "$OUT/abi-ours.txt"
gcc -std=gnu17 -w -DUSE_NVIDIA_HEADER -I"$H" -o /tmp/abi_real tests/abi/abi_layout.c && /tmp/abi_real > "$OUT/abi-real.txt"
diff "$OUT/abi-ours.txt" "$OUT/abi-real.txt" && echo "ABI layouts identical ($(wc -l < "$OUT/abi-ours.txt") checks, header $H)"
log "misuse: real NVML vs simulator"
REAL=$(python3 -c 'import ctypes,ctypes.util; print("libnvidia-ml.so.1")')
GPULET_SIM_CONTROL=off GPULET_SIM_SCENARIO=hgx-h200 python3 tests/realgpu/nvml_misuse.py libnvidia-ml.so.1 "$PWD/build/libgpulet-nvml-sim.so"
log "pynvml against the simulator"
GPULET_SIM_CONTROL=off GPULET_SIM_SCENARIO=dgx-h100 LD_LIBRARY_PATH=$PWD/build/sim python3 tests/realgpu/pynvml_sweep.py
log "NVML call timing (inventory sequence)"
python3 tests/realgpu/nvml_timing.py
log "agent on the real GPU for 2 s"
timeout -s INT 2 build/gpulet agent --kubelet-root "$OUT/kubelet" --status-socket "$OUT/status.sock"; echo "agent exit $?"
log "device plugin on the real GPU (grpcio kubelet)"
GPULET_STUBS=$PWD/build/stubs python3 tests/realgpu/plugin_check.py build/gpulet
log "benchmark: bench/startup.py --real"
python3 bench/startup.py --real --runs 30
python3 - <<'PY'
import subprocess, time, statistics
t = []
for _ in range(10):
    s = time.perf_counter(); subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv"], capture_output=True, check=True); t.append((time.perf_counter() - s) * 1000)
print(f"nvidia-smi --query-gpu: median {statistics.median(t):.1f} ms")
PY
log "DRA driver: the slice from real NVML, a claim shared through MPS (stubs: dra_pb2.py in build/stubs)"
PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python python3 tests/realgpu/dra_check.py build/gpulet build/stubs
