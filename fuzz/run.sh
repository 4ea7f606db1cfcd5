#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang-14 (CMake, -DGPULET_FUZZ=ON) and
# runs each for SECONDS (default 30) on a copy of its seed corpus, as many
# at once as there are cores (GPULET_FUZZ_JOBS).
# GPULET_FUZZ_SEED fixes libFuzzer's seed, so that a run can be repeated
# (the test suite uses 1); unset, each run explores afresh.
# Usage: fuzz/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
seed=${GPULET_FUZZ_SEED:-0}
out=build-fuzz
# Every fuzz/fuzz_<name>.c is a harness (CMake builds each).
targets=()
for f in fuzz/fuzz_*.c; do
    name=${f#fuzz/fuzz_}
    targets+=("${name%.c}")
done
CC=clang-14 cmake -S . -B "$out" -G Ninja -DGPULET_FUZZ=ON -DGPULET_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$out" --target "${targets[@]/#/fuzz_}" nvml_sim >"$out/build.log" 2>&1 ||
    { tail -n 30 "$out/build.log" >&2; echo "fuzz: the harnesses did not build" >&2; exit 1; }
export GPULET_SIM_LIB=$PWD/$out/libgpulet-nvml-sim.so

# fuzz_one TARGET: runs one harness on its own core; what it found goes to
# $out/fuzz-TARGET.result (and .err), read back in order once all are done.
fuzz_one() {
    local target=$1 work="$out/corpus-$1" log="$out/fuzz-$1.log" result="$out/fuzz-$1.result"
    mkdir -p "$work"
    cp -n fuzz/corpus/$target/* "$work/" 2>/dev/null || true
    # libFuzzer exits non-zero and writes crash-*/leak-*/timeout-* on a finding.
    if ! "$out/fuzz_$target" -max_total_time="$secs" -max_len=4096 -timeout=5 -seed="$seed" \
            -artifact_prefix="$out/" "$work" > "$log" 2>&1; then
        { tail -40 "$log"
          echo "fuzz/run.sh: $target found a problem; see $out/crash-* and $log"; } > "$out/fuzz-$target.err"
        echo "fuzz $target: FAILED" > "$result"
        return 0
    fi
    { grep -E '^Done [0-9]+ runs' "$log" || true; echo "fuzz $target: ok"; } > "$result"
}

# One harness per core: each still gets its SECONDS, the whole run less.
jobs=${GPULET_FUZZ_JOBS:-$(nproc)}
running=0
for target in "${targets[@]}"; do
    rm -f "$out/fuzz-$target.result" "$out/fuzz-$target.err"
    fuzz_one "$target" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
done
wait

failed=0
for target in "${targets[@]}"; do
    echo "fuzzing $target for ${secs}s"
    [ ! -f "$out/fuzz-$target.err" ] || cat "$out/fuzz-$target.err" >&2
    if [ -f "$out/fuzz-$target.result" ]; then
        cat "$out/fuzz-$target.result"
    else
        echo "fuzz $target: FAILED"
    fi
    grep -q ': ok$' "$out/fuzz-$target.result" 2>/dev/null || failed=1
done
exit $failed
