"""Shares of a GPU through DRA on Kubernetes 1.36 (../shared/k8s-v1,
consumable capacity, KEP-5075): gpulet publishes GPU 0 of a simulated DGX
H100 for shares (--dra-shares 0); four pods, each with a claim for 19Gi of
its memory, run on it at once, each container with the limits its share
consumed (from the claim's CDI device: MPS's pinned memory and, for one,
its active threads), through the GPU's one MPS daemon (a stand-in); a
fifth stays Pending with the scheduler's reason; when one goes, the fifth
runs. 19Gi, not 20Gi: an H100 80GB has 81559Mi, and four 20Gi shares
(81920Mi) would not fit. Skipped on 1.32 (no consumable capacity)."""
import pytest

import drakit
from drakit import driver_fixture_v1, request, scheduling_failure, slice_devices, wait, wait_devices


@pytest.fixture(scope="module")
def driver(cluster):
    yield from driver_fixture_v1(cluster, "shares", "dgx-h100", "--dra-shares", "0", needs="shares")


def share_pod(cluster, name, memory, compute=None):
    capacity = {"requests": {"memory": memory, **({"compute": compute} if compute else {})}}
    req = request("v1", "gpu", "gpu.nvidia.com", ["device.attributes['gpu.nvidia.com'].index == 0"],
                  capacity=capacity)
    drakit.claim_pod(cluster, "v1", name, req, "env; ls /dev; echo done; sleep 3600")


def test_four_shares_and_a_fifth_pending(cluster, driver):
    wait_devices(cluster, 8)
    gpu0 = next(d for d in slice_devices(cluster) if d["name"] == "gpu-0")
    assert gpu0["allowMultipleAllocations"] is True
    assert gpu0["capacity"]["memory"]["requestPolicy"]["default"] == "79Gi"
    pods = [f"share-{i}" for i in range(5)]
    try:
        for i, name in enumerate(pods[:4]):
            share_pod(cluster, name, "19Gi", "25" if i == 0 else None)
        for name in pods[:4]:
            cluster.wait_phase(name, "Running")
        logs = {n: wait(f"{n}'s log", lambda n=n: "done" in (o := cluster.kubectl("logs", n)) and o)
                for n in pods[:4]}
        for name, out in logs.items():
            assert "nvidia0" in out.split(), out
            assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in out, out
            assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=19456M" in out, out
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in logs["share-0"]
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in logs["share-1"]
        claims = [cluster.get("resourceclaim", c["metadata"]["name"]) for c in cluster.get("resourceclaims")["items"]
                  if c["metadata"]["name"].startswith("share-")]
        results = [c["status"]["allocation"]["devices"]["results"][0] for c in claims if c.get("status", {}).get("allocation")]
        assert len({r["shareID"] for r in results}) == 4 and {r["device"] for r in results} == {"gpu-0"}
        assert driver.log().count("DRA: prepared claim default/share-") == 4
        # One MPS daemon for the four.
        uuid = gpu0["attributes"]["uuid"]["string"]
        control = f"{cluster.base}/mps/share-{uuid}/log/control.log"
        assert open(control).read().count("start pid=") == 1
        # The fifth: 4 x 19Gi + 19Gi > 81559Mi.
        share_pod(cluster, pods[4], "19Gi")
        msg = wait("FailedScheduling", lambda: scheduling_failure(cluster, pods[4]))
        print("scheduler:", msg)
        assert cluster.get("pod", pods[4])["status"]["phase"] == "Pending"
        # One share goes: the fifth runs.
        cluster.kubectl("delete", "pod", pods[0], "--wait=true", "--timeout=60s")
        cluster.wait_phase(pods[4], "Running")
    finally:
        cluster.kubectl("delete", "pod", *pods, "--wait=true", "--timeout=60s", "--ignore-not-found", check=False)
    driver.wait_log(f"DRA: unprepared claim default/{pods[4]}")


def test_share_job_outlives_gpulet(cluster, driver):
    """Issue 38 on a DRA share: a pod whose container is an MPS client (the
    simulator's stand-in: it fails at once and for good if its daemon goes)
    runs on a share of GPU 0 through gpulet SIGKILL then a start, and
    SIGTERM then a start: the share's MPS daemon is adopted (started once),
    the pod keeps running with restart count 0, and a watch of the node's
    ResourceSlices never sees the pool absent or its generation moved."""
    import threading
    import time
    wait_devices(cluster, 8)
    client = (driver.root / "usr" / "bin" / "gpulet-mps-client").read_text()
    req = request("v1", "gpu", "gpu.nvidia.com", ["device.attributes['gpu.nvidia.com'].index == 0"],
                  capacity={"requests": {"memory": "8Gi"}})
    drakit.claim_pod(cluster, "v1", "share-job", req, client)
    seen, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            slices = drakit.pool_slices(cluster)
            seen.append(slices[0]["spec"]["pool"]["generation"] if slices else None)
            time.sleep(0.1)
    try:
        cluster.wait_phase("share-job", "Running")
        wait("the job bound to its daemon", lambda: "bound to daemon" in cluster.kubectl("logs", "share-job"))
        uuid = next(d for d in slice_devices(cluster) if d["name"] == "gpu-0")["attributes"]["uuid"]["string"]
        control = f"{cluster.base}/mps/share-{uuid}/log/control.log"
        starts = open(control).read().count("start pid=")
        t = threading.Thread(target=watch, daemon=True)
        t.start()
        adopted = driver.log().count(f"MPS daemon for share-{uuid} is up, adopted")
        for how in ("SIGKILL", "SIGTERM"):
            if how == "SIGKILL":
                driver.proc.kill()
                driver.proc.wait(timeout=30)
            else:
                driver.stop()
            driver.start()
            adopted += 1
            driver.wait_log(f"MPS daemon for share-{uuid} is up, adopted", count=adopted)
            time.sleep(4)  # the stand-in fails within 3 s of its daemon's going
            st = cluster.get("pod", "share-job")["status"]
            assert st["phase"] == "Running", (how, st, cluster.kubectl("logs", "share-job"))
            assert st["containerStatuses"][0]["restartCount"] == 0, how
        stop.set()
        t.join()
        assert open(control).read().count("start pid=") == starts
        assert None not in seen and len(set(seen)) == 1, seen
        print(f"{len(seen)} looks at the pool through two restarts: always there, generation {seen[0]}")
    finally:
        stop.set()
        cluster.kubectl("delete", "pod", "share-job", "--wait=true", "--timeout=60s",
                        "--ignore-not-found", check=False)
    driver.wait_log("DRA: unprepared claim default/share-job")
