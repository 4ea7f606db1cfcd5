#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang-14 (CMake, -DGPULET_FUZZ=ON) and
# runs each for SECONDS (default 30) on a copy of its seed corpus.
# GPULET_FUZZ_SEED fixes libFuzzer's seed, so that a run can be repeated
# (the test suite uses 1); unset, each run explores afresh.
# Usage: fuzz/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
seed=${GPULET_FUZZ_SEED:-0}
out=build-fuzz
CC=clang-14 cmake -S . -B "$out" -G Ninja -DGPULET_FUZZ=ON -DGPULET_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$out" --target fuzz_scenario fuzz_control fuzz_config fuzz_plugin fuzz_collectors fuzz_grpc fuzz_procfs fuzz_status \
    fuzz_kubeconfig fuzz_node fuzz_cgroup fuzz_elf fuzz_webconfig fuzz_configmap fuzz_kmsg \
    nvml_sim >/dev/null
export GPULET_SIM_LIB=$PWD/$out/libgpulet-nvml-sim.so
failed=0
for target in scenario control config plugin collectors grpc procfs status kubeconfig node cgroup elf webconfig configmap kmsg; do
    work="$out/corpus-$target"
    mkdir -p "$work"
    cp -n fuzz/corpus/$target/* "$work/" 2>/dev/null || true
    echo "fuzzing $target for ${secs}s"
    # libFuzzer exits non-zero and writes crash-*/leak-*/timeout-* on a finding.
    if ! "$out/fuzz_$target" -max_total_time="$secs" -max_len=4096 -timeout=5 -seed="$seed" \
            -artifact_prefix="$out/" "$work" > "$out/fuzz-$target.log" 2>&1; then
        tail -40 "$out/fuzz-$target.log" >&2
        echo "fuzz/run.sh: $target found a problem; see $out/crash-* and $out/fuzz-$target.log" >&2
        echo "fuzz $target: FAILED"
        failed=1
        continue
    fi
    grep -E '^Done [0-9]+ runs' "$out/fuzz-$target.log" || true
    echo "fuzz $target: ok"
done
exit $failed
