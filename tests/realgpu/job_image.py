"""The CUDA job's image for the GPU machine's cluster (deploy_kit.py): a
plain glibc image, as users run: cuda_tick, Debian's glibc (libc, libm,
libdl, libpthread, librt and the loader, which NVIDIA's libcuda needs) and
a static busybox, and nothing of NVIDIA's: gpulet puts the driver in.
Written as a one-layer OCI archive for `ctr images import`.
usage: job_image.py CUDA_TICK BUSYBOX NAME OUT.tar"""
import hashlib
import io
import json
import sys
import tarfile

tick, busybox, name, out = sys.argv[1:5]
GLIBC = ["/lib/x86_64-linux-gnu/" + n for n in
         ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1")]
GLIBC.append("/lib64/ld-linux-x86-64.so.2")


def add_dir(t, path, mode=0o755):
    ti = tarfile.TarInfo(path)
    ti.type, ti.mode = tarfile.DIRTYPE, mode
    t.addfile(ti)


def add_file(t, path, src, mode=0o755):
    data = open(src, "rb").read()
    ti = tarfile.TarInfo(path)
    ti.size, ti.mode = len(data), mode
    t.addfile(ti, io.BytesIO(data))


layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
    for d in ["bin", "dev", "proc", "sys", "etc", "var", "lib", "lib/x86_64-linux-gnu", "lib64",
              "usr", "usr/lib", "usr/lib/x86_64-linux-gnu", "usr/bin"]:
        add_dir(t, d)
    add_dir(t, "tmp", 0o1777)
    for lib in GLIBC:
        add_file(t, lib.lstrip("/"), lib)
    add_file(t, "cuda_tick", tick)
    add_file(t, "bin/busybox", busybox)
    for applet in ("sh", "sleep", "ls", "cat", "env", "echo"):
        ti = tarfile.TarInfo("bin/" + applet)
        ti.type, ti.linkname = tarfile.SYMTYPE, "busybox"
        t.addfile(ti)
data = layer.getvalue()


def blob(t, content, media):
    digest = hashlib.sha256(content).hexdigest()
    ti = tarfile.TarInfo("blobs/sha256/" + digest)
    ti.size = len(content)
    t.addfile(ti, io.BytesIO(content))
    return {"mediaType": media, "digest": "sha256:" + digest, "size": len(content)}


config = {"architecture": "amd64", "os": "linux",
          "config": {"Env": ["PATH=/bin:/usr/bin"], "Cmd": ["/cuda_tick", "60"]},
          "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(data).hexdigest()]}}
with tarfile.open(out, "w") as t:
    layer_d = blob(t, data, "application/vnd.oci.image.layer.v1.tar")
    config_d = blob(t, json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json")
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config_d, "layers": [layer_d]}
    m = blob(t, json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json")
    m["annotations"] = {"io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}
    m["platform"] = {"architecture": "amd64", "os": "linux"}
    for fname, content in [("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
                           ("index.json", json.dumps({"schemaVersion": 2, "manifests": [m]}).encode())]:
        ti = tarfile.TarInfo(fname)
        ti.size = len(content)
        t.addfile(ti, io.BytesIO(content))
print(name, m["digest"])
