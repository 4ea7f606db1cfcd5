#!/usr/bin/env bash
# deploy/ as shipped, on the GPU machine (docs/real-gpu.md): the 1.36 kit
# of ../shared/k8s-v1 from carried binaries, gpulet's image and a CUDA
# job's image imported into its containerd, then deploy_kit.py. The GPU
# machine has no package registry and is not Debian: the kit's binaries
# (bin/*.xz) and kubectl come in /opt/kit (an earlier call of the same
# lease), and Debian's runc, etcd, CNI loopback and static busybox in
# KIT_B; the kit's script runs unchanged but for its package check.
# usage: deploy_kit.sh KIT_B (root; $OUT gets the record)
set -u
cd "$(dirname "$0")/../.."
B=$(readlink -f "$1")
OUT=${OUT:-/tmp/gpulet-real}
export OUT
mkdir -p "$OUT"
KIT=/opt/kit/k8s-v1
unxz() { python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$1"; }

mkdir -p "$KIT/bin" /usr/lib/cni
cp /opt/kit/k8s.xz "$B"/containerd.xz "$B"/containerd-shim-runc-v2.xz "$B"/ctr.xz "$KIT/bin/"
cp "$B"/mkimage.py "$B"/null-cni.sh "$KIT/"
sed 's/^    ensure_packages$/    : # the packages are carried (tests\/realgpu\/deploy_kit.sh)/' "$B/cluster.sh" >"$KIT/cluster.sh"
chmod 755 "$KIT"/*.sh "$KIT/mkimage.py"
if ! command -v xz >/dev/null; then
    printf '#!/bin/sh\n[ "$1" = -dc ] && exec python3 -c "import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())" "$2"\nexit 2\n' >/usr/local/bin/xz
    chmod 755 /usr/local/bin/xz
fi
unxz /opt/kit/kubectl.xz >/usr/local/bin/kubectl
unxz "$B/etcd.xz" >/usr/local/bin/etcd
unxz "$B/runc.xz" >/usr/local/bin/runc
unxz "$B/loopback.xz" >/usr/lib/cni/loopback
chmod 755 /usr/local/bin/kubectl /usr/local/bin/etcd /usr/local/bin/runc /usr/lib/cni/loopback
ldconfig -p | grep -q 'libseccomp.so.2 ' || { cp "$B/libseccomp.so.2" /usr/local/lib/ && ldconfig; }
if [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then cp "$B/busybox" /bin/busybox; fi

echo "=== machine"; date -u; nvidia-smi --query-gpu=name,driver_version,compute_mode,mig.mode.current --format=csv
uname -r; stat -fc %T /sys/fs/cgroup
mode_before=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader)

# A node's / is a shared mount (systemd makes it so), which deploy/'s
# driver root (mountPropagation: HostToContainer) needs; this VM's is not.
findmnt -no PROPAGATION / | grep -q shared || { mount --make-rshared /; echo "made / rshared, as systemd does"; }
"$KIT/cluster.sh" up --gpus 0 >/tmp/kit.env 2>"$OUT/kit-up.log" || { cat "$OUT/kit-up.log"; exit 1; }
cp /tmp/kit.env "$OUT/kit.env"
. /tmp/kit.env
export KUBECONFIG KUBECACHEDIR
sock=$K8S_BASE/containerd/containerd.sock
ctr=$(ls -d /tmp/k8s-bin-*/ctr | head -n 1)
"$ctr" --address "$sock" -n k8s.io images import --base-name localhost/gpulet /opt/kit/gpulet-image-amd64.tar
"$ctr" --address "$sock" -n k8s.io images import "$B/job.tar"
python3 tests/realgpu/deploy_kit.py "$OUT/kit.env"
rc=$?

cp "$K8S_BASE/kubelet.log" "$OUT/kubelet.log" 2>/dev/null
"$KIT/cluster.sh" down "$K8S_BASE" >/dev/null 2>&1
# MPS daemons this run started end with it (gpulet's are meant to outlive it).
for pipe in $(find /run/nvidia/mps /tmp/gpulet-image-root/run/nvidia/mps -name pipe -type d 2>/dev/null); do
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$pipe timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
done
sleep 2
left=$(pgrep -a -x nvidia-cuda-mps)   # the process name: 15 characters
pkill -9 -x nvidia-cuda-mps
echo "MPS processes left at the end: ${left:-none}"
mode_after=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader)
echo "compute mode before $mode_before, after $mode_after"
[ "$mode_before" = "$mode_after" ] || rc=1
exit $rc
