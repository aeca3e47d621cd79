"""The repository stands alone: nothing in it points at files outside it or at the machine it was written on.

- no file cites the facts notes the project started from (they are not in the repository; cite
  docs/facts.md instead), and every citation of a docs/facts.md section names a section that exists;
- docs, READMEs and tests name no absolute path of a machine (a home, a scratch or a checkout directory);
- no `extends:` in a doc or a profile climbs out of the repository;
- the README's first lines say how to run `stackpin` after `make demo`;
- the engine versions the README tells users to install are the ones the tuned stack pins.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from functools import cache
from pathlib import Path, PurePosixPath

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
FACTS = ROOT / "docs" / "facts.md"
TUNED = ROOT / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml"

# Spelled in pieces so that this file does not match itself.
OUTSIDE_NOTES = re.compile("FACTS" + r"(\.md|\s*§)")
# An absolute path into a directory that exists only on some machine: work, tmp, root or home at the
# filesystem root (not preceded by a word character or a dot, so a URL's path passes).
# /tmp/vllm.log is no machine's: it is where the ai-dynamo wheel's DGDs tee a pod's engine log (tests/data/upstream/).
MACHINE_PATH = re.compile(r"(?<![\w.~$/-])/(?:work|tmp|root|home)/(?!vllm\.log\b)")
EXTENDS = re.compile(r"^\s*extends:\s*(\S+)", re.MULTILINE)
CITATION = re.compile(r"docs/facts\.md#([a-z0-9][a-z0-9-]*)")
# On a line that cites docs/facts.md, a further section may be written as a bare `#section`.
SHORTHAND = re.compile(r"(?:^|[\s(,])#([a-z][a-z0-9-]*)")
UNTRACKED_DIRS = {".git", ".venv", ".demo", ".bench", ".pytest_cache", ".hypothesis", ".ruff_cache", "__pycache__"}


@cache
def repo_files() -> tuple[str, ...]:
    """Tracked files (git ls-files); outside a git checkout, every file not in a tool directory."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        names = [n for n in out.decode().split("\0") if n]
        if names:
            return tuple(sorted(n for n in names if (ROOT / n).is_file()))
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in UNTRACKED_DIRS and not d.endswith(".egg-info")]
        found += [Path(dirpath, f).relative_to(ROOT).as_posix() for f in filenames]
    return tuple(sorted(found))


@cache
def text(name: str) -> str | None:
    data = (ROOT / name).read_bytes()
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


@cache
def notice_listed() -> frozenset[str]:
    """Upstream files bundled as data, as NOTICE lists them (`<path> <- <source> ...`)."""
    lines = (ROOT / "NOTICE").read_text(encoding="utf-8").splitlines()
    return frozenset(line.split(" <- ", 1)[0].strip() for line in lines if " <- " in line)


def docs() -> list[str]:
    """Markdown anywhere in the repository (README.md, docs/, the package READMEs)."""
    return [n for n in repo_files() if n.endswith(".md")]


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


@cache
def facts_sections() -> frozenset[str]:
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", FACTS.read_text(encoding="utf-8"), re.MULTILINE)
    return frozenset(github_slug(h) for h in headings)


def test_repository_files_are_listed() -> None:
    names = repo_files()
    assert "README.md" in names and "docs/facts.md" in names
    assert not any(n.startswith(".venv/") for n in names)


def _lines_matching(names: list[str], pattern: re.Pattern[str]) -> list[str]:
    """`file:line: text` of every line matching `pattern` in these files (NOTICE-listed upstream data aside)."""
    hits = []
    for name in names:
        body = text(name)
        if body is None or name in notice_listed():
            continue
        hits += [f"{name}:{number}: {line.strip()}" for number, line in enumerate(body.splitlines(), 1)
                 if pattern.search(line)]
    return hits


def test_nothing_cites_notes_outside_the_repository() -> None:
    hits = _lines_matching(repo_files(), OUTSIDE_NOTES)
    assert not hits, "cite docs/facts.md#<section> instead:\n" + "\n".join(hits)


def test_facts_citations_name_existing_sections() -> None:
    sections = facts_sections()
    assert {"autotune-cache", "version-pins", "corrections"} <= sections
    missing = []
    for name in repo_files():
        body = text(name)
        if body is None:
            continue
        for number, line in enumerate(body.splitlines(), 1):
            cited = CITATION.findall(line)
            if cited:
                cited += SHORTHAND.findall(line)
            if name == "docs/facts.md":
                cited += re.findall(r"\]\(#([^)]+)\)", line)
            missing += [f"{name}:{number}: #{s}" for s in cited if s not in sections]
    assert not missing, "no such section in docs/facts.md:\n" + "\n".join(missing)


def test_docs_and_tests_name_no_machine_paths() -> None:
    names = docs() + [n for n in repo_files() if n.startswith("tests/") and n.endswith(".py")]
    hits = _lines_matching(names, MACHINE_PATH)
    assert not hits, "absolute paths of a machine; use paths relative to the repository:\n" + "\n".join(hits)


def _escapes(base: PurePosixPath, target: str) -> bool:
    if target.startswith(("/", "~")) or re.match(r"^[A-Za-z]:[\\/]", target):
        return True
    depth = 0
    for part in (base / target).parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def test_extends_stays_inside_the_repository() -> None:
    bad = []
    for name in repo_files():
        if name.endswith(".md"):
            base = PurePosixPath(".")  # commands in the docs run from the repository root
        elif name.endswith((".yaml", ".yml")) and name not in notice_listed():
            base = PurePosixPath(name).parent  # a profile's extends: is relative to the profile
        else:
            continue
        body = text(name) or ""
        bad += [f"{name}: extends: {t}" for t in EXTENDS.findall(body) if _escapes(base, t.strip("'\""))]
    assert not bad, "extends: climbs out of the repository:\n" + "\n".join(bad)


@pytest.mark.parametrize("target", ["../../elsewhere/profiles/x.yaml", "/abs/x.yaml", "../x.yaml", "a/../../x.yaml"])
def test_escape_check_catches(target: str) -> None:
    assert _escapes(PurePosixPath("."), target)


def test_escape_check_allows_paths_inside() -> None:
    assert not _escapes(PurePosixPath("."), "profiles/deepseek-v4.1-flash/gb300-tuned.yaml")
    assert not _escapes(PurePosixPath("profiles/deepseek-v4.1-flash"), "gb300-tuned.yaml")
    assert not _escapes(PurePosixPath("profiles/deepseek-v4.1-flash"), "../../profiles/x.yaml")


def test_readme_first_lines_say_how_to_run_stackpin() -> None:
    head = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:12])
    assert re.search(r"^\s+make demo\b", head, re.MULTILINE)
    assert re.search(r"^\s+make test\b", head, re.MULTILINE)
    assert ".venv/bin/activate" in head and ".venv/bin/stackpin" in head


def test_engine_versions_in_readme_match_the_tuned_stack() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"].get(
        "optional-dependencies", {})
    for name, requirements in extras.items():
        for requirement in requirements:
            package = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()
            if package in {"vllm", "flashinfer-python", "ai-dynamo", "nixl"}:
                assert "==" in requirement, f"extra {name!r}: {requirement} is not pinned"
    pins = yaml.safe_load(TUNED.read_text(encoding="utf-8"))["spec"]["versions"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    readme = " ".join(readme.split())
    assert f"pip install 'ai-dynamo[vllm]=={pins['dynamo']}'" in readme
    assert f"vllm {pins['vllm']}" in readme
    assert f"flashinfer-python {pins['flashinfer']}" in readme
    assert f"nixl {pins['nixl']}" in readme
