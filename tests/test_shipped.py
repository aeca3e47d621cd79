"""The shipped profiles and their committed lockfiles stay in step, and the demo relocks them byte for byte."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stackpin.catalog import load_catalog
from stackpin.demo.mirror import build_demo_mirror
from stackpin.lock.lockfile import check_locks, read_lock
from stackpin.lock.run import run_lock
from stackpin.profile.loader import load_profile
from stackpin.validate.check import expand_profile_args

ROOT = Path(__file__).resolve().parent.parent
PROFILES = expand_profile_args([str(ROOT / "profiles")])


def test_every_shipped_profile_has_a_current_lock() -> None:
    outcomes = check_locks(PROFILES, ROOT / "lockfiles")
    assert [(Path(o.profile).name, o.status) for o in outcomes if o.status != "current"] == [], (
        "run `make demo` to relock the shipped profiles")
    assert len(outcomes) == 7


def test_committed_locks_say_they_hold_stand_in_pins() -> None:
    for path in sorted((ROOT / "lockfiles").glob("*.lock.yaml")):
        lock = read_lock(path)  # also checks stackDigest against the content
        assert lock.resolved.stand_in, path
        assert path.read_text().splitlines()[1].startswith("# STAND-IN PINS")
        arch = load_catalog().platforms[lock.stack_profile.spec.target.platform].cpu_arch
        assert lock.resolved.images["runtime"].platform == f"linux/{arch}", path


def test_demo_relocks_identical_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(ROOT / "profiles", tmp_path / "profiles")
    monkeypatch.chdir(tmp_path)
    profiles = expand_profile_args(["profiles"])
    build_demo_mirror(Path(".demo/mirror"), [load_profile(p).profile for p in profiles])
    run_lock(profiles, Path("lockfiles"), oci_layout=".demo/mirror/oci", hf_cache=".demo/mirror/hf")
    for committed in sorted((ROOT / "lockfiles").glob("*.lock.yaml")):
        assert (tmp_path / "lockfiles" / committed.name).read_bytes() == committed.read_bytes(), committed.name


def test_committed_manifests_match_the_committed_locks() -> None:
    from click.testing import CliRunner

    from stackpin.cli.main import main

    result = CliRunner().invoke(main, ["render", "--check", "--lockdir", str(ROOT / "lockfiles"),
                                       "--output-dir", str(ROOT / "manifests")])
    assert result.exit_code == 0, result.output + "\nrun `make demo` to re-render the shipped stacks"


def test_committed_manifests_validate() -> None:
    from stackpin.validate.manifests import validate_paths

    assert [str(e) for e in validate_paths([ROOT / "manifests"])] == []


@pytest.mark.parametrize(("stack", "label", "arch", "compute_domain"), [
    ("gb200-tuned", "NVIDIA-GB200", "arm64", False),
    ("b200-disagg", "NVIDIA-B200", "amd64", False),
    ("gb300-disagg-wide-ep", "NVIDIA-GB300", "arm64", True),
])
def test_shipped_targets_select_their_nodes(stack: str, label: str, arch: str, compute_domain: bool) -> None:
    """GB200 and the 8-GPU B200 node (issue 19): every worker selects the GPU product the upstream recipes
    use and its CPU architecture; only a replica spanning NVL72 trays gets a ComputeDomain, never an HGX node."""
    import yaml

    folder = ROOT / "manifests" / stack
    assert any(folder.glob("computedomain-*.yaml")) is compute_domain
    dgd = yaml.safe_load(next(folder.glob("dynamographdeployment-*.yaml")).read_text())
    workers = [c for c in dgd["spec"]["components"] if c["type"] != "frontend"]
    assert workers
    for comp in workers:
        selector = comp["podTemplate"]["spec"]["nodeSelector"]
        assert selector["nvidia.com/gpu.product"] == label and selector["kubernetes.io/arch"] == arch, comp["name"]
        assert "multinode" not in comp or compute_domain, comp["name"]
