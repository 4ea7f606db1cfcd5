#!/usr/bin/env bash
# gpulet for linux/arm64 (Grace Hopper, Grace Blackwell nodes), cross-built
# on an x86-64 Debian 12 with Debian's cross compiler and :arm64 libraries.
#   scripts/arm64.sh          installs what that needs, builds build-arm64/gpulet
#   scripts/arm64.sh --test   then runs the unit tests and the smoke test
#                             (tests/cross/smoke.py) under qemu-user
# The build is a release build, warning-free like every other (-Werror);
# scripts/image.sh puts it beside the amd64 one in the image index.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
    "" | --test) ;;
    *) echo "usage: scripts/arm64.sh [--test]" >&2; exit 2 ;;
esac

scripts/install-deps.sh --arm64
tests=AUTO
[ "${1:-}" = --test ] && tests=ON
cmake -S . -B build-arm64 -G Ninja --toolchain cmake/aarch64-linux-gnu.cmake \
    -DCMAKE_BUILD_TYPE=Release -DGPULET_TESTS=$tests >/dev/null
cmake --build build-arm64
echo "build-arm64/gpulet: $(file -b build-arm64/gpulet | cut -d, -f1-2)"
[ "${1:-}" = --test ] || exit 0
(cd build-arm64 && ctest -L unit --output-on-failure)
/usr/bin/python3 tests/cross/smoke.py build-arm64
