"""gpulet's container image (scripts/image.sh) on the real containerd: it is
imported into the cluster's containerd, and pods run `gpulet version` and
`gpulet list --simulate dgx-h100` from it, with no shell in the image.
Skips where the image was not built (scripts/test.sh builds it as root)."""
import json
import time
from pathlib import Path

import pytest

from conftest import SOURCE

ARCHIVE = SOURCE / "build-release" / "gpulet-image.tar"
IMAGE = "localhost/gpulet:test"


@pytest.fixture(scope="module")
def image(cluster):
    if not ARCHIVE.exists():
        pytest.skip(f"no image at {ARCHIVE} (scripts/image.sh {IMAGE} {ARCHIVE} builds it)")
    import subprocess
    sock = Path(cluster.base) / "containerd" / "containerd.sock"
    p = subprocess.run(["ctr", "--address", str(sock), "-n", "k8s.io", "images", "import",
                        "--base-name", "localhost/gpulet", str(ARCHIVE)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return IMAGE


def run(cluster, name, args):
    spec = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never",
                                     "args": args}]}}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(spec))
    deadline = time.monotonic() + 90
    while (phase := cluster.get("pod", name)["status"].get("phase")) not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, cluster.kubectl("describe", "pod", name)
        time.sleep(0.5)
    out = cluster.kubectl("logs", name)
    cluster.kubectl("delete", "pod", name, "--wait=false")
    return phase, out


def test_image_runs(cluster, image):
    phase, out = run(cluster, "gpulet-version", ["version"])
    assert phase == "Succeeded" and out.startswith("gpulet "), out
    phase, out = run(cluster, "gpulet-list", ["list", "--simulate", "dgx-h100", "-o", "json"])
    assert phase == "Succeeded", out
    assert len(json.loads(out)["gpus"]) == 8
