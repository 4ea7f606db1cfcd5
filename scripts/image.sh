#!/usr/bin/env bash
# Builds gpulet's container image with Debian's buildah: the release binary,
# the simulator library, the C library and the libraries gpulet loads
# (libmicrohttpd for /metrics; libcurl, its GnuTLS build, which shares
# GnuTLS with libmicrohttpd, for the API server; libxcrypt for basic
# auth) with theirs, and
# the CA certificates. No shell, no package manager.
# usage: scripts/image.sh [TAG [OCI_ARCHIVE]]
#   TAG          default localhost/gpulet:<version>
#   OCI_ARCHIVE  default build-release/gpulet-image.tar
# Storage lives under build-release/image-store, and buildah runs with a
# private /var/lib and /run (it keeps a cache and state there whatever
# --root and --runroot say): nothing of
# the host's container storage is touched. Needs root. Prints the size.
set -euo pipefail
cd "$(dirname "$0")/.."

# What buildah needs here, each said in one line before anything is built.
fail() { echo "image.sh: $*" >&2; exit 1; }
command -v buildah >/dev/null ||
    fail "buildah is not installed; as root: apt-get install -y buildah (docs/deploy.md)"
[ "$(id -u)" -eq 0 ] || fail "buildah with its own storage needs root here: sudo scripts/image.sh"
if ! why=$(unshare --mount --propagation private true 2>&1); then
    fail "cannot make a private mount namespace ($why). In a plain chroot / is not a" \
        "mount point: bind-mount the chroot onto itself before entering it" \
        "(mount --bind DIR DIR), or build on the host, in a container or in a VM."
fi

cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPULET_TESTS=OFF >/dev/null
cmake --build build-release --target gpulet nvml_sim >/dev/null
version=$(build-release/gpulet version | awk '{print $2}')
tag=${1:-localhost/gpulet:$version}
out=${2:-build-release/gpulet-image.tar}
multiarch=/usr/lib/x86_64-linux-gnu

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
# copy FILE: the file at its own path in the image (links resolved).
copy() {
    mkdir -p "$root$(dirname "$1")"
    cp -L "$1" "$root$1"
}
# The libraries ldd names for FILE, each at the path the loader asks for.
copy_deps() {
    ldd "$1" | awk '/=> \//{print $3} /^\t\/lib64/{print $1}' | while read -r lib; do copy "$lib"; done
}
install -D -m 0755 -s build-release/gpulet "$root/usr/bin/gpulet"
install -D -m 0644 -s build-release/libgpulet-nvml-sim.so "$root/usr/lib/gpulet/libgpulet-nvml-sim.so"
copy_deps build-release/gpulet
copy_deps build-release/libgpulet-nvml-sim.so
for lib in libmicrohttpd.so.12 libcurl-gnutls.so.4 libcrypt.so.1; do
    copy "$multiarch/$lib"
    copy_deps "$multiarch/$lib"
done
copy /etc/ssl/certs/ca-certificates.crt
mkdir -p "$root/tmp" "$root/run"
chmod 1777 "$root/tmp"

store=$PWD/build-release/image-store
b() {
    unshare --mount --propagation private sh -c 'mount -t tmpfs tmpfs /var/lib && mount -t tmpfs tmpfs /run && exec buildah "$@"' \
        sh --root "$store/root" --runroot "$store/run" --storage-driver vfs "$@"
}
ctr=$(b from scratch)
b copy "$ctr" "$root" / >/dev/null
b config --entrypoint '["/usr/bin/gpulet"]' --cmd agent \
    --label org.opencontainers.image.title=gpulet \
    --label org.opencontainers.image.version="$version" \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt "$ctr"
rm -f "$out"
b commit --quiet --disable-compression=false --format oci "$ctr" "oci-archive:$out:$tag" >/dev/null
b rm "$ctr" >/dev/null
echo "image $tag: $(du -sk "$root" | cut -f1) KiB unpacked, archive $out $(du -k "$out" | cut -f1) KiB"
