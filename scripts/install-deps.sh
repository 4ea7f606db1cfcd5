#!/usr/bin/env bash
# Installs what gpulet needs from Debian 12's archive.
#   scripts/install-deps.sh          what building gpulet needs
#   scripts/install-deps.sh --test   that, plus what the test suite needs
#                                    (the arm64 set included)
#   scripts/install-deps.sh --arm64  what building for linux/arm64 needs: the
#                                    cross compiler, the :arm64 libraries
#                                    (multiarch) and qemu-user to run them
# Idempotent: installs only what is missing. Without root it uses sudo where
# there is one, and otherwise says in one line what to run.
#
# Prometheus (for the metrics tests) is not installed as a package: Debian's
# package enables a Prometheus server as a service. Its two binaries are
# unpacked into .tools/bin of this checkout instead, which scripts/test.sh
# puts on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

build=(
    build-essential cmake ninja-build pkg-config
    libuv1-dev libyaml-dev libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler
    libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev
)
test=(
    libcmocka-dev valgrind binutils clang-14 libclang-rt-14-dev
    openssl python3-pytest python3-pytest-timeout python3-pytest-xdist python3-grpcio python3-grpc-tools python3-jsonschema python3-yaml wrk curl
    podman buildah runc libcurl3-gnutls busybox-static
    golang-go golang-google-grpc-dev golang-goprotobuf-dev protobuf-compiler
)
arm64=(
    crossbuild-essential-arm64 qemu-user-static
    libuv1-dev:arm64 libyaml-dev:arm64 libnghttp2-dev:arm64 libprotobuf-c-dev:arm64
    libmicrohttpd-dev:arm64 libjansson-dev:arm64 libcurl4-openssl-dev:arm64 libcmocka-dev:arm64
    libcurl3-gnutls:arm64
)
case "${1:-}" in
    "") pkgs=("${build[@]}") ;;
    --test) pkgs=("${build[@]}" "${test[@]}" "${arm64[@]}") ;;
    --arm64) pkgs=("${build[@]}" "${arm64[@]}") ;;
    *) echo "usage: scripts/install-deps.sh [--test | --arm64]" >&2; exit 2 ;;
esac
# The :arm64 packages need dpkg to know the architecture (multiarch).
foreign=false
[ "${1:-}" = "" ] || dpkg --print-foreign-architectures | grep -qx arm64 || foreign=true

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
    elif [ ${#missing[@]} -gt 0 ]; then
        add=""
        $foreign && add="dpkg --add-architecture arm64 && apt-get update && "
        echo "install-deps: missing ${missing[*]}; as root run: ${add}apt-get install -y --no-install-recommends ${missing[*]}" >&2
        exit 1
    fi
fi
if $foreign && [ ${#missing[@]} -gt 0 ]; then
    "${sudo[@]}" dpkg --add-architecture arm64
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "${1:-}" = --test ] && [ ! -x .tools/bin/promtool ]; then
    # apt-get download needs no root; the lists are there after any install.
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    if ! (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1); then
        "${sudo[@]}" apt-get update -qq
        (cd "$tmp" && apt-get download -qq prometheus)
    fi
    dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
    mkdir -p .tools/bin
    cp "$tmp/x/usr/bin/prometheus" "$tmp/x/usr/bin/promtool" .tools/bin/
    echo "prometheus and promtool unpacked into .tools/bin (no service)"
fi
