#!/usr/bin/env bash
# The whole test suite, as CI runs it: unit and integration tests under
# ASan+UBSan, and under ThreadSanitizer (the unit tests and the agent's
# threaded paths); on the plain build, valgrind, the tests of memory use, and
# mutants that must die; a Release build, the glibc-only link check, the
# arm64 build with its unit and smoke tests under qemu-user, the image
# index (root only), a short fuzz run of each parser, and the end-to-end
# tests on real Kubernetes 1.36 and 1.32 (root only). Every stage runs even
# when one before it failed; the last line counts what ran: passed, failed,
# skipped. The integration tests run two at a time (pytest-xdist), and the
# end-to-end tests, which mostly wait for their cluster, run beside the
# stages after them (their output comes at the end, in one piece).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test || exit 1
export PATH=$PWD/.tools/bin:$PATH
jobs=$(nproc)
passed=0 failed=0 skipped=0
failures=()

# check NAME COMMAND...: one pass/fail item.
check() {
    local name=$1
    shift
    if "$@"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failures+=("$name")
    fi
}

# count_cmocka LOG CTEST_OUTPUT: adds the cmocka cases of a ctest run; a
# test program that died before cmocka could say so counts as one failure.
count_cmocka() {
    local ok fail skip died
    ok=$(grep -c '^\[       OK \]' "$1")
    skip=$(grep -c '^\[  SKIPPED \]' "$1")
    # cmocka names each failed case twice (as it fails, and in its summary).
    fail=$(grep '^\[  FAILED  \] ' "$1" | grep -v 'test(s)' | sort -u | wc -l)
    died=$(grep -o '[0-9]* tests failed out of' "$2" | grep -o '^[0-9]*')
    [ "${died:-1}" -le "$fail" ] || fail=${died:-1}
    passed=$((passed + ok)) failed=$((failed + fail)) skipped=$((skipped + skip))
    [ "$fail" -eq 0 ] || failures+=("unit tests")
}

# count_junit FILE LABEL: adds the cases of a pytest junit report. Failed
# cases are named in the summary: CI may keep only the log's last lines.
count_junit() {
    local counts names
    if ! counts=$(/usr/bin/python3 - "$1" <<'EOF'
import sys, xml.etree.ElementTree as ET
t = f = s = 0
root = ET.parse(sys.argv[1]).getroot()
for suite in root.iter("testsuite"):
    t += int(suite.get("tests", 0))
    f += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    s += int(suite.get("skipped", 0))
bad = [c.get("classname", "").rsplit(".", 1)[-1] + "::" + c.get("name", "")
       for c in root.iter("testcase")
       if c.find("failure") is not None or c.find("error") is not None]
print(t - f - s, f, s, " ".join(bad))
EOF
    ); then
        failed=$((failed + 1))
        failures+=("$2 (no report)")
        return
    fi
    read -r p f s names <<<"$counts"
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    [ "$f" -eq 0 ] || failures+=("$2 ($names)")
}

# Sockets the suite leaves in /tmp are a bug: note what is there now.
tmp_sockets() { find /tmp -maxdepth 1 -type s 2>/dev/null | sort; }
sockets_before=$(tmp_sockets)
# Only the end-to-end tests (on their own cluster) may touch the node's
# paths. As root the integration tests run beside that cluster, so they run
# where they cannot reach the node's paths (guarded): a private mount
# namespace with a fresh tmpfs at /run and at /var/lib, each of the node's
# paths looked for there when they end (build-asan/touched lists any found).
# Elsewhere (no cluster runs), each of those paths absent now must stay so.
node_paths=(/var/lib/kubelet/device-plugins /run/gpulet /run/cdi /run/nvidia /var/lib/containers)
absent=()
for d in "${node_paths[@]}"; do [ -e "$d" ] || absent+=("$d"); done
can_guard() { [ "$(id -u)" -eq 0 ] && unshare --mount --propagation private true 2>/dev/null; }
guarded() {
    rm -f build-asan/touched
    if ! can_guard; then
        "$@"
        return
    fi
    unshare --mount --propagation private sh -c '
        mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/lib || exit 1
        "$@"
        rc=$?
        for p in '"${node_paths[*]}"'; do [ ! -e "$p" ] || echo "$p" >>build-asan/touched; done
        exit $rc' sh "$@"
}
untouched() {
    local d
    if [ -s build-asan/touched ]; then
        echo "a test created $(paste -sd' ' build-asan/touched)" >&2
        return 1
    fi
    can_guard && return 0
    for d in "${absent[@]}"; do
        [ ! -e "$d" ] || { echo "a test created $d" >&2; return 1; }
    done
}

# Where the time goes: each stage's seconds, said before the last line.
timings=()
lap_at=0
lap() { timings+=("$1 $((SECONDS - lap_at)) s"); lap_at=$SECONDS; }
lap "dependencies"

# --- the plain build: the end-to-end tests' binary; valgrind, memory use,
# mutants, and the shipped binary's links
cmake -S . -B build -G Ninja -DGPULET_TESTS=ON >/dev/null && cmake --build build -j "$jobs" ||
    { echo "plain build failed" >&2; exit 1; }
lap "plain build"

# --- end to end, on real Kubernetes (skipped without root): the device
# plugin on 1.36 (../shared/k8s-v1, resource.k8s.io/v1); then the DRA
# driver in a run of its own (its gpulet and the device plugin's must not
# serve one node at once) on 1.36, and again on 1.32 (../shared/k8s-next,
# v1beta1), the older path. One cluster at a time, each run counted. They
# run in the background, beside the stages below; build/e2e.log has their
# output, and each run's seconds go to build/e2e.times. The image is built
# meanwhile: its tests wait for build/image.done, which says how it went.
e2e() { # JUNIT KIT VARIABLE PYTEST-ARGS... (VARIABLE: the one that names KIT)
    local junit=$1 kit=$2 from=$3 t0=$SECONDS
    shift 3
    GPULET_K8S=$kit GPULET_K8S_FROM=$from GPULET_SOURCE=$PWD GPULET_BIN=build/gpulet GPULET_SIM_LIB=build/libgpulet-nvml-sim.so \
        GPULET_IMAGE_DONE=$PWD/build/image.done \
        /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider --timeout=900 --durations=10 --junitxml="$junit" "$@"
    echo "$(basename "$junit" .xml) $((SECONDS - t0)) s" >>build/e2e.times
}
current=${GPULET_K8S:-$PWD/../shared/k8s-v1}
next=${GPULET_K8S_NEXT:-$PWD/../shared/k8s-next}
# The DRA files: first those that need a Node no device plugin ever served
# (a pod asking for nvidia.com/gpu goes through DRA), then the move from the
# device plugin, then the rest; last, the MIG manager (a device plugin that
# labels the Node: no session gpulet may serve it meanwhile).
dra_tests=(tests/e2e/test_dra_health.py tests/e2e/test_dra_shares.py tests/e2e/test_dra_mig.py tests/e2e/test_dra_move.py
           tests/e2e/test_dra.py tests/e2e/test_quickstart.py tests/e2e/test_migmgr.py)
rm -f build/e2e.xml build/e2e-dra.xml build/e2e-dra-next.xml build/e2e.times build/image.done
(
    e2e build/e2e.xml "$current" GPULET_K8S "${dra_tests[@]/#/--ignore=}" tests/e2e
    e2e build/e2e-dra.xml "$current" GPULET_K8S "${dra_tests[@]}"
    # On 1.32 the quickstart's demos whose claims repeat shapes the others
    # already prove on v1beta1 are left to the 1.36 run (all seven run there),
    # and so is the MIG manager (a device plugin's, no DRA in it: the list's last).
    e2e build/e2e-dra-next.xml "$next" GPULET_K8S_NEXT "${dra_tests[@]:0:${#dra_tests[@]}-1}" \
        -k "not (test_gpu_test2 or test_gpu_test5 or test_gpu_test6)"
) >build/e2e.log 2>&1 &
e2e_pid=$!
e2e_begun=$SECONDS

# The shipped binary must run on any glibc host: nothing but libc may be dynamic.
# glibc_only DIR [OBJDUMP]: DIR/gpulet and its simulator library.
glibc_only() {
    local dir=${1:-build} objdump=${2:-objdump} extra newest
    extra=$(readelf -d "$dir/gpulet" | grep NEEDED | grep -v -e 'libc.so.6' -e 'ld-linux-aarch64.so.1' || true)
    if [ -n "$extra" ]; then
        echo "$dir/gpulet links more than glibc dynamically: $extra" >&2
        return 1
    fi
    newest=$($objdump -T "$dir/gpulet" "$dir/libgpulet-nvml-sim.so" | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)
    if [ "$(printf '%s\n' "$newest" GLIBC_2.34 | sort -V | tail -1)" != GLIBC_2.34 ]; then
        echo "$dir/gpulet needs $newest; GPU nodes may have only glibc 2.34" >&2
        return 1
    fi
    echo "$dir/gpulet: only glibc is dynamic, and at most $newest"
}
check "glibc-only link" glibc_only

# A Release build (-O3) must compile too: optimisation brings warnings of its own.
release() {
    cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPULET_TESTS=OFF >/dev/null &&
        cmake --build build-release -j "$jobs" >build-release/build.log 2>&1 ||
        { cat build-release/build.log >&2; return 1; }
    echo "Release build: ok"
}
check "Release build" release
lap "glibc check and Release build"

# The arm64 build (scripts/arm64.sh): warning-free, its unit tests and the
# smoke test under qemu-user. One item: the same tests, another machine.
arm64() {
    scripts/arm64.sh --test >build/arm64.log 2>&1 || { tail -n 40 build/arm64.log >&2; return 1; }
    grep '^arm64 smoke: all passed' build/arm64.log && glibc_only build-arm64 aarch64-linux-gnu-objdump
}
check "arm64 build and tests under qemu" arm64
lap "arm64 under qemu"

# The container image index (scripts/image.sh, buildah), each image within
# its size target, and each one's smoke test inside it (on a stand-in
# driver, loaded through the driver root as on a node).
image() {
    local out=build-release/gpulet-image.tar line kib
    line=$(scripts/image.sh --arch amd64,arm64 localhost/gpulet:test "$out" 2>&1) || { echo "$line" >&2; return 1; }
    echo "$line"
    kib=$(echo "$line" | grep -o '[0-9]* KiB unpacked' | cut -d' ' -f1)
    [ "$(echo "$kib" | wc -w)" -eq 2 ] || { echo "image: not two architectures" >&2; return 1; }
    for k in $kib; do
        [ "$k" -le 20480 ] || { echo "an image over 20 MiB unpacked" >&2; return 1; }
    done
    # Each image loads a stand-in driver's NVML through the driver root, as
    # on a node (smoke.py --image): a driver library's glibc needs included.
    /usr/bin/python3 tests/cross/smoke.py --image "$out" amd64 build-release >build/amd64-image.log 2>&1 ||
        { cat build/amd64-image.log >&2; return 1; }
    echo "amd64 image: $(tail -n 1 build/amd64-image.log)"
    /usr/bin/python3 tests/cross/smoke.py --image "$out" arm64 build-arm64 >build/arm64-image.log 2>&1 ||
        { cat build/arm64-image.log >&2; return 1; }
    echo "arm64 image: $(tail -n 1 build/arm64-image.log)"
}
if [ "$(id -u)" -ne 0 ] || ! command -v buildah >/dev/null; then
    echo "SKIPPED container image: buildah with its own storage needs root here"
    skipped=$((skipped + 1))
    echo "skipped (buildah with its own storage needs root)" >build/image.done
elif ! unshare --mount --propagation private true 2>/dev/null; then
    echo "SKIPPED container image: no private mount namespace here (a plain chroot?)"
    skipped=$((skipped + 1))
    echo "skipped (no private mount namespace)" >build/image.done
elif image; then
    passed=$((passed + 1))
    echo ok >build/image.done
else
    failed=$((failed + 1))
    failures+=("container image")
    echo failed >build/image.done
fi
lap "image"


# --- ASan+UBSan: unit and integration tests
cmake -S . -B build-asan -G Ninja -DGPULET_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DGPULET_TESTS=ON >/dev/null &&
    cmake --build build-asan -j "$jobs" || { echo "ASan build failed" >&2; exit 1; }
(cd build-asan && ctest --output-on-failure -j "$jobs" -L unit) 2>&1 | tee build-asan/unit.log
count_cmocka build-asan/Testing/Temporary/LastTest.log build-asan/unit.log
lap "ASan build and unit tests"
# The integration tests (also ctest's "integration" entry) run here directly,
# so pytest's own report shows each case.
GPULET_SOURCE=$PWD GPULET_SANITIZE=ON GPULET_BIN=build-asan/gpulet \
    GPULET_SIM_LIB=build-asan/libgpulet-nvml-sim.so guarded \
    /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider --timeout=300 --junitxml=build-asan/pytest.xml \
    -n "$jobs" -k "not valgrind" -m "not plain" tests/integration
count_junit build-asan/pytest.xml "integration tests"
check "node paths untouched" untouched
lap "ASan integration tests"
# --- ThreadSanitizer: the unit tests, and the integration tests whose
# agents run threads beside the loop (GPU lanes, the writers' pool, the
# password thread, the NVML watcher, the MPS daemons' and a reload's files
# on the pool), with every data race a failure.
tsan() {
    cmake -S . -B build-tsan -G Ninja -DGPULET_TSAN=ON -DCMAKE_BUILD_TYPE=Debug -DGPULET_TESTS=ON >/dev/null &&
        cmake --build build-tsan -j "$jobs" >build-tsan/build.log 2>&1 ||
        { tail -n 40 build-tsan/build.log >&2; return 1; }
}
mkdir -p build-tsan
if tsan; then
    (cd build-tsan && ctest --output-on-failure -j "$jobs" -L unit) 2>&1 | tee build-tsan/unit.log
    count_cmocka build-tsan/Testing/Temporary/LastTest.log build-tsan/unit.log
    # tests/tsan.supp: a descriptor libuv closed on the loop (with a raw
    # syscall ThreadSanitizer does not see) and a worker reused is no race.
    # test_api_down_at_start waits 10 s twice on the loop alone: ASan has it.
    TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp" GPULET_SOURCE=$PWD GPULET_SANITIZE=thread GPULET_BIN=build-tsan/gpulet \
        GPULET_SIM_LIB=build-tsan/libgpulet-nvml-sim.so guarded \
        /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider --timeout=300 --junitxml=build-tsan/pytest.xml \
        -n "$jobs" -k "not valgrind and not test_api_down_at_start" -m "not plain" tests/integration/test_dra.py \
        tests/integration/test_metrics_tls.py tests/integration/test_faults.py tests/integration/test_plugin.py \
        tests/integration/test_sharing.py tests/integration/test_nodeconfig.py tests/integration/test_migmgr.py
    count_junit build-tsan/pytest.xml "ThreadSanitizer integration tests"
else
    failed=$((failed + 1))
    failures+=("ThreadSanitizer build")
fi
lap "ThreadSanitizer"

# The end-to-end runs are the longest path, and mostly wait on their
# cluster: the stages from here on yield the CPU to them (the suite's own
# shell, and so every later stage, at a lower priority; the cluster keeps
# its own). The integration tests above keep theirs: some hold timings.
renice -n 10 -p $$ >/dev/null

# --- beside them, on the plain build: valgrind, memory use, mutants; fuzzing
rm -f build/valgrind-agent.xml
(cd build && ctest --output-on-failure -L valgrind -j "$jobs") >build/valgrind.log 2>&1
cat build/valgrind.log
vg_total=$(grep -o 'tests failed out of [0-9]*' build/valgrind.log | grep -o '[0-9]*$')
vg_failed=$(grep -o '[0-9]* tests failed out of' build/valgrind.log | grep -o '^[0-9]*')
# valgrind.agent is one ctest entry running the integration cases named
# *valgrind* (which the ASan run leaves out): they count one by one, below.
vg_agent_ok=$(grep -c 'valgrind\.agent \.*  *Passed' build/valgrind.log)
vg_total=$((${vg_total:-1} - 1)) vg_failed=$((${vg_failed:-1} - (1 - vg_agent_ok)))
passed=$((passed + vg_total - vg_failed)) failed=$((failed + vg_failed))
[ "$vg_failed" -eq 0 ] || failures+=("valgrind")
count_junit build/valgrind-agent.xml "valgrind agent tests"
lap "valgrind"

# The tests of memory use (marked plain): ASan's own memory would be measured.
GPULET_SOURCE=$PWD GPULET_BIN=build/gpulet GPULET_SIM_LIB=build/libgpulet-nvml-sim.so \
    /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider --timeout=300 --junitxml=build/plain.xml \
    -m plain tests/integration
count_junit build/plain.xml "plain-build tests"
lap "memory-use tests"

# Mutants that must die (scripts/mutants.py): the plain build with one
# deliberate fault at a time, each against the tests that guard it. Each
# mutant is one item; a survivor, or a row that no longer applies, fails.
/usr/bin/python3 scripts/mutants.py 2>&1 | tee build/mutants.log
mk=$(grep -c '^mutant .*: killed by' build/mutants.log)
ms=$(grep -c '^mutant .*: FAILED' build/mutants.log)
grep -q '^[0-9]* killed, [0-9]* survived$' build/mutants.log || ms=$((ms + 1))
passed=$((passed + mk)) failed=$((failed + ms))
[ "$ms" -eq 0 ] || failures+=("mutants")
lap "mutants"

# --- fuzzing. A fixed seed keeps this short run repeatable; long runs
# (fuzz/run.sh without GPULET_FUZZ_SEED) are where new inputs get explored.
# A harness that does not build or run is one failure, not zero tests.
if ! GPULET_FUZZ_SEED=${GPULET_FUZZ_SEED:-1} fuzz/run.sh "${GPULET_FUZZ_SECONDS:-3}" | tee build/fuzz.log; then
    grep -q '^fuzz .*: FAILED$' build/fuzz.log || { failed=$((failed + 1)); failures+=("fuzzing (did not run)"); }
fi
passed=$((passed + $(grep -c '^fuzz .*: ok$' build/fuzz.log)))
fz=$(grep -c '^fuzz .*: FAILED$' build/fuzz.log)
failed=$((failed + fz))
[ "$fz" -eq 0 ] || failures+=("fuzzing")

lap "fuzzing"

wait "$e2e_pid"
cat build/e2e.log
count_junit build/e2e.xml "end-to-end tests (1.36)"
count_junit build/e2e-dra.xml "end-to-end DRA tests (1.36)"
count_junit build/e2e-dra-next.xml "end-to-end DRA tests (1.32)"
lap "e2e, after the stages beside it"
timings+=("e2e in all $((SECONDS - e2e_begun)) s ($(paste -sd, build/e2e.times 2>/dev/null))")

left=$(comm -13 <(echo "$sockets_before") <(tmp_sockets))
check "no sockets left in /tmp" test -z "$left"
[ -z "$left" ] || echo "the suite left sockets in /tmp: $left" >&2

(IFS=,; echo "stage times: ${timings[*]}")
[ ${#failures[@]} -eq 0 ] || echo "failed: ${failures[*]}" >&2
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
