#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang-14 and runs each for SECONDS
# (default 30) on a copy of the seed corpus. Usage: fuzz/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
out=build-fuzz
mkdir -p "$out"
common=(-g -O1 -std=c17 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Isrc -Isim)
scenario_src=(sim/scenario.c sim/products.c sim/presets.c src/util/ydoc.c src/util/err.c)
sim_src=(sim/sim.c sim/live.c sim/faults.c sim/control.c sim/api_*.c src/nvml/nvml_errors.c)
clang-14 "${common[@]}" -o "$out/fuzz_scenario" fuzz/fuzz_scenario.c "${scenario_src[@]}" -lyaml
clang-14 "${common[@]}" -o "$out/fuzz_control" fuzz/fuzz_control.c "${scenario_src[@]}" \
    "${sim_src[@]}" -lyaml -lpthread -lm
for target in scenario control; do
    work="$out/corpus-$target"
    mkdir -p "$work"
    cp -n fuzz/corpus/$target/* "$work/" 2>/dev/null || true
    echo "fuzzing $target for ${secs}s"
    "$out/fuzz_$target" -max_total_time="$secs" -max_len=4096 -timeout=5 \
        -print_final_stats=1 "$work" 2>&1 | grep -E 'stat::number_of_executed_units|ERROR|SUMMARY|Done' || true
    # libFuzzer exits non-zero and writes crash-* on a finding.
    if ls crash-* leak-* timeout-* 2>/dev/null | grep -q .; then
        echo "fuzz/run.sh: $target found a crash; see the crash-* file" >&2
        exit 1
    fi
done
