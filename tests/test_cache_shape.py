"""An autotune cache captured for another stack shape (a colocated stack's cache pinned by a
disaggregated one) is refused once its contents are known: by `stackpin lock`, which records them,
and by `stackpin render` of such a lock. Caches come from the demo mirror's stand-ins (stackpin.demo),
which lay the files out as vLLM does for the profile they are built for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from stackpin.catalog import load_catalog
from stackpin.cli.main import main
from stackpin.demo.mirror import build_demo_mirror
from stackpin.lock.lockfile import Sources, StackMismatch, lock_profiles
from stackpin.lock.resolvers import HfCacheSource, LayoutSource
from stackpin.lock.run import run_lock
from stackpin.profile.loader import load_profile
from stackpin.profile.topology import topology_of
from stackpin.render.build import RenderError, build_objects
from stackpin.validate import run_rules
from tests.helpers import apply, base_doc, dump
from tests.lockkit import PROFILES_DIR, lock_loaded

TUNED_CACHE = base_doc("gb300-tuned")["spec"]["autotune"]["cache"]


def _disagg_pinning(directory: Path, cache: str, changes: dict[str, Any] | None = None) -> Path:
    """gb300-disagg-wide-ep with its autotune cache reference replaced."""
    doc = apply(base_doc("gb300-disagg-wide-ep"), {"spec.autotune.cache": cache, **(changes or {})})
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "disagg-colocated-cache.yaml"
    path.write_text(dump(doc), encoding="utf-8")
    return path


@pytest.fixture()
def mirror(tmp_path: Path) -> Path:
    """The demo mirror for gb300-tuned: its runtime image, model revision and its colocated cache
    (one config directory for the one worker pool)."""
    dest = tmp_path / "mirror"
    build_demo_mirror(dest, [load_profile(PROFILES_DIR / "gb300-tuned.yaml").profile])
    return dest


def test_lock_refuses_a_colocated_cache_pinned_by_a_disaggregated_stack(tmp_path: Path, mirror: Path) -> None:
    profile = _disagg_pinning(tmp_path / "profiles", TUNED_CACHE)
    lockdir = tmp_path / "lockfiles"
    with pytest.raises(StackMismatch) as info:
        run_lock([profile], lockdir, oci_layout=str(mirror / "oci"), hf_cache=str(mirror / "hf"))
    lines = info.value.lines()
    assert lines[-1] == "not locked: fix the errors above"
    findings = [line for line in lines[:-1] if "SP205" in line]
    assert findings and all("spec.autotune.cache" in line and str(profile) in line for line in findings)
    text = "\n".join(findings)
    # It names the pools and what the cache was captured for (one config directory, one shared file).
    assert "pool prefill" in text and "decode" in text and "1 config directory" in text and ":shared (1 file)" in text
    assert not lockdir.exists() or not list(lockdir.iterdir())  # nothing written


def test_cli_lock_and_render_refuse_it(tmp_path: Path, mirror: Path) -> None:
    profile = _disagg_pinning(tmp_path / "profiles", TUNED_CACHE)
    result = CliRunner().invoke(main, ["lock", str(profile), "--lockdir", str(tmp_path / "lockfiles"),
                                       "--oci-layout", str(mirror / "oci"), "--hf-cache", str(mirror / "hf")])
    assert result.exit_code == 1, result.output
    assert "SP205" in result.output and "pool prefill" in result.output


def test_render_refuses_a_lock_whose_cache_does_not_fit(tmp_path: Path, mirror: Path) -> None:
    """A lock made around `stackpin lock` (lock_profiles alone checks no rule) must not render."""
    path = _disagg_pinning(tmp_path, TUNED_CACHE)
    sources = Sources(images=LayoutSource(mirror / "oci"), models=HfCacheSource(mirror / "hf"))
    [lock] = lock_profiles([load_profile(path)], sources, tmp_path / "lockfiles")
    assert lock.resolved.autotune_cache is not None
    with pytest.raises(RenderError, match="pool prefill.*1 config directory"):
        build_objects(lock)


def test_the_shipped_disaggregated_cache_fits_and_renders(tmp_path: Path) -> None:
    path = _disagg_pinning(tmp_path, base_doc("gb300-disagg-wide-ep")["spec"]["autotune"]["cache"])
    [lock] = lock_loaded([load_profile(path)], tmp_path / "lockfiles")
    assert build_objects(lock)


# --- the comparison, per vLLM's file layout ----------------------------------------------------------

def _profile(tmp_path: Path, base: str, changes: dict[str, Any]) -> Any:
    path = tmp_path / f"{base}.yaml"
    path.write_text(dump(apply(base_doc(base), changes)), encoding="utf-8")
    return load_profile(path)


VLLM_033 = {"spec.versions.vllm": "0.33.0", "spec.versions.flashinfer": "0.7.2.post1"}


@pytest.mark.parametrize(("base", "ranks", "unserved"), [
    # vLLM 0.31.0 reads one shared file per config directory: two pools with different engine configs need two.
    ("gb300-disagg-wide-ep", "ca3aa12086a7:shared (1 file)", [("prefill",), ("decode",)]),
    ("gb300-disagg-wide-ep", "35d711997f6b:shared (1 file); ea7396748df6:shared (1 file)", []),
    ("gb300-tuned", "ca3aa12086a7:shared (1 file)", []),
    # A per-rank cache for a stack whose vLLM reads the shared file only.
    ("gb300-tuned", "ca3aa12086a7:dp0 rank0-3 (4 files)", [("worker",)]),
])
def test_fit_on_vllm_031(tmp_path: Path, base: str, ranks: str, unserved: list[tuple[str, ...]]) -> None:
    from stackpin.profile.tuning import fit_cache, parse_ranks_summary

    loaded = _profile(tmp_path, base, {})
    directories = parse_ranks_summary(ranks)
    assert directories is not None
    fit = fit_cache(topology_of(loaded.profile), directories, loaded.profile.spec.versions.vllm, load_catalog())
    assert [tuple(group) for group in fit.unserved] == unserved


@pytest.mark.parametrize(("base", "ranks", "unserved"), [
    # vLLM >= 0.32.0: one file per rank; decode's TP2 x DP8 needs dp0-7 rank0-15.
    ("gb300-disagg-wide-ep", "a1a1a1a1a1a1:dp0 rank0-3 (4 files)", [("decode",)]),
    ("gb300-disagg-wide-ep", "a1a1a1a1a1a1:dp0 rank0-3 (4 files); b2b2b2b2b2b2:dp0-7 rank0-15 (16 files)", []),
    ("gb300-disagg-wide-ep", "b2b2b2b2b2b2:dp0-7 rank0-14 (15 files)", [("prefill",), ("decode",)]),
    ("gb300-tuned", "a1a1a1a1a1a1:dp0 rank0-3 (4 files)", []),
    ("gb300-tuned", "b2b2b2b2b2b2:dp0-7 rank0-15 (16 files)", [("worker",)]),
])
def test_fit_on_vllm_033(tmp_path: Path, base: str, ranks: str, unserved: list[tuple[str, ...]]) -> None:
    from stackpin.profile.tuning import fit_cache, parse_ranks_summary

    loaded = _profile(tmp_path, base, VLLM_033)
    directories = parse_ranks_summary(ranks)
    assert directories is not None
    fit = fit_cache(topology_of(loaded.profile), directories, "0.33.0", load_catalog())
    assert [tuple(group) for group in fit.unserved] == unserved
    rule = [f for f in run_rules(loaded, autotune_cache=tuple(directories)) if f.code == "SP205"]
    assert len(rule) == len(unserved) and all(f.severity == "error" for f in rule)


def test_ranks_summary_round_trips() -> None:
    from stackpin.profile.tuning import ConfigDirectory, parse_ranks_summary

    text = "a1a1a1a1a1a1:dp0 rank0-3 (4 files); b2b2b2b2b2b2:dp0-7 rank0-15 (16 files); c3c3c3c3c3c3:shared (1 file)"
    directories = parse_ranks_summary(text)
    assert directories is not None
    assert directories[1] == ConfigDirectory(name="b2b2b2b2b2b2", dps=frozenset(range(8)), ranks=frozenset(range(16)),
                                             files=16, shared=False)
    assert "; ".join(d.summary() for d in directories) == text
    assert parse_ranks_summary("whatever a packer wrote") is None
