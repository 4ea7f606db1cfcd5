"""The docs run: every shell block of README.md and docs/*.md is run here,
against the simulator, as a user would paste it, and the output a block
shows (`$ command` then its lines) is compared with what the command
prints. A block that needs a cluster, root or a GPU says so just above it
(`<!-- docs: not run: WHY -->`) and is reported skipped with that reason;
`<!-- docs: with the demo agent -->` runs the block beside README's demo
agent; `; needs TOOL` after either says the block runs a tool the test
tools bring (scripts/install-deps.sh --test): where it is missing, as on a
copy without .tools/, the block is skipped naming it (in CI, failed).
Every fence names its language, so no shell block hides as text."""
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import GPULET, SIM_LIB, SOURCE, check_clean, skip_or_fail

DOCS = [SOURCE / "README.md", *sorted((SOURCE / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.S | re.M)
MARK = re.compile(r"<!-- docs: (?P<what>not run|with the demo agent)(?:; needs (?P<needs>[\w-]+))?"
                  r"(?::\s*(?P<why>.*?))?\s*-->\s*$")
AGENT = re.compile(r"^(build/)?gpulet agent\b")


class Block:
    def __init__(self, path, text, m):
        self.path = path.relative_to(SOURCE)
        self.line = text.count("\n", 0, m.start()) + 1
        self.lang = m.group("lang")
        body = m.group("body")
        indent = len(m.group("indent"))
        self.body = "\n".join(line[indent:] for line in body.splitlines())
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        self.mark = mark.group("what") if mark else None
        self.why = mark.group("why") if mark else None
        self.needs = mark.group("needs") if mark else None

    @property
    def id(self):
        return f"{self.path}:{self.line}"


def all_blocks():
    for path in DOCS:
        text = path.read_text()
        for m in FENCE.finditer(text):
            yield Block(path, text, m)


SHELL = [b for b in all_blocks() if b.lang == "sh"]


def test_every_fence_names_its_language():
    bare = [b.id for b in all_blocks() if not b.lang]
    assert not bare, f"fences without a language (sh, text, yaml, ...): {bare}"
    marked = [b.id for b in all_blocks() if b.mark and b.lang != "sh"]
    assert not marked, f"a docs mark above a block that is not sh: {marked}"


def commands(body):
    """(command, expected output lines) of a block: `$ ` lines are commands
    and the lines under them their output; without `$`, every line is a
    command. A line ending in a backslash goes on with the next."""
    body = re.sub(r"\\\n[ \t]*", " ", body)
    prompted = any(line.startswith("$ ") for line in body.splitlines())
    out = []
    for line in body.splitlines():
        if prompted and not line.startswith("$ "):
            if out and line.strip():
                out[-1][1].append(line.rstrip())
            continue
        code = line[2:] if prompted else line
        if code.strip():
            out.append((code.rstrip(), []))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shown(want, got):
    """Each line the doc shows, in order, among the lines printed; a `...`
    stands for any lines."""
    lines = [line.rstrip() for line in got.splitlines()]
    at = 0
    for w in want:
        if w.strip() == "...":
            continue
        while at < len(lines) and lines[at] != w:
            at += 1
        if at == len(lines):
            return f"the doc shows {w!r}, the command did not print it (in order)"
        at += 1
    return None


class Sandbox:
    """A user's shell: their own home and runtime directory, gpulet on
    PATH and build/ under the working directory, the suite's Prometheus
    tools, and the simulator."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.port = free_port()
        home, xdg, bindir, work = (tmp / n for n in ("home", "xdg", "bin", "work"))
        for d in (home, bindir, work):
            d.mkdir()
        xdg.mkdir(mode=0o700)
        (bindir / "gpulet").symlink_to(Path(GPULET).resolve())
        (work / "build").symlink_to(Path(GPULET).resolve().parent)
        tools = SOURCE / ".tools" / "bin"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("GPULET_") and k not in ("KUBECONFIG", "NODE_NAME")}
        self.env.update(HOME=str(home), XDG_RUNTIME_DIR=str(xdg), GPULET_SIM_LIB=str(Path(SIM_LIB).resolve()),
                        PATH=f"{bindir}:{tools}:{os.environ['PATH']}")
        self.work = work
        self.agents = []

    def text(self, code):
        # The demo's port is this test's own: the suite shares the machine.
        return code.replace("localhost:9400", f"127.0.0.1:{self.port}")

    def agent(self, code):
        n = len(self.agents)
        log = self.tmp / f"agent{n}.log"
        with open(log, "w") as f:
            p = subprocess.Popen(["bash", "-c", f"exec {self.text(code)} --metrics-listen "
                                  f"127.0.0.1:{self.port}"], cwd=self.work, env=self.env,
                                 stdout=f, stderr=subprocess.STDOUT)
        self.agents.append((p, log))
        deadline = time.monotonic() + 30
        while "agent running" not in log.read_text():
            assert p.poll() is None and time.monotonic() < deadline, f"{code}:\n{log.read_text()}"
            time.sleep(0.05)

    def run(self, code):
        p = subprocess.run(["bash", "-c", self.text(code)], cwd=self.work, env=self.env,
                           capture_output=True, text=True, timeout=60)
        check_clean(p.stderr)
        return p

    def close(self):
        for p, log in self.agents:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=15)
            check_clean(log.read_text())


@pytest.mark.parametrize("block", SHELL, ids=[b.id for b in SHELL])
def test_shell_block(block, tmp_path):
    if block.mark == "not run":
        assert block.why, f"{block.id}: say why it is not run"
        pytest.skip(f"{block.id} not run: {block.why}")
    if block.needs and not shutil.which(block.needs):
        skip_or_fail(f"{block.id} needs {block.needs}, which is not on PATH "
                     "(scripts/install-deps.sh --test unpacks it into .tools/bin)")
    box = Sandbox(tmp_path)
    try:
        if block.mark == "with the demo agent":
            box.agent("gpulet agent --simulate dgx-h100")
        for code, want in commands(block.body):
            if AGENT.match(code):
                box.agent(code.split("  #")[0].strip())
                continue
            # What a block shows is the settled state (metrics sampled twice,
            # a fault seen): a command with output shown gets a few seconds.
            deadline = time.monotonic() + (10 if want else 0)
            while True:
                p = box.run(code)
                problem = (f"exited {p.returncode}" if p.returncode else None) or shown(want, p.stdout + p.stderr)
                if not problem or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert not problem, f"{block.id}: `{code}`: {problem}:\n{p.stdout}{p.stderr}"
    finally:
        box.close()


def table_rows(doc, header):
    """The first column of the markdown table under the line header."""
    text = (SOURCE / doc).read_text()
    table = text[text.index(header):].split("\n\n")[1]
    return {re.match(r"`?([\w.-]+)", row.split("|")[1].strip()).group(1)
            for row in table.splitlines()[2:]}


def test_simulator_doc_names_every_preset_and_product():
    presets = subprocess.run([GPULET, "sim", "presets"], capture_output=True, text=True,
                             check=True).stdout.split()
    assert set(presets) <= table_rows("docs/simulator.md", "**Presets:**"), presets
    products = re.findall(r'\.key = "([\w-]+)"', (SOURCE / "sim" / "products.c").read_text())
    assert set(products) <= table_rows("docs/simulator.md", "**Products.**"), products


def test_readme_names_every_command_and_output():
    """README's command table has every command `gpulet --help` lists, with
    each output format its own --help offers."""
    readme = (SOURCE / "README.md").read_text()
    table = readme[readme.index("## Commands"):]
    usage = subprocess.run([GPULET, "--help"], capture_output=True, text=True).stdout
    for name in re.findall(r"^  (\w[\w-]*) ", usage, re.M):
        rows = [r for r in table.splitlines() if r.startswith(f"| `gpulet {name}")]
        assert rows, f"README's commands lack gpulet {name}"
        own = subprocess.run([GPULET, name, "--help"], capture_output=True, text=True).stdout
        formats = re.search(r"-o (?:text\|json|table[|\w]*|[\w]+\|[\w|]+)", own)
        for fmt in (formats.group(0)[3:].split("|") if formats else []):
            assert any(fmt in r for r in rows), f"README's gpulet {name} row lacks -o {fmt}"
