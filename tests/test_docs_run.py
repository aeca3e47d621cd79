"""The docs' runnable examples give the output they show (devkit/docrun.py; the convention: docs/README.md).

One test per session (a marked block, or the blocks of one doc that share a `session`), so pytest-xdist spreads
them over the workers. Each runs in a scratch copy of the repository's inputs under pytest's tmp_path and
never writes into the checkout. A mismatch fails with a unified diff naming the doc and the block's line;
`python scripts/update_docs.py` rewrites the block from a real run.

Sessions that need what is missing here skip and say why: `sim` (the `sim` extra not installed), `cluster`
(no kube-apiserver for tests/kube.py's envtest fixture). `slow` ones run too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit import docrun

SESSIONS = docrun.sessions()


def test_docs_have_runnable_blocks() -> None:
    # The parse itself (markers, fences, `$ ` lines) is checked here; an unreadable marker fails the collection.
    assert len(SESSIONS) >= 20, [s.id for s in SESSIONS]
    assert {s.doc for s in SESSIONS} >= {"docs/history.md", "docs/getting-started.md", "docs/plan.md"}


def test_nine_in_ten_documented_commands_run() -> None:
    # Issue 36: every documented command runs but one that needs a GPU or the internet (a docs-not-run
    # marker says which); the share is of all of them, the excused ones counted as not run.
    found = docrun.coverage()
    ran, total = sum(len(c.executed) for c in found), sum(c.documented for c in found)
    assert total >= 200, total  # the counter still finds the docs' commands
    assert ran >= 0.9 * total, {c.doc: c.unrun for c in found if c.unrun}


def test_coverage_counts_commands_runs_and_excuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "x.md").write_text(
        "<!-- docs: run -->\n```\n$ echo a \\\n  b\na b\n```\n\n"
        "<!-- docs-not-run: gpu: a capture Job on a GB300 node -->\n```\n$ kubectl apply -f capture.yaml\n```\n\n"
        "```\n$ stackpin lock p.yaml\n```\n\n```markdown\n    $ shown, not documented\n```\n"
        "Prose between.\n\n    $ an indented block's command\n")
    (docs / "bad.md").write_text("<!-- docs-not-run: slow: too long -->\n```\n$ sleep 9\n```\n")
    monkeypatch.setattr(docrun, "ROOT", tmp_path)
    [x] = docrun.coverage(["docs/x.md"])
    assert (x.documented, x.executed, x.excused, x.unrun) == (4, [3], [10], [14, 22])
    with pytest.raises(docrun.DocError, match="docs/bad.md:1: .*gpu, internet"):
        docrun.coverage(["docs/bad.md"])


@pytest.mark.parametrize("session", SESSIONS, ids=[s.id for s in SESSIONS])
def test_doc_session(session: docrun.Session, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    kube: dict[str, str] | None = None
    if "cluster" in session.needs:
        envtest = request.getfixturevalue("envtest")
        kube = {"KUBECONFIG": str(envtest.kubeconfig)}
    reason = docrun.missing(session, cluster=kube is not None)
    if reason:
        pytest.skip(f"{session.id}: {reason}")
    ran = docrun.run_session(session, tmp_path, kube)
    problems = [diff for r in ran if (diff := docrun.mismatch(r))]
    if problems and docrun.busy_host(ran) is not None:  # a path a busy host takes (the block's `rerun`): once more
        tmp_path = tmp_path / "again"
        ran = docrun.run_session(session, tmp_path, kube)
        problems = [diff for r in ran if (diff := docrun.mismatch(r))]
    # An image a block draws is the one the doc shows: the same bytes (the charts are deterministic PNGs).
    problems += [f"{r.block.where}: {image} differs from what the block draws"
                 for r in ran for image in docrun.images(r.block)
                 if (tmp_path / "repo" / image).read_bytes() != (docrun.ROOT / image).read_bytes()]
    assert not problems, ("the doc does not show what its commands print (python scripts/update_docs.py "
                          "rewrites it from a run):\n" + "\n\n".join(problems))


def test_a_block_that_shows_other_output_fails_naming_its_line(tmp_path: Path) -> None:
    text = ("intro\n\n<!-- docs: {copy: []} -->\n```\n$ printf 'a\\nb\\nc\\n'\na\n...\nc\n"
            "$ bash -c 'echo hi; exit 3'\nhi\n```\n\n<!-- docs: {copy: []} -->\n```\n$ echo hello\nbye\n```\n")
    blocks = docrun.parse_doc("docs/x.md", text)
    assert [(b.line, [c.line for c in b.commands]) for b in blocks] == [(3, [5, 9]), (13, [15])]
    first, second = (docrun.run_session(docrun.Session("docs/x.md", str(n), [b]), tmp_path / str(n))[0]
                     for n, b in enumerate(blocks))
    # `...` stands for the line between; the exit status is part of the output and the doc must show it.
    assert first.outputs == [["a", "b", "c"], ["hi", "(exit 3)"]]
    assert "+(exit 3)" in (docrun.mismatch(first) or "")
    diff = docrun.mismatch(second)
    assert diff is not None and "docs/x.md:13" in diff and "-bye" in diff and "+hello" in diff
    rewritten = docrun.rewrite(text, "docs/x.md", [second])
    assert "$ echo hello\nhello\n```" in rewritten and rewritten.startswith(text[: text.index("$ echo hello")])


def test_without_hides_an_extras_packages_from_the_block(tmp_path: Path) -> None:
    text = ("<!-- docs: {copy: [], without: [report]} -->\n```\n$ python -c 'import jinja2'\n```\n\n"
            "<!-- docs: {copy: []} -->\n```\n$ python -c 'import jinja2'\n```\n")
    hidden, shown = (docrun.run_session(docrun.Session("docs/x.md", str(n), [b]), tmp_path / str(n))[0]
                     for n, b in enumerate(docrun.parse_doc("docs/x.md", text)))
    assert hidden.outputs[0][-2:] == ["ModuleNotFoundError: No module named 'jinja2'", "(exit 1)"]
    assert shown.outputs == [[]]
    with pytest.raises(docrun.DocError, match="unknown extra"):
        docrun.run_session(docrun.Session("docs/x.md", "bad", docrun.parse_doc(
            "docs/x.md", "<!-- docs: {copy: [], without: [nope]} -->\n```\n$ true\n```\n")), tmp_path / "bad")


def test_transient_progress_lines_may_be_printed_or_not(tmp_path: Path) -> None:
    """A wait's progress line is there when the wait lasted and not when it did not; the doc passes
    either way, and every other line still counts."""
    def ran(doc_lines: str, printed: str) -> docrun.Ran:
        text = ("<!-- docs: {copy: [], transient: ['deleting \\(finalizers: ']} -->\n```\n"
                f"$ printf '{printed}'\n{doc_lines}```\n")
        [block] = docrun.parse_doc("docs/x.md", text)
        scratch = tmp_path / str(len(list(tmp_path.iterdir())))
        return docrun.run_session(docrun.Session("docs/x.md", "t", [block]), scratch)[0]

    waited = "x: deleting (finalizers: foregroundDeletion)\\nx: deleted\\n"
    assert docrun.mismatch(ran("x: deleting (finalizers: foregroundDeletion)\nx: deleted\n", "x: deleted\\n")) is None
    assert docrun.mismatch(ran("x: deleted\n", waited)) is None
    assert docrun.mismatch(ran("x: gone\n", waited)) is not None


def test_rerun_names_only_the_busy_hosts_line(tmp_path: Path) -> None:
    """A block's `rerun` pattern finds the line a busy host's path printed; a block without one, or a run that
    printed none, is not run again (a mismatch then fails at once)."""
    text = ("<!-- docs: {copy: [], rerun: 'gate inconclusive'} -->\n```\n$ echo 'gate inconclusive: late'\ngate pass\n"
            "```\n\n<!-- docs: {copy: []} -->\n```\n$ echo 'gate inconclusive: late'\ngate pass\n```\n")
    busy, plain = (docrun.run_session(docrun.Session("docs/x.md", str(n), [b]), tmp_path / str(n))
                   for n, b in enumerate(docrun.parse_doc("docs/x.md", text)))
    assert docrun.mismatch(busy[0]) and docrun.busy_host(busy) == "gate inconclusive: late"
    assert docrun.mismatch(plain[0]) and docrun.busy_host(plain) is None
