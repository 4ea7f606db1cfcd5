"""The device plugin driven by grpc-go, the gRPC library the kubelet itself is
made of (Debian's golang-google-grpc-dev, built offline in GOPATH mode).
grpc-go dialling a socket path sends that path as :authority, as kubelets up
to 1.25 do: every call must still work."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import SOURCE, skip_or_fail

GRPC_GO = Path("/usr/share/gocode/src/google.golang.org/grpc")


@pytest.fixture(scope="session")
def kubeletgo(tmp_path_factory):
    """Builds tests/integration/kubeletgo against the project's own proto."""
    missing = [t for t in ("go", "protoc", "protoc-gen-go") if not shutil.which(t)]
    if missing or not GRPC_GO.is_dir():
        skip_or_fail(f"grpc-go client not buildable: missing {missing or [str(GRPC_GO)]} "
                    "(scripts/install-deps.sh installs golang-go, golang-google-grpc-dev, "
                    "golang-goprotobuf-dev, protobuf-compiler)")
    top = tmp_path_factory.mktemp("go")
    api = top / "src" / "gpulet" / "v1beta1"
    api.mkdir(parents=True)
    shutil.copy(SOURCE / "proto" / "deviceplugin" / "v1beta1" / "api.proto", api)
    subprocess.run(["protoc", f"-I{api}", f"--go_out=plugins=grpc:{api}", "api.proto"],
                   check=True, cwd=api)
    shutil.copytree(SOURCE / "tests" / "integration" / "kubeletgo", top / "src" / "gpulet" / "kubeletgo")
    env = dict(os.environ, GOPATH=f"{top}:/usr/share/gocode", GO111MODULE="off",
               GOCACHE=str(top / "cache"), GOFLAGS="")
    out = top / "kubeletgo"
    subprocess.run(["go", "build", "-o", str(out), "gpulet/kubeletgo"], check=True, env=env,
                   timeout=600)
    return out


@pytest.mark.parametrize("authority", ["path", "localhost"])
def test_grpc_go_kubelet(kubeletgo, agent, tmp_path, authority):
    root = tmp_path / "kubelet"
    (root / "device-plugins").mkdir(parents=True)
    client = subprocess.Popen([str(kubeletgo), "-dir", str(root / "device-plugins"),
                               "-authority", authority],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert client.stdout.readline().strip() == '{"call":"listening"}'
    a = agent("--simulate", "dgx-h100", "--kubelet-root", str(root), "--no-metrics")
    out, err = client.communicate(timeout=60)
    assert client.returncode == 0, f"{err}\nagent log:\n{a.log()}"
    calls = {c["call"]: c.get("result") for c in map(json.loads, out.splitlines())}
    assert calls["Register"]["resource_name"] == "nvidia.com/gpu"
    assert calls["GetDevicePluginOptions"]["get_preferred_allocation_available"]
    devs = calls["ListAndWatch"]["devices"]
    assert len(devs) == 8 and all(d["health"] == "Healthy" for d in devs)
    chosen = calls["GetPreferredAllocation"]["container_responses"][0]["deviceIDs"]
    assert len(chosen) == 2 and set(chosen) <= {d["ID"] for d in devs}
    envs = calls["Allocate"]["container_responses"][0]["envs"]
    assert envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(chosen)}
    assert "InvalidArgument" in calls["AllocateUnknown"]
    assert "unknown device ID 'GPU-nonexistent'" in calls["AllocateUnknown"]
    assert "reset" not in a.log()
