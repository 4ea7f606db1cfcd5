#!/usr/bin/env bash
# The whole test suite, as CI runs it: unit and integration tests under
# ASan+UBSan, valgrind on the plain build, the glibc-only link check, and a
# short fuzz run of each parser.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

cmake -S . -B build-asan -G Ninja -DGPULET_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j "$jobs"
(cd build-asan && ctest --output-on-failure -j "$jobs" -L unit)
# The integration tests (also ctest's "integration" entry) run here directly,
# so pytest's own report shows each case.
GPULET_SOURCE=$PWD GPULET_SANITIZE=ON GPULET_BIN=build-asan/gpulet \
    GPULET_SIM_LIB=build-asan/libgpulet-nvml-sim.so \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration | tee build-asan/pytest.log

cmake -S . -B build -G Ninja >/dev/null
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure -L valgrind -j "$jobs")

# The shipped binary must run on any glibc host: nothing but libc may be dynamic.
extra=$(readelf -d build/gpulet | grep NEEDED | grep -v 'libc.so.6' || true)
if [ -n "$extra" ]; then
    echo "build/gpulet links more than glibc dynamically:" >&2
    echo "$extra" >&2
    exit 1
fi
newest=$(objdump -T build/gpulet build/libgpulet-nvml-sim.so | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)
if [ "$(printf '%s\n' "$newest" GLIBC_2.34 | sort -V | tail -1)" != GLIBC_2.34 ]; then
    echo "build/gpulet needs $newest; GPU nodes may have only glibc 2.34" >&2
    exit 1
fi
echo "build/gpulet: only glibc is dynamic, and at most $newest"

# A fixed seed keeps this short run repeatable; long runs (fuzz/run.sh
# without GPULET_FUZZ_SEED) are where new inputs get explored.
GPULET_FUZZ_SEED=${GPULET_FUZZ_SEED:-1} fuzz/run.sh "${GPULET_FUZZ_SECONDS:-15}"

# One plain closing line: cmocka cases, pytest cases, valgrind runs.
unit=$(for t in build-asan/tests/test_*; do "$t" 2>&1; done | grep -c '^\[       OK \]')
py=$(tail -1 build-asan/pytest.log | grep -o '^[0-9]* passed' | grep -o '[0-9]*')
vg=$(cd build && ctest -N -L valgrind | grep -c 'Test *#')
echo "$((unit + py + vg)) passed, 0 failed"
