#!/usr/bin/env bash
# Builds gpulet's container image with Debian's buildah, as an OCI image index
# (a node pulls its own architecture's image): the release binary, the C
# library and the libraries gpulet loads (libcurl, its GnuTLS build, for
# the API server, whose GnuTLS also serves /metrics over TLS; libxcrypt for
# basic auth) with theirs, and the rest of glibc that the host's NVML
# needs, each of its architecture. No shell, no package manager, no CA
# bundle (the API server's CA is the service account's, or the
# kubeconfig's), and no simulator: a simulated node's NVML is the stand-in
# driver tree's on the node (`gpulet sim driver-root`), loaded as a real
# one is.
# usage: scripts/image.sh [--arch ARCHES] [TAG [OCI_ARCHIVE]]
#   ARCHES       amd64, arm64 or amd64,arm64; default this host's alone (the
#                arm64 image needs the cross compiler: install-deps.sh --arm64)
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

# One image per architecture, from that architecture's release build and
# Debian's libraries for it (multiarch), then an OCI image index of them.
arches=$(dpkg --print-architecture)
if [ "${1:-}" = --arch ]; then
    [ $# -ge 2 ] || { echo "usage: scripts/image.sh [--arch amd64|arm64|amd64,arm64] [TAG [OCI_ARCHIVE]]" >&2; exit 2; }
    arches=${2//,/ }
    shift 2
fi
for arch in $arches; do
    case $arch in
    amd64)
        cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPULET_TESTS=OFF >/dev/null
        cmake --build build-release --target gpulet nvml_sim >/dev/null ;;
    arm64)
        command -v aarch64-linux-gnu-gcc >/dev/null && [ -f /usr/lib/aarch64-linux-gnu/libmicrohttpd.a ] ||
            fail "the arm64 image needs the cross compiler and the :arm64 libraries: scripts/install-deps.sh --arm64"
        cmake -S . -B build-arm64 -G Ninja --toolchain cmake/aarch64-linux-gnu.cmake \
            -DCMAKE_BUILD_TYPE=Release >/dev/null
        cmake --build build-arm64 --target gpulet nvml_sim >/dev/null ;;
    *)
        echo "image.sh: --arch $arch: amd64 or arm64" >&2; exit 2 ;;
    esac
done
version=$(sed -n 's/^project(gpulet VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
tag=${1:-localhost/gpulet:$version}
out=${2:-build-release/gpulet-image.tar}

roots=$(mktemp -d)
trap 'rm -rf "$roots"' EXIT
# copy FILE: the file at its own path in the image (links resolved).
copy() {
    mkdir -p "$root$(dirname "$1")"
    cp -L "$1" "$root$1"
}
# copy_deps FILE: the libraries FILE names (DT_NEEDED), found where the
# loader of $triplet looks, each at that path in the image; then theirs.
# readelf reads either architecture, where ldd runs only the host's. The
# loader, which libc names too, is at its own path already.
copy_deps() {
    local lib dir
    for lib in $(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
        [ "$lib" != "$(basename "$loader")" ] || continue
        for dir in /lib/$triplet /usr/lib/$triplet; do
            [ -e "$dir/$lib" ] || continue
            [ -e "$root$dir/$lib" ] || { copy "$dir/$lib"; copy_deps "$dir/$lib"; }
            break
        done
    done
}
# fill ARCH BUILD_DIR: the image's file system for one architecture.
fill() {
    local strip=strip
    triplet=x86_64-linux-gnu
    [ "$1" = amd64 ] || { triplet=aarch64-linux-gnu; strip=aarch64-linux-gnu-strip; }
    root=$roots/$1
    install -D -m 0755 "$2/gpulet" "$root/usr/bin/gpulet"
    $strip "$root/usr/bin/gpulet"
    loader=$(readelf -l "$2/gpulet" | sed -n 's/.*interpreter: \(.*\)]/\1/p')
    copy "$loader"
    copy_deps "$2/gpulet"
    for lib in libcurl-gnutls.so.4 libcrypt.so.1; do
        copy "/usr/lib/$triplet/$lib"
        copy_deps "/usr/lib/$triplet/$lib"
    done
    # The host's NVML, which gpulet loads from the driver root, names
    # glibc's libraries besides libc (libpthread.so.0, libdl.so.2,
    # librt.so.1, libm.so.6; so does every library and program of NVIDIA's
    # driver, docs/real-gpu.md): glibc's set of them, from the glibc gpulet
    # was built against. Left out: what no driver names (NSS modules,
    # libnsl, libmvec, libBrokenLocale) and glibc's debugging aids.
    for lib in $(dpkg -L "libc6:$1" | grep -E "^/lib/$triplet/lib[^/]*\.so\.[0-9]+$" |
                 grep -v -e libnss_ -e libnsl -e libmvec -e libBrokenLocale \
                      -e libmemusage -e libpcprofile -e libc_malloc_debug -e libthread_db); do
        [ -e "$root$lib" ] || copy "$lib"
    done
    mkdir -p "$root/tmp" "$root/run"
    chmod 1777 "$root/tmp"
}

store=$PWD/build-release/image-store
b() {
    unshare --mount --propagation private sh -c 'mount -t tmpfs tmpfs /var/lib && mount -t tmpfs tmpfs /run && exec buildah "$@"' \
        sh --root "$store/root" --runroot "$store/run" --storage-driver vfs "$@"
}
b manifest rm "$tag" >/dev/null 2>&1 || true
b manifest create "$tag" >/dev/null
sizes=""
for arch in $arches; do
    dir=$([ $arch = amd64 ] && echo build-release || echo build-arm64)
    fill $arch $dir
    ctr=$(b from --arch $arch scratch)
    b copy "$ctr" "$root" / >/dev/null
    b config --arch $arch --os linux --entrypoint '["/usr/bin/gpulet"]' --cmd agent \
        --label org.opencontainers.image.title=gpulet \
        --label org.opencontainers.image.version="$version" "$ctr"
    b commit --quiet --disable-compression=false --format oci --manifest "$tag" "$ctr" \
        "$tag-$arch" >/dev/null
    b rm "$ctr" >/dev/null
    sizes="$sizes, $arch $(du -sk "$root" | cut -f1) KiB unpacked"
done
rm -f "$out"
b manifest push --quiet --all --format oci "$tag" "oci-archive:$out:$tag" >/dev/null
echo "image $tag${sizes#,}; index archive $out $(du -k "$out" | cut -f1) KiB"
