#!/usr/bin/env bash
# Installs gpulet's build and test dependencies from Debian 12's archive.
# Idempotent: does nothing when everything is already installed.
set -euo pipefail
pkgs=(
    build-essential cmake ninja-build pkg-config
    libuv1-dev libyaml-dev libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler
    libmicrohttpd-dev libcmocka-dev
    python3-pytest python3-grpcio python3-grpc-tools prometheus wrk curl
    valgrind binutils clang-14 libclang-rt-14-dev
)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
