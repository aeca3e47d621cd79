"""Runnable examples in README.md and docs/: find the marked blocks, run them in a scratch copy of the
repository, compare or rewrite what they print.

Shared by tests/test_docs_run.py (compare) and scripts/update_docs.py (rewrite from a real run). The
convention is in docs/README.md ("How the docs stay true"). In short, an HTML comment right before a code
block marks it:

    <!-- docs: run -->                       a console block: `$ ` command lines, each followed by its output
    <!-- docs: {file: mtp.yaml} -->          a file block: its text is written to that path in the scratch copy
    <!-- docs:                               or several options, as YAML
    session: demo
    needs: [sim]
    -->

Options (all optional): `session` (blocks of one doc with the same session share one scratch copy and run
in order; otherwise each run block has its own), `copy` (repository paths copied into the scratch copy, the
union over a session's blocks; default COPY; `[]` an empty directory), `setup` (bash run first, its output
hidden, that must exit 0), `env` (variables), `needs` (`cluster`, `dynamo`, `sim`, `slow`: where they are missing
the session is skipped and says why), `without` (extras whose packages the block's commands do not see, as
in a venv with the core alone), `vary` (what legitimately differs between runs: preset names from
VARY or regular expressions; each match reads as `<vary>` on both sides), `transient` (regular expressions
for progress lines printed only while a wait lasts, so a run may print them or not: a line that matches is
left out on both sides), `rerun` (a regular expression for a line a busy host may make a run print, taking
another path than the doc's, such as an inconclusive bench gate: a session that does not match and printed
one is run once more, and must match then), `timeout` (seconds for the block, default 120), `images` (files
the block draws: the test holds them to the committed bytes, scripts/update_docs.py copies them back).

Each command runs in one bash per block, stdout and stderr together, from the scratch copy's root, with
`stackpin` (this checkout's entry point run by this interpreter) and the interpreter's `bin/` first on PATH,
`.venv` linking to its environment and `.dynamobed` to the checkout's Dynamo bed (make dynamo-env). A command
that exits non-zero is followed by `(exit N)`, which the doc shows too. A line that is only `...` in the doc
stands for any number of lines. Ports, temp paths and the scratch copy's own path are normalised on both
sides; nothing else is unless a block says `vary`.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]

# What a scratch copy holds unless a block says `copy`: the repository's inputs, not its code (the code under
# test is the interpreter's stackpin).
COPY = ["profiles", "lockfiles", "manifests", "history", "deployments", "schema", "tests/data", "docs/examples"]
NEEDS = {"cluster", "dynamo", "sim", "slow"}
VARY = {
    # 1.9 s, 12 ms, 0.53s, 3 min
    "durations": r"\b\d+(?:\.\d+)?\s?(?:ms|µs|us|s|min)\b",
    # 2026-12-02T09:26:08.239469Z, 2026-12-02 09:26:08
    "times": r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?",
    "pids": r"\bpid \d+",
    "digests": r"\bsha256:[0-9a-f]{64}\b",
}
DEFAULT_TIMEOUT = 120

# Up to three spaces (a list item's marker); four would be an indented code block showing one.
_MARKER = re.compile(r"^(?P<indent> {0,3})<!--\s*docs:(?P<body>.*)$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_PORT = re.compile(r"\b(127\.0\.0\.1|localhost|0\.0\.0\.0|\[::1\]):\d{2,5}\b")
_TMP = re.compile(r"/tmp/[^\s'\"),:]+")
_EXIT = re.compile(r"^\(exit \d+\)$")


class DocError(ValueError):
    """A marker or block this module cannot read: names the doc and line."""


@dataclass
class Command:
    line: int  # 1-based line of the `$ ` line in the doc
    text: str  # the command as bash reads it (continuation lines joined with newlines)
    shown: list[str]  # the command's lines as the doc shows them, without the `$ ` prompt and indent
    output: list[str]  # the output lines the doc shows


@dataclass
class Block:
    doc: str
    line: int  # 1-based line of the marker
    kind: str  # "run" or "file"
    options: dict[str, Any]
    indent: str  # what every body line starts with
    body_start: int  # 0-based index of the first body line
    body_end: int  # 0-based index after the last body line
    commands: list[Command] = field(default_factory=list)
    text: str = ""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def needs(self) -> list[str]:
        return _as_list(self.options.get("needs"))


@dataclass
class Session:
    doc: str
    name: str
    blocks: list[Block]

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.name}"

    @property
    def needs(self) -> set[str]:
        return {need for block in self.blocks for need in block.needs}


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return value.split()
    return [str(v) for v in value]


def parse_doc(doc: str, text: str | None = None) -> list[Block]:
    """Every marked block of one doc (a path relative to the repository root), in order."""
    lines = (text if text is not None else (ROOT / doc).read_text()).splitlines()
    blocks: list[Block] = []
    i = 0
    fence: str | None = None  # inside a code block no marker is looked for (docs/README.md shows some)
    while i < len(lines):
        match = _MARKER.match(lines[i])
        opens = _FENCE.match(lines[i])
        if opens and (fence is None or opens[1] == fence):
            fence = opens[1] if fence is None else None
        if fence is not None or not match:
            i += 1
            continue
        marker_line, indent = i + 1, match["indent"]
        body = match["body"]
        while "-->" not in body:
            i += 1
            if i >= len(lines):
                raise DocError(f"{doc}:{marker_line}: docs marker not closed with -->")
            body += "\n" + lines[i][len(indent):]
        body = body[: body.index("-->")]
        options = _options(doc, marker_line, body)
        i += 1
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i >= len(lines):
            raise DocError(f"{doc}:{marker_line}: docs marker not followed by a code block")
        if lines[i].startswith(indent + "```"):
            closing = lines[i][len(indent):len(indent) + 3]
            start = i + 1
            end = start
            while end < len(lines) and not lines[end].startswith(indent + closing):
                end += 1
            if end >= len(lines):
                raise DocError(f"{doc}:{i + 1}: code block not closed")
            block_indent = indent
            i = end + 1
        elif lines[i].startswith(indent + "    "):
            block_indent = indent + "    "
            start = end = i
            while end < len(lines) and (lines[end].startswith(block_indent) or not lines[end].strip()):
                end += 1
            while end > start and not lines[end - 1].strip():
                end -= 1
            i = end
        else:
            raise DocError(f"{doc}:{marker_line}: docs marker not followed by a code block")
        body_lines = [line[len(block_indent):] for line in lines[start:end]]
        kind = "file" if "file" in options else "run"
        block = Block(doc, marker_line, kind, options, block_indent, start, end)
        if kind == "file":
            block.text = "\n".join(body_lines) + "\n"
        else:
            block.commands = _commands(doc, start, body_lines)
            if not block.commands:
                raise DocError(f"{doc}:{marker_line}: a run block without a `$ ` command line")
        blocks.append(block)
    return blocks


def _options(doc: str, line: int, body: str) -> dict[str, Any]:
    body = body.strip()
    if body in ("", "run"):
        return {}
    try:
        options = yaml.safe_load(body)
    except yaml.YAMLError as exc:
        raise DocError(f"{doc}:{line}: docs marker is not YAML: {exc}") from exc
    if not isinstance(options, dict):
        raise DocError(f"{doc}:{line}: docs marker: expected `run` or a mapping of options")
    unknown = set(options) - {"session", "copy", "setup", "env", "needs", "vary", "transient", "timeout", "images",
                              "file", "without", "rerun"}
    if unknown:
        raise DocError(f"{doc}:{line}: docs marker: unknown option(s) {', '.join(sorted(unknown))}")
    bad_needs = set(_as_list(options.get("needs"))) - NEEDS
    if bad_needs:
        raise DocError(f"{doc}:{line}: docs marker: unknown need(s) {', '.join(sorted(bad_needs))}")
    return options


def _commands(doc: str, start: int, body: list[str]) -> list[Command]:
    commands: list[Command] = []
    k = 0
    while k < len(body):
        line = body[k]
        if line.startswith("$ "):
            shown = [line[2:]]
            first = k
            while shown[-1].endswith("\\") and k + 1 < len(body):
                k += 1
                shown.append(body[k])
            commands.append(Command(start + first + 1, "\n".join(shown), shown, []))
        elif commands:
            commands[-1].output.append(line)
        else:
            raise DocError(f"{doc}:{start + k + 1}: output before the first `$ ` command")
        k += 1
    return commands


def sessions(docs: list[str] | None = None) -> list[Session]:
    """The runnable sessions of the given docs (default: README.md and docs/*.md)."""
    found: list[Session] = []
    for doc in docs or DOCS:
        by_name: dict[str, Session] = {}
        for block in parse_doc(doc):
            name = str(block.options.get("session") or f"line-{block.line}")
            if name not in by_name:
                by_name[name] = Session(doc, name, [])
                found.append(by_name[name])
            by_name[name].blocks.append(block)
        for session in by_name.values():
            if all(block.kind == "file" for block in session.blocks):
                raise DocError(f"{session.id}: file blocks in a session without a run block")
    return found


def missing(session: Session, cluster: bool = False) -> str | None:
    """Why this session cannot run here, or None."""
    if "sim" in session.needs:
        try:
            import aiconfigurator_core  # noqa: F401
        except ImportError:
            return "needs the `sim` extra (aiconfigurator-core), not installed"
    if "dynamo" in session.needs:
        from stackpin.sim.dynamo import facts

        if not (ROOT / str(facts()["env"]) / "bin" / "python").is_file():
            return f"needs the Dynamo bed's environment ({facts()['env']}: make dynamo-env)"
    if "cluster" in session.needs and not cluster:
        return "needs a Kubernetes API server (envtest)"
    return None


# --- running -----------------------------------------------------------------------------------------------


@dataclass
class Ran:
    """One run block's result: per command, the output lines as shown (scratch path made relative)."""

    block: Block
    outputs: list[list[str]]


class Scratch:
    """A scratch copy of the repository's inputs for one session, never the checkout itself."""

    def __init__(self, base: Path, copy: list[str]) -> None:
        self.root = base / "repo"
        self.root.mkdir(parents=True)
        self.cache = base / "cache"
        self.cache.mkdir()
        for rel in copy:
            src = ROOT / rel
            dst = self.root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, symlinks=True)
            elif src.exists():
                shutil.copy2(src, dst)
            else:
                raise DocError(f"copy: {rel} is not in the repository")
        (self.root / ".venv").symlink_to(Path(sys.prefix))
        if (ROOT / ".dynamobed").is_dir():  # the Dynamo bed's environment, where `sim serve --backend dynamo` looks
            (self.root / ".dynamobed").symlink_to(ROOT / ".dynamobed")
        # `stackpin` as this checkout declares it (pyproject's entry point), run by this interpreter: the
        # environment's own console script is whatever checkout installed it last.
        self.bin = base / "bin"
        self.bin.mkdir()
        module, _, function = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"][
            "stackpin"].partition(":")
        script = self.bin / "stackpin"
        script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n")
        script.chmod(0o755)


def environment(scratch: Scratch, extra: dict[str, Any], kube: dict[str, str] | None = None,
                without: list[str] | None = None) -> dict[str, str]:
    """A new user's environment: the test run's own STACKPIN_* settings left out, stackpin on PATH (and the
    `without` extras' packages hidden)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("STACKPIN_", "PYTEST_", "COLUMNS", "LINES", "KUBECONFIG", "FORCE_COLOR"))}
    env["PATH"] = os.pathsep.join([str(scratch.bin), str(Path(sys.executable).parent), env.get("PATH", "")])
    # The checkout's code first, as the tests import it, whichever checkout the environment was installed from.
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    env["STACKPIN_CACHE_DIR"] = str(scratch.cache)
    env.update(kube or {})
    env.update({k: str(v) for k, v in extra.items()})
    if without:
        env["PYTHONPATH"] = os.pathsep.join([str(_hiding(scratch, without)), env["PYTHONPATH"]])
    return env


# A block's `without: [EXTRA...]`: those extras' packages hidden from its commands, as in a venv that lacks
# them (the meta-path finder tests/test_extras.py uses), through a sitecustomize on PYTHONPATH.
_HIDING = """import sys


class _Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {names!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Hidden())
"""


def _hiding(scratch: Scratch, without: list[str]) -> Path:
    from stackpin.extras import EXTRAS

    unknown = sorted(set(without) - set(EXTRAS))
    if unknown:
        raise DocError(f"without: unknown extra(s) {', '.join(unknown)} (one of {', '.join(sorted(EXTRAS))})")
    names = sorted({module for extra in without for module in EXTRAS[extra]})
    directory = scratch.root.parent / ("without-" + "-".join(sorted(set(without))))
    directory.mkdir(exist_ok=True)
    (directory / "sitecustomize.py").write_text(_HIDING.format(names=tuple(names)))
    return directory


def run_block(block: Block, scratch: Scratch, env: dict[str, str]) -> Ran:
    root = scratch.root
    setup = block.options.get("setup")
    timeout = float(block.options.get("timeout", DEFAULT_TIMEOUT))
    if setup:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", setup], cwd=root, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise DocError(f"{block.where}: setup exited {done.returncode}:\n{done.stdout}{done.stderr}")
    token = secrets.token_hex(8)
    script = ["exec 2>&1"]
    for n, command in enumerate(block.commands):
        script.append(f"printf '\\n@@docrun {token} start {n}@@\\n'")
        script.append(command.text)
        script.append(f"__docrun_rc=$?; printf '\\n@@docrun {token} end {n} %d@@\\n' \"$__docrun_rc\"; "
                      "(exit $__docrun_rc)")
    raw = _run_script("\n".join(script), root, env, timeout, block.where)
    outputs: list[list[str]] = []
    for n in range(len(block.commands)):
        begin = f"\n@@docrun {token} start {n}@@\n"
        end = re.compile(rf"\n@@docrun {token} end {n} (\d+)@@\n")
        if begin not in raw:
            raise DocError(f"{block.where}: the block stopped before command {n + 1}:\n{raw}")
        rest = raw[raw.index(begin) + len(begin):]
        finish = end.search(rest)
        if finish is None:
            raise DocError(f"{block.where}: command {n + 1} did not finish:\n{rest}")
        text = rest[: finish.start()]
        lines = text.splitlines() if text else []
        lines = [shown(line, root) for line in lines]
        rc = int(finish[1])
        if rc:
            lines.append(f"(exit {rc})")
        outputs.append(lines)
    return Ran(block, outputs)


def _run_script(script: str, root: Path, env: dict[str, str], timeout: float, where: str) -> str:
    """Run a block's script in one bash, in a process group of its own, and return what it printed.

    What the block started in the background (`stackpin sim serve ... &`) dies with it: the group is sent
    SIGTERM when bash ends (SIGKILL after GRACE_S). The output goes to a file, not a pipe, so a background
    process that keeps stdout open cannot hold the block past its end."""
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(["bash", "-c", script], cwd=root, env=env, stdin=subprocess.DEVNULL,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _end_group(process.pid)
            process.wait()
            out.seek(0)
            raise DocError(f"{where}: the block ran past its timeout ({timeout:g} s):\n"
                           + out.read().decode("utf-8", "replace")) from exc
        _end_group(process.pid)
        out.seek(0)
        return out.read().decode("utf-8", "replace")


GRACE_S = 10.0


def _end_group(pgid: int) -> None:
    """SIGTERM to what is left of a block's process group, SIGKILL to what outlives GRACE_S."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def shown(line: str, root: Path) -> str:
    """An output line as a doc shows it: the scratch copy's path relative, the environment `.venv`, no trailing
    blanks."""
    for path in {str(root), str(root.resolve())}:
        line = line.replace(path + "/", "").replace(path, ".")
    line = line.replace(str(Path(sys.prefix)) + "/", ".venv/")
    return line.rstrip()



def run_session(session: Session, base: Path, kube: dict[str, str] | None = None) -> list[Ran]:
    """Run every block of a session in order in a scratch copy under `base` (a fresh directory)."""
    copy: list[str] = []
    for block in session.blocks:
        copy.extend(rel for rel in _as_list(block.options.get("copy")) if rel not in copy)
    said = any("copy" in block.options for block in session.blocks)  # `copy: []`: an empty directory
    scratch = Scratch(base, copy if said else COPY)
    with contextlib.ExitStack() as stack:
        if kube is not None and "cluster" in session.needs:
            kube = stack.enter_context(own_cluster(base / "envtest"))
        return _run_blocks(session, scratch, kube)


@contextlib.contextmanager
def own_cluster(workdir: Path) -> Iterator[dict[str, str]]:
    """A fresh API server for one session, what `python -m devkit.envtest` gives a reader: its namespaces
    empty (sessions share no `dynamo`), the garbage-collector stand-in running (a recreate completes), and
    tests/kube.py's rack nodes (apply finds a node for each pool). A few seconds to start."""
    from devkit.envtest import GarbageCollector, start_envtest
    from devkit.fleetbed import add_rack_nodes

    with start_envtest(workdir) as env:
        add_rack_nodes(env)
        collector = GarbageCollector(env).start()
        try:
            yield {"KUBECONFIG": str(env.kubeconfig)}
        finally:
            collector.stop()


def _run_blocks(session: Session, scratch: Scratch, kube: dict[str, str] | None) -> list[Ran]:
    env_extra: dict[str, Any] = {}
    ran: list[Ran] = []
    for block in session.blocks:
        if block.kind == "file":
            target = scratch.root / str(block.options["file"])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text)
            continue
        env_extra.update(block.options.get("env") or {})
        ran.append(run_block(block, scratch, environment(scratch, env_extra, kube,
                                                      _as_list(block.options.get("without")))))
    return ran


# --- comparing ---------------------------------------------------------------------------------------------


def _patterns(block: Block) -> list[re.Pattern[str]]:
    return [re.compile(VARY.get(v, v)) for v in _as_list(block.options.get("vary"))]


def _transient(block: Block) -> list[re.Pattern[str]]:
    return [re.compile(t) for t in _as_list(block.options.get("transient"))]


def normalise(lines: list[str], patterns: list[re.Pattern[str]],
              transient: list[re.Pattern[str]] | None = None) -> list[str]:
    out = []
    for line in lines:
        if transient and any(t.search(line) for t in transient):
            continue
        line = _PORT.sub(r"\1:<port>", line.rstrip())
        line = _TMP.sub("<tmp>", line)
        if patterns:
            for pattern in patterns:
                line = pattern.sub("<vary>", line)
            line = re.sub(r"\s{2,}", " ", line)
        out.append(line)
    return out


def _matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line, a line `...` in `expected` standing for any number of lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(_matches(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and _matches(expected[1:], actual[1:])


def transcript(block: Block, outputs: list[list[str]] | None = None) -> list[str]:
    """The block as the doc shows it (or with `outputs` in place of the doc's)."""
    lines: list[str] = []
    for n, command in enumerate(block.commands):
        lines.append("$ " + command.shown[0])
        lines.extend(command.shown[1:])
        lines.extend(command.output if outputs is None else outputs[n])
    return lines


def mismatch(ran: Ran) -> str | None:
    """None when the doc shows what the run printed, else a unified diff naming the doc and line."""
    block = ran.block
    patterns, transient = _patterns(block), _transient(block)
    expected = normalise(transcript(block), patterns, transient)
    actual = normalise(transcript(block, ran.outputs), patterns, transient)
    if _matches(expected, actual):
        return None
    diff = difflib.unified_diff(expected, actual, f"{block.where} (the doc)", f"{block.where} (this run)",
                                lineterm="", n=2)
    return "\n".join(diff)


def busy_host(ran: list[Ran]) -> str | None:
    """The first line of a session's run that its `rerun` pattern names (a path a busy host took), or None."""
    for result in ran:
        pattern = result.block.options.get("rerun")
        if pattern:
            found = next((line for out in result.outputs for line in out if re.search(pattern, line)), None)
            if found is not None:
                return found
    return None


def rewrite(text: str, doc: str, results: list[Ran]) -> str:
    """The doc's text with each run block that no longer matches replaced by what its run printed."""
    lines = text.splitlines()
    ending = "\n" if text.endswith("\n") else ""
    for ran in sorted(results, key=lambda r: r.block.body_start, reverse=True):
        if ran.block.doc != doc or mismatch(ran) is None:
            continue
        block = ran.block
        new = [(block.indent + line).rstrip() if line else "" for line in transcript(block, ran.outputs)]
        lines[block.body_start:block.body_end] = new
    return "\n".join(lines) + ending


def images(block: Block) -> list[str]:
    return _as_list(block.options.get("images"))


def scratch_base() -> Path:
    return Path(tempfile.mkdtemp(prefix="stackpin-docrun-"))


# --- coverage: how many documented commands the tests run ------------------------------------------------

# An unmarked block that cannot run here says so, right before it, with one of these reasons:
#     <!-- docs-not-run: gpu: captures autotune results on a GB300 node -->
# Nothing else excuses a command from running (issue 36: a GPU or the internet are the only exceptions).
NOT_RUN_REASONS = ("gpu", "internet")
_NOT_RUN = re.compile(r"^ {0,3}<!--\s*docs-not-run:\s*(?P<reason>[\w-]+)\s*:(?P<why>.*?)-->\s*$")
_COMMAND = re.compile(r"^\s*\$ ")


@dataclass(frozen=True)
class Coverage:
    doc: str
    documented: int  # `$ ` command lines in the doc's code blocks
    executed: list[int]  # lines of those the tests run (in a marked block)
    excused: list[int]  # lines of those in a block marked docs-not-run (a GPU, the internet)
    unrun: list[int]  # lines of the rest


def coverage(docs: list[str] | None = None) -> list[Coverage]:
    """Per doc, its documented commands: run by the tests, excused (a GPU, the internet), or neither.

    A documented command is a `$ ` line in a code block (fenced or indented); continuation lines belong to
    it. Blocks fenced as ```markdown show a doc's source (docs/README.md's marker examples), not commands."""
    out: list[Coverage] = []
    for doc in docs or DOCS:
        lines = (ROOT / doc).read_text().splitlines()
        executed = {c.line for b in parse_doc(doc) for c in b.commands}
        excused: set[int] = set()
        documented: list[int] = []
        fence: str | None = None
        fence_indent = 0
        showing_source = False
        excuse_next = False
        continued = False
        for number, line in enumerate(lines, 1):
            if (not_run := _NOT_RUN.match(line)) and fence is None:
                if not_run["reason"] not in NOT_RUN_REASONS:
                    raise DocError(f"{doc}:{number}: docs-not-run: the reason is one of {', '.join(NOT_RUN_REASONS)}")
                excuse_next = True
                continue
            stripped = line.strip()
            indent = len(line) - len(line.lstrip(" "))
            if stripped.startswith(("```", "~~~")):
                if fence is None:
                    fence, showing_source = stripped[:3], stripped[3:].strip() in ("markdown", "md")
                    fence_indent = indent
                # A fence shown inside one (indented 4 or more past it) is its content, as CommonMark reads it.
                elif stripped[:3] == fence and not stripped[3:].strip() and 0 <= indent - fence_indent <= 3:
                    fence, showing_source, excuse_next = None, False, False
                continue
            if continued:
                continued = line.rstrip().endswith("\\")
                continue
            if showing_source or not _COMMAND.match(line) or (fence is None and not line.startswith("    ")):
                if fence is None and stripped and not line.startswith("    ") and not stripped.startswith("<!--"):
                    excuse_next = False
                continue
            documented.append(number)
            continued = line.rstrip().endswith("\\")
            if excuse_next:
                excused.add(number)
        out.append(Coverage(doc, len(documented), sorted(executed & set(documented)),
                            sorted(excused & set(documented) - executed),
                            sorted(set(documented) - executed - excused)))
    return out
