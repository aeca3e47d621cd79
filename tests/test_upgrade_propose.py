"""`stackpin upgrade propose` end to end through the CLI, on the fixture engines (devkit/enginepkgs.py) read
from a directory of package files (--find-links) and from pypiserver on loopback: a release that renames a
flag the stack passes, one that removes one, a default the stack relies on, and a FlashInfer change under
a replayed autotune cache. No network."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from devkit import enginepkgs as pkgs
from devkit.pypiserver import serve_packages
from stackpin.cli.main import main
from stackpin.errors import StackpinError
from stackpin.upgrade.model import Proposal
from stackpin.upgrade.textedit import TextEdit

DATA = Path(__file__).resolve().parent.parent / "devkit" / "upgrade-site"
PROFILE = "p/gb300-fixture.yaml"
CANDIDATE = "p/gb300-fixture.dynamo-9.1.0.yaml"
PROPOSAL = Path("proposals/gb300-fixture-dynamo-9-1-0")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"STACKPIN_CATALOG_PATH": ""})


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dynamo 9.0.0 (the stack's), 9.1.0 (its vLLM renames --gdn-backend, changes the block size default
    and pins FlashInfer 9.1.0) and 9.2.0 (its vLLM removes --disable-custom-all-reduce)."""
    return pkgs.upgrade_series(tmp_path_factory.mktemp("packages"))


@pytest.fixture(autouse=True)
def site(tmp_path: Path, packages: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository with the stack in p/ and its catalog (spec.catalogPath: [catalog]) holding the current
    engines, added with `engines add --from` as a site does; stackpin runs from its root."""
    shutil.copytree(DATA, tmp_path / "p")
    monkeypatch.chdir(tmp_path)
    for name in ("vllm-9.0.0.tar.gz", "ai_dynamo-9.0.0-py3-none-any.whl"):
        assert invoke("engines", "add", "--from", str(packages / name), "--catalog", "catalog").exit_code == 0
    assert invoke("validate", PROFILE).exit_code == 0


def test_a_rename_is_rewritten_a_relied_default_pinned_and_the_stale_cache_recaptured(
        packages: Path) -> None:
    result = invoke("upgrade", "propose", PROFILE, "--to", "dynamo==9.1.0", "--find-links", str(packages))
    assert result.exit_code == 0, result.output
    current, candidate = Path(PROFILE).read_text(), Path(CANDIDATE).read_text()
    # Only the upgrade's lines change; every comment and the order stay.
    expected = current
    for old, new in (
            ("  name: gb300-fixture\n", "  name: gb300-fixture-dynamo-9-1-0\n"),
            ("    dtype: fp8_ds_mla\n", "    dtype: fp8_ds_mla\n    blockSize: 16\n"),  # --block-size's old default
            ("dynamo: 9.0.0  #", "dynamo: 9.1.0  #"), ("vllm: 9.0.0\n", "vllm: 9.1.0\n"),
            # nixl and runtimeImage are inherited from _rack.yaml: the candidate writes the new pins itself
            ("flashinfer: 0.7.2.post1\n", "flashinfer: 9.1.0\n    nixl: 1.5.0\n"
             "    runtimeImage: nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.1.0\n"),
            ("    mode: replay  # the cache below, captured on this stack\n"
             "    cache: nvcr.io/nvidia/ai-dynamo/autotune-cache:dsv41-flash-gb300-vllm9.0.0\n",
             "    mode: tune  # until the cache is captured again for this FlashInfer (proposal.md)\n"),
            ("--gdn-backend: flashinfer", "--linear-attn-backend: flashinfer")):
        assert expected.count(old) == 1, old
        expected = expected.replace(old, new)
    assert candidate == expected
    assert "extends: _rack.yaml" in candidate  # beside the current one: the same base
    checked = invoke("validate", CANDIDATE)
    assert checked.exit_code == 0, checked.output
    assert " error SP" not in checked.stdout and "ok, " in checked.stdout

    proposal = Proposal.model_validate_json((PROPOSAL / "proposal.json").read_text())
    assert (proposal.current_profile, proposal.candidate_profile) == (PROFILE, CANDIDATE)
    assert proposal.deployment == "dynamo/dsv41-flash@gb300-nvl72"
    assert (proposal.candidate.vllm, proposal.candidate.flashinfer, proposal.candidate.nixl) == (
        "9.1.0", "9.1.0", "1.5.0")
    assert proposal.catalog == "catalog"
    assert proposal.added == ["ai-dynamo==9.1.0", "vllm==9.1.0", "flashinfer-python==9.1.0"]
    [rewrite] = proposal.rewrites
    assert (rewrite.path, rewrite.old, rewrite.new) == (
        "spec.placement.pools.worker.engineArgs", "--gdn-backend", "--linear-attn-backend")
    assert "Use --linear-attn-backend instead" in rewrite.source
    [pinned] = proposal.pinned
    assert (pinned.path, pinned.flag, pinned.value, pinned.new_default) == ("spec.kvCache.blockSize", "--block-size",
                                                                            16, 32)
    assert proposal.blockers == []
    assert [f.code for f in proposal.findings] == ["SP203"]  # tuning at start until the cache is captured
    assert proposal.remeasure[0].startswith("spec.autotune.cache: nvcr.io/nvidia/ai-dynamo/autotune-cache:")
    assert any(r.startswith("benchmark:") for r in proposal.remeasure)
    assert proposal.capture_job == str(PROPOSAL / "capture-job.yaml")

    objects = list(yaml.safe_load_all((PROPOSAL / "capture-job.yaml").read_text()))
    [job] = [o for o in objects if o["kind"] == "Job"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.1.0"
    assert "--linear-attn-backend" in container["args"] and "--gdn-backend" not in container["args"]

    markdown = (PROPOSAL / "proposal.md").read_text()
    assert markdown.startswith(f"# Upgrade {PROFILE} to Dynamo 9.1.0 (vLLM 9.0.0 -> 9.1.0, FlashInfer "
                               "0.7.2.post1 -> 9.1.0)\n")
    for piece in ("| vLLM | `9.0.0` | `9.1.0` (changed) |", "## Rewritten",
                  "`--gdn-backend` -> `--linear-attn-backend`", "## Defaults pinned", "`spec.kvCache.blockSize`: `16`",
                  "## Findings", "SP203", "## Must be re-measured", "## Stack diff",
                  f"`stackpin diff {PROFILE} {CANDIDATE}`", "| autotune | `spec.autotune.mode` | `replay` | `tune` |",
                  f"kubectl apply -f {PROPOSAL}/capture-job.yaml", f"stackpin lock {CANDIDATE}",
                  f"stackpin upgrade trial {PROPOSAL}"):
        assert piece in markdown, piece
    assert "## Blockers" not in markdown


def test_a_removed_flag_blocks_and_writes_the_proposal_only(packages: Path) -> None:
    result = invoke("upgrade", "propose", PROFILE, "--to", "dynamo==9.2.0", "--find-links", str(packages), "-o", "json")
    assert result.exit_code == 1, result.output
    assert not Path("p/gb300-fixture.dynamo-9.2.0.yaml").exists()
    directory = Path("proposals/gb300-fixture-dynamo-9-2-0")
    assert sorted(p.name for p in directory.iterdir()) == ["proposal.json", "proposal.md"]
    assert result.stdout == (directory / "proposal.json").read_text()  # -o json prints the proposal
    proposal = Proposal.model_validate_json(result.stdout)
    assert proposal.blocked and proposal.candidate_profile is None and proposal.capture_job is None
    [blocker] = proposal.blockers
    assert blocker.path == "spec.placement.pools.worker.engineArgs.--disable-custom-all-reduce"
    assert "vLLM 9.2.0 no longer accepts --disable-custom-all-reduce" in blocker.message
    assert "SP221" in {f.code for f in proposal.findings}  # what validate --upgrade-to says of the same
    markdown = (directory / "proposal.md").read_text()
    assert "**Blocked**" in markdown and "## Blockers" in markdown and "--disable-custom-all-reduce" in markdown


def test_nothing_is_replaced_without_force_and_present_releases_are_not_added_again(
        packages: Path) -> None:
    args = ("upgrade", "propose", PROFILE, "--to", "dynamo==9.1.0", "--find-links", str(packages))
    assert invoke(*args).exit_code == 0
    Path(CANDIDATE).write_text(Path(CANDIDATE).read_text() + "# reviewed\n")
    before = {p: p.read_bytes() for p in [Path(CANDIDATE), *PROPOSAL.iterdir()]}
    again = invoke(*args)
    assert again.exit_code == 2
    assert again.stderr == (f"error: {CANDIDATE} exists; a proposal never replaces one "
                            "(hint: give --force to replace it)\n")
    assert {p: p.read_bytes() for p in before} == before
    forced = invoke(*args, "--force", "-o", "json")
    assert forced.exit_code == 0, forced.output
    assert json.loads(forced.stdout)["added"] == []  # the catalog has them now
    assert "# reviewed" not in Path(CANDIDATE).read_text()


@pytest.mark.parametrize(("to", "message"), [
    ("vllm==9.1.0", "error: --to 'vllm==9.1.0': give the target as dynamo==X (a Dynamo release, e.g. dynamo==1.7.0)"),
    ("dynamo==nine", "error: --to 'dynamo==nine': give the target as dynamo==X (a Dynamo release, e.g. dynamo==1.7.0)"),
    ("dynamo==9.0.0", "error: Dynamo 9.0.0 is not newer than the stack's Dynamo 9.0.0"),
])
def test_a_bad_target_is_one_line_and_writes_nothing(packages: Path, to: str | None, message: str) -> None:
    catalog = sorted(p.name for p in Path("catalog/engines").iterdir())
    result = invoke("upgrade", "propose", PROFILE, *(["--to", to] if to else []), "--find-links", str(packages))
    assert (result.exit_code, result.stderr) == (2, message + "\n")
    assert not Path("proposals").exists() and sorted(p.name for p in Path("catalog/engines").iterdir()) == catalog


def test_without_to_the_newest_release_check_offers_is_proposed(packages: Path, tmp_path: Path) -> None:
    # The newest is 9.2.0, whose vLLM removed a flag the stack passes: proposed, and blocked.
    result = invoke("upgrade", "propose", PROFILE, "--find-links", str(packages), "-o", "json")
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["candidate"]["dynamo"] == "9.2.0"
    # Nothing newer in the directory than the stack's own release: one line, nothing written.
    only = tmp_path / "only"
    only.mkdir()
    shutil.copy(packages / "ai_dynamo-9.0.0-py3-none-any.whl", only)
    shutil.rmtree("proposals", ignore_errors=True)
    up_to_date = invoke("upgrade", "propose", PROFILE, "--find-links", str(only))
    assert (up_to_date.exit_code, up_to_date.stderr) == (
        2, f"error: {only}: no Dynamo release newer than 9.0.0 (hint: the stack is up to date; name a "
           "pre-release with --to dynamo==X)\n")
    assert not Path("proposals").exists()


def test_a_release_missing_from_the_directory_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke("upgrade", "propose", PROFILE, "--to", "dynamo==9.1.0", "--find-links", str(empty))
    assert result.exit_code == 2
    assert result.stderr == (f"error: {empty}: no ai-dynamo 9.1.0 package (wheel or sdist) in it (hint: copy it in, "
                             "e.g. pip download --no-deps ai-dynamo==9.1.0)\n")
    assert not Path("proposals").exists()


def test_the_releases_come_from_pypiserver(packages: Path) -> None:
    """The same packages from a real package index on loopback (pypiserver's PEP 503 pages), as a site's
    mirror serves them: a named release, then the newest without --to."""
    with serve_packages(packages) as url:
        result = invoke("upgrade", "propose", PROFILE, "--to", "dynamo==9.1.0", "--index-url", url, "--out", "pr",
                        "-o", "json")
        newest = invoke("upgrade", "propose", PROFILE, "--index-url", url, "--out", "newest", "-o", "json")
    assert newest.exit_code == 1, newest.output  # 9.2.0 removed a flag the stack passes
    assert Proposal.model_validate_json(newest.stdout).blocked
    assert result.exit_code == 0, result.output
    proposal = Proposal.model_validate_json(result.stdout)
    assert proposal.added == ["ai-dynamo==9.1.0", "vllm==9.1.0", "flashinfer-python==9.1.0"]
    assert proposal.capture_job == "pr/capture-job.yaml" and Path("pr/proposal.md").is_file()
    assert proposal.rewrites and Path(CANDIDATE).is_file()


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda e: e.set(("a", "b"), "x y"), "a:\n  b: x y  # keep\n  'c': [1, 2]\n"),
    (lambda e: e.rename(("a", "c"), "--d"), "a:\n  b: 1  # keep\n  --d: [1, 2]\n"),
    (lambda e: e.set(("a", "e", "f"), "1.5"), "a:\n  b: 1  # keep\n  'c': [1, 2]\n  e:\n    f: '1.5'\n"),
    (lambda e: e.delete(("a", "b")), "a:\n  'c': [1, 2]\n"),
])
def test_text_edits_touch_only_their_lines(edit: Callable[[TextEdit], None], expected: str) -> None:
    text = TextEdit("a:\n  b: 1  # keep\n  'c': [1, 2]\n", "t.yaml")
    edit(text)
    assert text.text == expected


def test_a_flow_mapping_is_not_edited() -> None:
    text = TextEdit("a: {b: 1}\n", "t.yaml")
    with pytest.raises(StackpinError, match="t.yaml: a: is a flow mapping"):
        text.set(("a", "c"), 2)


def test_a_renamed_flag_a_base_sets_blocks(packages: Path) -> None:
    """Maps merge through extends: the candidate cannot drop a key its base sets, so the base must change."""
    stack, base = Path(PROFILE), Path("p/_rack.yaml")
    text = stack.read_text()
    stack.write_text(text.replace("          --gdn-backend: flashinfer\n", ""))
    base.write_text(base.read_text() + "  placement:\n    mode: colocated\n    pools:\n      worker:\n"
                    "        replicas: 18\n        engineArgs:\n          --gdn-backend: flashinfer\n")
    result = invoke("upgrade", "propose", PROFILE, "--to", "dynamo==9.1.0", "--find-links", str(packages), "-o", "json")
    assert result.exit_code == 1, result.output
    [blocker] = Proposal.model_validate_json(result.stdout).blockers
    assert blocker.path == "spec.placement.pools.worker.engineArgs.--gdn-backend"
    assert blocker.message.startswith("--gdn-backend is renamed --linear-attn-backend, but p/_rack.yaml sets it")
    assert not Path(CANDIDATE).exists()
