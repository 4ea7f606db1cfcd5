#!/usr/bin/env bash
# A C library built as the Red Hat family builds theirs, for
# inject_check.py's redhat root: the loader at /lib64, the libraries in
# /usr/lib64, and those two the loader's only system directories (Fedora's
# glibc.spec: --prefix=/usr --libdir=/usr/lib64, slibdir and rtlddir
# /lib64). Debian has no such glibc to install, so it is built from the
# upstream source in Debian's own source package (2.36, bookworm's).
# usage: tests/realgpu/rh_glibc.sh WORKDIR OUT   (about 15 minutes on 2 cores)
# Needs gawk and bison, and a deb-src line for bookworm, or the source
# tarball (glibc_2.36.orig.tar.xz) already in WORKDIR.
set -euo pipefail
work=$(realpath "$1"); out=$(realpath -m "$2")
mkdir -p "$work" && cd "$work"
[ -f glibc_2.36.orig.tar.xz ] || apt-get source --download-only glibc
[ -d glibc-2.36 ] || tar xf glibc_2.36.orig.tar.xz
# Debian's tarball lacks the manual (GFDL): an empty directory to descend into.
mkdir -p glibc-2.36/manual
[ -f glibc-2.36/manual/Makefile ] || printf '%%:\n\t@:\n' > glibc-2.36/manual/Makefile
mkdir -p build && cd build
[ -f config.status ] || ../glibc-2.36/configure --prefix=/usr --libdir=/usr/lib64 \
    libc_cv_slibdir=/lib64 libc_cv_rtlddir=/lib64 --disable-werror --disable-nscd \
    --disable-timezone-tools --disable-profile --without-selinux >configure.log
# ... and the (empty) object lists libc's link asks of it.
mkdir -p manual && touch manual/stamp.o manual/stamp.os manual/stamp.oS
make -j"$(nproc)" >make.log 2>&1
mkdir -p "$out/usr/lib64" "$out/sbin"
cp elf/ld.so "$out/usr/lib64/ld-linux-x86-64.so.2"
cp libc.so "$out/usr/lib64/libc.so.6"
cp math/libm.so "$out/usr/lib64/libm.so.6"
cp dlfcn/libdl.so "$out/usr/lib64/libdl.so.2"
cp nptl/libpthread.so "$out/usr/lib64/libpthread.so.0"
cp rt/librt.so "$out/usr/lib64/librt.so.1"
cp elf/ldconfig "$out/sbin/ldconfig"
"$out/usr/lib64/ld-linux-x86-64.so.2" --help | sed -n '/search path/,/^$/p'
