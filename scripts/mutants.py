#!/usr/bin/python3
"""Mutants that must die: gpulet built with one deliberate fault at a time,
and the tests named for that fault run against it. A mutant is killed when
every test named for it fails; one that any of them passes has survived,
and the run fails (a test that cannot see its fault proves nothing).

Each row breaks one invariant the product exists to keep. The fault is an
exact text replacement, which must match once: a row that no longer applies
fails loudly, to be updated with the code it guards. The tests first run
once on the unmutated build, so that a killed mutant means the fault, not
a test that fails anyway.

    scripts/mutants.py [--build DIR] [--jobs N] [NAME...]

It works on a copy of the tree (DIR/tree, the files git knows or would
add), built plain (RelWithDebInfo) in DIR/build; the checkout is never
changed. Mutants are built one at a time, each one's binaries kept in
DIR/mN, and the tests of N mutants run at once (default 2). The last
line counts: N killed, M survived."""
import argparse
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
T = "tests/integration/"

# (name, file, text, replacement, tests that must each fail)
MUTANTS = [
    ("allocate refuses healthy devices", "src/plugin/allocate.c",
     "const char *why = plugin_device_unhealthy(p, d);",
     'const char *why = p ? "mutant" : NULL;',
     [T + "test_plugin.py::test_allocate_each_strategy"]),
    ("Allocate hands out another GPU's device node", "src/plugin/allocate.c",
     'snprintf(node, sizeof node, "nvidia%u", g->minor);',
     'snprintf(node, sizeof node, "nvidia%u", g->minor ^ 1);',
     [T + "test_plugin.py::test_allocate_each_strategy"]),
    ("ListAndWatch reports every device healthy", "src/plugin/plugin.c",
     'plugin_device_unhealthy(p, &p->devs[i]) ? "Unhealthy" : "Healthy"',
     '"Healthy"',
     [T + "test_plugin.py::test_xid_unhealthy_then_recovers"]),
    ("the watch ignores 410 Gone", "src/kube/watch.c",
     "    switch (kind) {\n    case KUBE_EVENT_BAD:",
     "    if (kind == KUBE_EVENT_ERROR)\n        kind = KUBE_EVENT_BOOKMARK;\n"
     "    switch (kind) {\n    case KUBE_EVENT_BAD:",
     [T + "test_api.py::test_watch_relists_on_the_410_itself"]),
    ("every API request opens its own connection", "src/kube/curl.c",
     "    kube_curl.setopt(h, CURLOPT_PIPEWAIT, 1L);",
     "    kube_curl.setopt(h, CURLOPT_PIPEWAIT, 1L);\n    kube_curl.setopt(h, CURLOPT_FORBID_REUSE, 1L);",
     [T + "test_api.py::test_one_client_no_polling_and_no_writes_when_equal"]),
    ("the XID gauge keeps its first value", "src/metrics/metrics.c",
     "    md->last_xid = d->last_xid;",
     "    if (!md->last_xid)\n        md->last_xid = d->last_xid;",
     [T + "test_metrics.py::test_xid_and_lost_gpu"]),
    ("a MIG device's fault is dropped", "src/agent/health.c",
     "else if (gpu_health_on_xid(h, xid, now)) {",
     "else if (k < 0 && gpu_health_on_xid(h, xid, now)) {",
     [T + "test_mig.py::test_health_per_gpu_instance"]),
    ("the slice loses productName", "src/dra/slice.c",
     '    dra_attr_string(attrs, "productName", g->name);\n', "",
     [T + "test_dra.py::test_dra_api_versions[v1beta2]"]),
    ("a prepare is answered with no checkpoint written", "src/dra/checkpoint.c",
     "    writer_put(d->claims.writer, &text);", "    strbuf_free(&text);",
     [T + "test_dra.py::test_dra_checkpoint_survives_sigkill"]),
    ("a prepare is answered before its checkpoint is on disk", "src/dra/prepare.c",
     "    dra_job_wait(j, d->claims.writer);", "",
     [T + "test_dra.py::test_dra_answers_once_its_files_are_on_disk"]),
    ("an unprepare ignores the claims still being prepared", "src/dra/prepare.c",
     "        dra_prepare_cancel(d, uid);\n",
     "        (void)dra_prepare_cancel;\n",
     [T + "test_dra.py::test_dra_unprepare_cancels_a_prepare_in_flight"]),
    ("a failed write is answered as success", "src/dra/prepare.c",
     "        else if (p && j->write_error[0])",
     "        else if (p && !j)",
     [T + "test_dra.py::test_dra_failed_write_fails_the_answer"]),
    ("a plugin registers again before the kubelet let go of the old one", "src/agent/agent.c",
     "    int64_t in = agent_reregister_in(a);", "    int64_t in = 0;",
     [T + "test_plugin.py::test_reregistration_waits_for_the_kubelet[0.5]"]),
    ("the hand-over is answered before the kubelet let go of the plugins", "src/agent/answer.c",
     "                agent_reregister_in(a) != 0;",
     "                false;",
     [T + "test_sharing.py::test_mps_hand_over"]),
    ("an MPS resource registers before its daemon is adopted", "src/plugin/lifecycle.c",
     "    if (!p->unavailable || p->registrations || waited >= LIFECYCLE_HOLD_MS)",
     "    if (1)",
     [T + "test_sharing.py::test_mps_hand_over"]),
    ("NVML is called on the loop (the MPS compute mode set there)", "src/agent/mps.c",
     "        j->posted = gpu_lanes_post(a->lanes, g, &j->job);",
     "        agent_mode_run(&j->job);\n        j->posted = true;",
     [T + "test_sharing.py::test_mps_compute_mode"]),
    ("files are written on the loop", "src/util/writer.c",
     "    uv_queue_work(w->loop, &w->running->work, writer_work, writer_done);",
     "    writer_work(&w->running->work);\n    writer_done(&w->running->work, 0);",
     [T + "test_dra.py::test_dra"]),  # tests/shim/loop_disk.c reports the writes
    ("a plugin's socket is bound on the loop", "src/plugin/lifecycle.c",
     "        p->binding = unixsock_bind_start(p->loop, p->socket, 0755, 128, lifecycle_bound, p);",
     "        int fd;\n        struct unixsock_id id;\n        struct err why;\n"
     "        int rc = unixsock_bind(p->socket, 128, &fd, &id, &why);\n"
     "        lifecycle_bound(p, rc < 0 ? -1 : fd, id, rc < 0 ? &why : NULL);",
     [T + "test_plugin.py::test_deleted_socket_is_recreated"]),
    ("the MIG manager changes a GPU that runs a process", "src/agent/migmgr.c",
     "    if ((j->in_use = migmgr_in_use(n, g, &j->e)))",
     "    if ((j->in_use = (migmgr_in_use(n, g, &j->e) && false)))",
     [T + "test_migmgr.py::test_a_gpu_in_use_waits"]),
    ("the MIG manager changes a GPU a pod holds", "src/agent/migmgr.c",
     "    if (j->held[0]) {", "    if (j->held[0] && 0) {",
     [T + "test_migmgr.py::test_a_gpu_a_pod_holds_waits"]),
    ("the MIG manager destroys a layout before it knows the new one fits", "src/agent/migmgr.c",
     "    if (on && j->want_mig && !gpu_mig_fits(g, items, j->want.n)) {",
     "    if (0) {",
     [T + "test_migmgr.py::test_bad_layouts_fail_and_change_nothing_else[too-many-the layout does not fit]"]),
    ("the MIG manager reads its file only at start", "src/agent/migmgr.c",
     "        migmgr_read_start(a); /* then applies */", "        migmgr_apply(a);",
     [T + "test_migmgr.py::test_the_file_is_read_again_at_each_label"]),
    ("a share's memory limit is not set", "src/dra/claim_mps.c",
     "compute, mib ? pinned : NULL, &edits);", "compute, NULL, &edits);",
     [T + "test_dra.py::test_dra_shares"]),
    ("an MPS daemon's memory limit is not set", "src/mps/control.c",
     'strbuf_printf(&t, "set_default_device_pinned_mem_limit %u %lluM\\n", i, m->spec.memory_mib[i]);',
     "(void)t;",
     [T + "test_sharing.py::test_mps"]),
    ("gpulet's exit ends the MPS daemons", "src/agent/mps.c",
     "mps_stop(a->mps[r], MPS_LEAVE, false);",
     "mps_stop(a->mps[r], MPS_END, false);",
     [T + "test_sharing.py::test_mps_clients_outlive_gpulet"]),
]


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def copy_tree(dest):
    """The files git knows or would add: the checkout as a build sees it.
    A file is written only where its text differs, so that the build's
    clock sees exactly what changed since the last run (a mutant included)."""
    names = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src, dst = ROOT / name, dest / name
        if src.is_file() and not src.is_symlink():
            data = src.read_bytes()
            if not dst.is_file() or dst.read_bytes() != data:
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(data)
                dst.chmod(src.stat().st_mode & 0o777)


def build(tree, out):
    r = subprocess.run(["cmake", "--build", str(out), "--target", "gpulet", "nvml_sim"], capture_output=True,
                       text=True)
    if r.returncode:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
    return r.returncode == 0


def run_tests(out, tests, junit, jobs=1):
    """The outcome of each test: True passed, False failed (or errored)."""
    env = dict(os.environ, GPULET_SOURCE=str(ROOT), GPULET_BIN=str(out / "gpulet"),
               GPULET_SIM_LIB=str(out / "libgpulet-nvml-sim.so"), GPULET_SANITIZE="OFF")
    junit.unlink(missing_ok=True)
    side_by_side = ["-n", str(jobs)] if jobs > 1 else []
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout=300",
                    "--junitxml", str(junit), *side_by_side, *tests], cwd=ROOT, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not junit.exists():  # pytest-timeout ends the whole run: a hang is a failure
        return {t: False for t in tests}
    import xml.etree.ElementTree as ET
    seen = {}
    for c in ET.parse(junit).getroot().iter("testcase"):
        name = c.get("name")
        bad = c.find("failure") is not None or c.find("error") is not None
        skipped = c.find("skipped") is not None
        seen[name] = None if skipped else not bad
    return {t: seen.get(t.split("::")[-1]) for t in tests}


def mutate(tree, out, base, row):
    """Builds one mutant and keeps its binaries apart (DIR/mN), so that its
    tests can run while the next one builds; the tree is restored at once.
    Answers the binaries' folder, or why there are none."""
    index, (_, file, text, repl, _) = row
    path = tree / file
    code = path.read_text()
    if code.count(text) != 1:
        return None, f"its text is in {file} {code.count(text)} times, not once: update the row"
    path.write_text(code.replace(text, repl))
    try:
        if not build(tree, out):
            return None, "it does not build: update the row"
        kept = base / f"m{index}"
        shutil.rmtree(kept, ignore_errors=True)  # a binary still running keeps its own copy
        kept.mkdir()
        for lib in ("gpulet", "libgpulet-nvml-sim.so"):
            shutil.copy2(out / lib, kept / lib)
        return kept, None
    finally:
        path.write_text(code)


def judge(row, kept, why):
    """One mutant's line: killed when every test named for it fails."""
    index, (name, _, _, _, kill) = row
    if kept is None:
        return f"mutant {name}: FAILED ({why})", False
    begun = time.monotonic()
    outcome = run_tests(kept, kill, kept / "mutant.xml")
    alive = [t for t, ok in outcome.items() if ok is not False]
    if alive:
        return f"mutant {name}: FAILED (survived {', '.join(alive)})", False
    took = time.monotonic() - begun
    return f"mutant {name}: killed by {', '.join(t.split('/')[-1] for t in kill)} ({took:.0f} s)", True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build-mutants"), help="where the copy is built")
    ap.add_argument("--jobs", type=int, default=2, help="mutants whose tests run at once (default 2)")
    ap.add_argument("names", nargs="*", help="only the mutants whose name contains one of these")
    args = ap.parse_args()
    rows = [m for m in MUTANTS if not args.names or any(n in m[0] for n in args.names)]
    if not rows:
        ap.error("no mutant is named like that")
    if args.jobs < 1:
        ap.error("--jobs must be 1 or more")
    base = Path(args.build).resolve()
    tree, out = base / "tree", base / "build"
    copy_tree(tree)
    sh("cmake", "-S", str(tree), "-B", str(out), "-G", "Ninja", "-DGPULET_TESTS=OFF", stdout=subprocess.DEVNULL)
    if not build(tree, out):
        print("mutants: the unmutated copy does not build")
        return 1
    tests = sorted({t for m in rows for t in m[4]})
    begun = time.monotonic()
    first = run_tests(out, tests, base / "baseline.xml", jobs=args.jobs)
    broken = [t for t, ok in first.items() if not ok]
    if broken:
        print("mutants: these fail or skip on the unmutated build, so they can kill nothing: " + ", ".join(broken))
        return 1
    print(f"mutants: {len(tests)} tests pass unmutated ({time.monotonic() - begun:.0f} s)", flush=True)
    # Builds one at a time (one tree), tests side by side: the tests mostly
    # wait on the agent's timers. Lines come in the table's order.
    with ThreadPoolExecutor(args.jobs) as pool:
        pending = [pool.submit(judge, row, *mutate(tree, out, base, row)) for row in enumerate(rows)]
        verdicts = []
        for f in pending:
            line, ok = f.result()
            print(line, flush=True)
            verdicts.append(ok)
    killed = sum(verdicts)
    print(f"{killed} killed, {len(verdicts) - killed} survived")
    return 0 if killed == len(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
