"""`stackpin diff` and `stackpin show`: inputs (files, names, git revisions, history), output formats,
--exit-code, --manifests, and bad input in one line with exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from stackpin.cli.main import main
from stackpin.diff import diff_sources, load_stack, summarize_locks
from stackpin.lock.lockfile import StackLock, read_lock
from tests.helpers import PROFILES_DIR, ROOT, apply, base_doc, dump, write_profile

LOCKDIR = ROOT / "lockfiles"
LAUNCH, TUNED = LOCKDIR / "gb300-launch.lock.yaml", LOCKDIR / "gb300-tuned.lock.yaml"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def one_error_line(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


# --- the shipped stacks ---------------------------------------------------------------------------

def test_diff_launch_tuned_by_stack_name_in_text() -> None:
    result = invoke("diff", "gb300-launch", "gb300-tuned", "--lockdir", str(LOCKDIR))
    assert result.exit_code == 0, result.output
    out = result.stdout
    for header in ("kernels engine versions and kernels", "autotune FlashInfer autotune", "cuda-graphs CUDA graphs",
                   "speculative speculative decoding", "placement placement and pools  recreate"):
        assert header in out
    assert "spec.kernels.moe: flashinfer_cutlass -> deep_gemm_mega_moe" in out
    assert "spec.cudaGraphs.captureSizes: [4, 8, 16, 32, 64] -> [6, 12, 24, 48, 96, 192, 384]" in out
    assert "spec.placement.mode: disaggregated -> colocated" in out
    assert "rollout recreate: the Dynamo admission webhook refuses this in place" in out
    assert out.rstrip().endswith("summary kernels, autotune, cuda-graphs, speculative, placement, model, service, "
                                 "pins, metadata (recreate)")


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_diff_structured_output(fmt: str) -> None:
    result = invoke("diff", str(LAUNCH), str(TUNED), "-o", fmt)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout) if fmt == "json" else yaml.safe_load(result.stdout)
    assert data["impact"] == "recreate" and data["equal"] is False and data["pinsCompared"] is True
    assert [g["id"] for g in data["groups"]][:5] == ["kernels", "autotune", "cuda-graphs", "speculative", "placement"]
    assert data["a"] == {"source": str(LAUNCH), "kind": "lock", "name": "gb300-launch",
                         "stackDigest": read_lock(LAUNCH).stack_digest, "standIn": True}
    changes = [c for g in data["groups"] for c in g["changes"]]
    change = next(c for c in changes if c["path"] == "spec.speculative.numSpeculativeTokens")
    assert (change["old"], change["new"], change["impact"], change["restarts"]) == (3, 5, "restart", ["worker"])
    assert data["oneLine"].endswith("(recreate)")


def test_diff_of_profiles_says_pins_are_unknown() -> None:
    result = invoke("diff", str(PROFILES_DIR / "gb300-tuned.yaml"), str(PROFILES_DIR / "vera-rubin-tuned.yaml"))
    assert result.exit_code == 0, result.output
    assert "pins not compared: a and b are profiles" in result.stdout
    assert "spec.target.platform: gb300-nvl72 -> vera-rubin-nvl72" in result.stdout


def test_manifests_adds_a_per_object_diff_and_lists_added_objects() -> None:
    result = invoke("diff", str(TUNED), str(LOCKDIR / "gb300-disagg-wide-ep.lock.yaml"), "--manifests")
    assert result.exit_code == 0, result.output
    out = result.stdout
    # Each stack's attestation ConfigMap is named by what its workers check: one goes, the other comes.
    assert "manifests 1 changed, 2 added, 1 removed, 0 unchanged" in out
    assert "added ComputeDomain/dsv41-flash-compute-domain" in out
    assert "added ConfigMap/dsv41-flash-attestation-" in out and "removed ConfigMap/dsv41-flash-attestation-" in out
    assert "--- a/DynamoGraphDeployment/dsv41-flash" in out and "+++ b/DynamoGraphDeployment/dsv41-flash" in out
    assert "-    type: worker" in out and "+    type: decode" in out
    back = invoke("diff", str(LOCKDIR / "gb300-disagg-wide-ep.lock.yaml"), str(TUNED), "--manifests", "-o", "json")
    objects = json.loads(back.stdout)["manifests"]["objects"]
    assert [(o["kind"], o["status"]) for o in objects] == [("ComputeDomain", "removed"), ("ConfigMap", "removed"),
                                                           ("ConfigMap", "added"), ("DynamoGraphDeployment", "changed")]


def test_manifests_of_a_profile_renders_its_lock() -> None:
    diff = diff_sources(str(PROFILES_DIR / "gb300-tuned.yaml"), str(TUNED), manifests=True, lockdir=LOCKDIR)
    assert diff.equal and diff.manifests is not None
    assert diff.manifests.objects == () and diff.manifests.unchanged == 2  # the DGD and the attestation ConfigMap


# --- --exit-code ----------------------------------------------------------------------------------

def test_exit_code_1_when_different_0_when_equal() -> None:
    assert invoke("diff", str(LAUNCH), str(TUNED)).exit_code == 0  # without --exit-code: 0 either way
    different = invoke("diff", str(LAUNCH), str(TUNED), "--exit-code")
    assert different.exit_code == 1 and "summary" in different.stdout
    same = invoke("diff", str(TUNED), str(TUNED), "--exit-code")
    assert same.exit_code == 0 and "no changes: the same stack digest" in same.stdout
    profile_vs_lock = invoke("diff", str(PROFILES_DIR / "gb300-tuned.yaml"), str(TUNED), "--exit-code")
    assert profile_vs_lock.exit_code == 0 and "pins not compared: a is a profile" in profile_vs_lock.stdout


def test_equal_digests_with_other_provenance_are_equal(tmp_path: Path) -> None:
    text = TUNED.read_text(encoding="utf-8").replace("resolvedVia: oci-layout .demo/mirror/oci",
                                                     "resolvedVia: registry nvcr.io")
    text = text.replace("profile: profiles/deepseek-v4.1-flash/gb300-tuned.yaml", "profile: elsewhere.yaml")
    other = tmp_path / "gb300-tuned.lock.yaml"
    other.write_text(text, encoding="utf-8")
    assert read_lock(other).resolved != read_lock(TUNED).resolved
    result = invoke("diff", str(TUNED), str(other), "--exit-code", "-o", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["equal"] is True


# --- bad input ------------------------------------------------------------------------------------

def test_missing_file_is_one_line_exit_2(tmp_path: Path) -> None:
    line = one_error_line(invoke("diff", str(tmp_path / "nope.yaml"), str(TUNED)))
    assert line == f"error: {tmp_path / 'nope.yaml'}: no such file"


def test_unknown_stack_name_names_the_lockfile_it_looked_for(tmp_path: Path) -> None:
    line = one_error_line(invoke("diff", "no-such-stack", str(TUNED), "--lockdir", str(tmp_path)))
    assert "no such file, and no lockfile" in line and "no-such-stack.lock.yaml" in line


def test_a_directory_is_refused(tmp_path: Path) -> None:
    assert "is a directory" in one_error_line(invoke("diff", str(tmp_path), str(TUNED)))


def test_a_broken_profile_is_located(tmp_path: Path) -> None:
    bad = write_profile(tmp_path, apply(base_doc(), {"spec.cudaGraphs.bogus": 1}))
    line = one_error_line(invoke("diff", str(bad), str(TUNED)))
    assert f"{bad}:" in line and "unknown field" in line


def test_revision_without_history_is_one_line(tmp_path: Path) -> None:
    line = one_error_line(invoke("diff", "dsv41-flash@3", str(TUNED), "--history", str(tmp_path)))
    assert f"no history of deployment dsv41-flash in {tmp_path}/" in line


def test_revision_comes_from_the_injected_history() -> None:
    asked: list[tuple[str, int]] = []

    def revision_lock(deployment: str, rev: int) -> StackLock:
        asked.append((deployment, rev))
        return read_lock(LAUNCH if rev == 1 else TUNED)

    diff = diff_sources("dsv41-flash@1", "dynamo/dsv41-flash@gb300-nvl72@2", revision_lock=revision_lock)
    # DEPLOYMENT is what the history resolves: a name, NAME@PLATFORM or NAMESPACE/NAME@PLATFORM.
    assert asked == [("dsv41-flash", 1), ("dynamo/dsv41-flash@gb300-nvl72", 2)]
    assert diff.a.source == "dsv41-flash@1" and diff.a.kind == "lock" and diff.impact == "recreate"


def test_summary_of_two_locks_for_history_listings() -> None:
    assert summarize_locks(read_lock(TUNED), read_lock(TUNED)) == "no changes"
    rubin = read_lock(LOCKDIR / "vera-rubin-tuned.lock.yaml")
    assert summarize_locks(read_lock(TUNED), rubin) == "autotune, target, pins, metadata (restart)"


# --- git:REF:PATH ---------------------------------------------------------------------------------

def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with a base profile and one that extends it; the base's MoE kernel changes in the
    second commit, the child's file does not."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path / "repo"
    (root / "profiles").mkdir(parents=True)
    base = base_doc()
    write_profile(root / "profiles", base, "base.yaml")
    child: dict[str, Any] = {"apiVersion": "stackpin.dev/v1", "kind": "StackProfile", "extends": "base.yaml",
                             "metadata": {"name": "child"}, "spec": {"service": {"agents": 64}}}
    write_profile(root / "profiles", child, "child.yaml")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "one")
    write_profile(root / "profiles", apply(base, {"spec.kernels.moe": "flashinfer_cutlass"}), "base.yaml")
    _git(root, "commit", "-qam", "two")
    _git(root, "tag", "v2")
    return root


def test_git_inputs_read_extends_at_the_same_revision(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)
    result = invoke("diff", "git:HEAD~1:profiles/child.yaml", "git:v2:profiles/child.yaml", "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    [change] = [c for g in data["groups"] for c in g["changes"]]
    assert (change["path"], change["old"], change["new"]) == ("spec.kernels.moe", "deep_gemm_mega_moe",
                                                              "flashinfer_cutlass")
    assert data["a"]["source"] == "git:HEAD~1:profiles/child.yaml" and data["a"]["kind"] == "profile"


def test_git_input_against_the_working_tree_and_relative_paths(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_profile(repo / "profiles", apply(base_doc(), {"spec.kernels.moe": "marlin"}), "base.yaml")  # uncommitted
    monkeypatch.chdir(repo / "profiles")
    diff = diff_sources("git:HEAD:./child.yaml", "child.yaml")
    [group] = diff.groups
    assert [(c.path, c.old, c.new) for c in group.changes] == [("spec.kernels.moe", "flashinfer_cutlass", "marlin")]
    # As git reads REF:PATH: a bare path from the repository root, ./ and ../ from the working directory.
    for source in ("git:HEAD~1:profiles/child.yaml", "git:HEAD~1:../profiles/child.yaml"):
        shown = invoke("show", source, "-o", "json")
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["spec"]["kernels"]["moe"] == "deep_gemm_mega_moe"
    assert "no file profiles/profiles/child.yaml" in one_error_line(invoke("show", "git:HEAD:./profiles/child.yaml"))


def test_git_lockfile_input(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(TUNED, repo / "tuned.lock.yaml")
    _git(repo, "add", "tuned.lock.yaml")
    _git(repo, "commit", "-qm", "lock")
    monkeypatch.chdir(repo)
    stack = load_stack("git:HEAD:tuned.lock.yaml")
    assert stack.lock is not None and stack.lock.stack_digest == read_lock(TUNED).stack_digest


def test_unknown_git_ref_is_one_line(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)
    line = one_error_line(invoke("diff", "git:no-such-branch:profiles/child.yaml", "profiles/child.yaml"))
    assert line == "error: git:no-such-branch:profiles/child.yaml: unknown git revision 'no-such-branch'"


def test_missing_git_path_is_one_line(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)
    line = one_error_line(invoke("diff", "git:HEAD~1:profiles/gone.yaml", "profiles/child.yaml"))
    assert line == "error: git:HEAD~1:profiles/gone.yaml: no file profiles/gone.yaml at HEAD~1"


@pytest.mark.parametrize("source", ["git:--output=x:profiles/child.yaml", "git:HEAD", "git::profiles/child.yaml"])
def test_malformed_git_inputs_are_refused(repo: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    monkeypatch.chdir(repo)
    one_error_line(invoke("diff", source, "profiles/child.yaml"))
    assert not (repo / "x").exists()


def test_outside_a_repository_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert "is not inside a git repository" in one_error_line(invoke("diff", "git:HEAD:a.yaml", str(TUNED)))


def test_a_broken_profile_at_a_revision_is_located_there(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "profiles" / "child.yaml").write_text(dump({"apiVersion": "stackpin.dev/v1", "kind": "StackProfile",
                                                        "extends": "base.yaml", "metadata": {"name": "child"},
                                                        "spec": {"bogus": 1}}), encoding="utf-8")
    _git(repo, "commit", "-qam", "broken")
    monkeypatch.chdir(repo)
    line = one_error_line(invoke("show", "git:HEAD:profiles/child.yaml"))
    assert line.startswith("error: git:HEAD:profiles/child.yaml:") and "spec.bogus" in line
    assert "stackpin-git-" not in line


# --- show -----------------------------------------------------------------------------------------

def test_show_prints_the_merged_profile_a_lock_embeds() -> None:
    path = PROFILES_DIR / "vera-rubin-disagg-wide-ep.yaml"
    text = invoke("show", str(path))
    assert text.exit_code == 0, text.output
    header, _, body = text.stdout.partition("\n# from: ")
    assert header.startswith("# effective profile of vera-rubin-disagg-wide-ep (profile)")
    assert body.splitlines()[0] == f"{path} <- {PROFILES_DIR / 'gb300-disagg-wide-ep.yaml'} <- " \
                                   f"{PROFILES_DIR / 'gb300-tuned.yaml'}"
    doc = yaml.safe_load(text.stdout)
    assert "extends" not in doc and doc == read_lock(LOCKDIR / "vera-rubin-disagg-wide-ep.lock.yaml").profile
    assert doc["spec"]["placement"]["kvConnector"] == "NixlConnector"
    assert doc["spec"]["target"]["platform"] == "vera-rubin-nvl72"
    as_json = invoke("show", str(path), "-o", "json")
    assert json.loads(as_json.stdout) == doc
    assert yaml.safe_load(invoke("show", str(path), "-o", "yaml").stdout) == doc


def test_show_missing_file_is_one_line(tmp_path: Path) -> None:
    one_error_line(invoke("show", str(tmp_path / "missing.yaml")))


def test_user_data_prints_as_text_not_markup(tmp_path: Path) -> None:
    doc = apply(base_doc(), {"spec.kernels.attention": "[bold]x", "spec.kernels.env.ODD": "[/]"})
    path = write_profile(tmp_path, doc)
    result = invoke("diff", str(PROFILES_DIR / "gb300-tuned.yaml"), str(path))
    assert result.exit_code == 0, result.output
    assert 'spec.kernels.env.ODD: (unset) -> "[/]"' in result.stdout
    assert 'spec.kernels.attention: FLASHMLA_MEGA_ATTN_DSV41 -> "[bold]x"' in result.stdout
