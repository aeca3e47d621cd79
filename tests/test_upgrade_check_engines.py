"""`upgrade check` follows the pins of Dynamo's extra named after the stack's engine: the vLLM its `vllm`
extra pins, or the SGLang its `sglang` extra pins, with that extra's NIXL and the FlashInfer that engine
release pins. Library level (stackpin.upgrade.check), against a --find-links directory of packages built
in the real shapes (devkit/enginepkgs.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from devkit import enginepkgs as pkgs
from stackpin.cli.main import main
from stackpin.engines.index import PackageIndex
from stackpin.profile.loader import load_profiles
from stackpin.upgrade.check import ProfileCheck, check_profile, dynamo_pins, tracked

PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml"


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dynamo 9.0.0 (vllm 9.0.0; sglang 9.0.5, nixl 1.4.1), 9.1.0 (vllm 9.1.0; sglang 9.1.5, nixl 1.5.0),
    9.2.0 (vllm 9.2.0; sglang 9.2.5, which the index lacks); each engine release pins its FlashInfer."""
    root = tmp_path_factory.mktemp("packages")
    pkgs.dynamo_wheel(root, "9.0.0", vllm="9.0.0", sglang="9.0.5", sglang_nixl="1.4.1")
    pkgs.dynamo_wheel(root, "9.1.0", vllm="9.1.0", nixl="1.4.1", sglang="9.1.5", sglang_nixl="1.5.0")
    pkgs.dynamo_wheel(root, "9.2.0", vllm="9.2.0", nixl="1.4.1", sglang="9.2.5", sglang_nixl="1.5.0")
    pkgs.vllm_sdist(root, "9.0.0")
    pkgs.vllm_sdist(root, "9.1.0", requires=pkgs.vllm_requires(flashinfer="0.7.3"))
    pkgs.vllm_sdist(root, "9.2.0", requires=pkgs.vllm_requires(flashinfer="0.7.3"))
    pkgs.sglang_pins_wheel(root, "9.0.5", flashinfer="0.7.2.post1")
    pkgs.sglang_pins_wheel(root, "9.1.5", flashinfer="0.7.4")
    pkgs.sglang_pins_wheel(root, "9.3.0", flashinfer="0.7.4")  # no Dynamo release pins it
    pkgs.flashinfer_wheel(root, "0.7.3")
    pkgs.flashinfer_wheel(root, "0.7.4")
    return root


@pytest.fixture()
def profile(tmp_path: Path, packages: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """gb300-tuned at Dynamo 9.0.0, with a site catalog of that release (as `engines add` writes it)."""
    monkeypatch.setenv("STACKPIN_CATALOG_PATH", "")
    catalog = tmp_path / "catalog"
    added = CliRunner().invoke(main, ["engines", "add", "--from", str(packages / "ai_dynamo-9.0.0-py3-none-any.whl"),
                                      "--catalog", str(catalog)])
    assert added.exit_code == 0, added.output
    doc: dict[str, Any] = yaml.safe_load(PROFILE.read_text())
    doc["spec"]["catalogPath"] = [str(catalog)]
    doc["spec"]["versions"].update(dynamo="9.0.0", vllm="9.0.0", flashinfer="0.7.2.post1", nixl="1.4.1")
    path = tmp_path / "gb300-tuned.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _check(profile: Path, packages: Path, engine: str) -> ProfileCheck:
    [loaded] = load_profiles([profile])
    with PackageIndex(None, find_links=packages) as index:
        return check_profile(loaded, index, engine=engine)


def test_a_vllm_stack_follows_the_vllm_extra(profile: Path, packages: Path) -> None:
    found = _check(profile, packages, "vllm")
    assert found.available is not None
    assert (found.available.dynamo, found.available.vllm, found.available.nixl, found.available.flashinfer,
            found.available.engine) == ("9.2.0", "9.2.0", "1.4.1", "0.7.3", "vllm")
    assert [c.installable for c in found.releases] == [True, True]
    # Its record reads as before SGLang existed: the engine's release under its name.
    assert found.available.model_dump(mode="json", by_alias=True) == {
        "dynamo": "9.2.0", "vllm": "9.2.0", "flashinfer": "0.7.3", "nixl": "1.4.1"}
    assert "sglang" not in found.unshipped


def test_an_sglang_stack_follows_the_sglang_extra(profile: Path, packages: Path) -> None:
    found = _check(profile, packages, "sglang")
    first, second = found.releases
    # 9.1.0: SGLang 9.1.5 and the sglang extra's NIXL 1.5.0 (not the vllm extra's 1.4.1), and the FlashInfer
    # SGLang 9.1.5 pins (0.7.4), not the one vLLM 9.1.0 pins (0.7.3).
    assert first.pins is not None and first.installable
    assert (first.pins.sglang, first.pins.nixl, first.pins.flashinfer, first.pins.engine) == ("9.1.5", "1.5.0",
                                                                                              "0.7.4", "sglang")
    assert "vllm" not in first.pins.model_dump(mode="json", by_alias=True)
    # 9.2.0's SGLang is not on the index: listed with that pin, not offered (its vLLM is there).
    assert second.pins is not None and not second.installable
    assert [(m.requirement, m.pinned_by) for m in second.missing] == [("sglang==9.2.5", "ai-dynamo 9.2.0")]
    assert second.pins.flashinfer is None  # SGLang 9.2.5 is on neither the catalog nor the index
    assert found.available is not None and found.available.dynamo == "9.1.0"
    assert found.available.model_dump(mode="json", by_alias=True)["sglang"] == "9.1.5"


def test_catalog_pins_come_first_and_a_site_entry_without_sglang_pins_is_read_from_the_index(
        profile: Path, packages: Path) -> None:
    catalog = Path(yaml.safe_load(profile.read_text())["spec"]["catalogPath"][0])
    versions = catalog / "versions.yaml"
    text = versions.read_text()
    assert '"9.0.0": {vllm: 9.0.0, nixl: 1.4.1, crd: v1beta1, sglang: 9.0.5, sglang_nixl: 1.4.1}' in text
    # A site's entries: 9.1.0 written before stackpin recorded the sglang extra (left to the index's metadata);
    # 9.2.0's with its sglang pins, and SGLang 9.2.5's FlashInfer, which the index cannot tell.
    text = text.replace("dynamo:\n", 'dynamo:\n  "9.1.0": {vllm: 9.1.0, nixl: 1.4.1, crd: v1beta1}\n'
                                     '  "9.2.0": {vllm: 9.2.0, nixl: 1.4.1, crd: v1beta1, sglang: 9.2.5, '
                                     'sglang_nixl: 1.5.1}\n')
    versions.write_text(text + 'sglang:\n  "9.2.5": {flashinfer: 0.7.5, torch: 2.14.0}\n')
    first, second = _check(profile, packages, "sglang").releases
    assert first.pins is not None and (first.pins.sglang, first.pins.nixl) == ("9.1.5", "1.5.0")
    assert second.pins is not None and (second.pins.sglang, second.pins.nixl, second.pins.flashinfer) == (
        "9.2.5", "1.5.1", "0.7.5")
    assert [m.requirement for m in second.missing] == ["sglang==9.2.5", "flashinfer-python==0.7.5"]


def test_dynamo_pins_by_engine() -> None:
    requires = ("nixl[cu13]==1.4.1; extra == 'vllm'", "vllm[flashinfer]==0.31.0; extra == 'vllm'",
                "nixl[cu13]==1.5.0; extra == 'sglang'", "sglang[diffusion]==0.5.21; extra == 'sglang'",
                "nixl[cu13]<1.1.0,>=1.0.0; extra == 'trtllm'")
    assert dynamo_pins(requires) == ("0.31.0", "1.4.1")
    assert dynamo_pins(requires, "sglang") == ("0.5.21", "1.5.0")
    assert tracked("sglang") == {"sglang": "sglang", "flashinfer-python": "flashinfer", "nixl": "nixl"}
    from stackpin.errors import StackpinError

    with pytest.raises(StackpinError, match="no engine 'trtllm'"):
        dynamo_pins(requires, "trtllm")


def test_a_profile_running_sglang_is_checked_by_its_spec_engine(profile: Path, packages: Path) -> None:
    from stackpin.upgrade.check import check_profiles

    doc = yaml.safe_load(profile.read_text())
    doc["spec"]["engine"] = "sglang"
    versions = doc["spec"]["versions"]
    del versions["vllm"]
    versions["sglang"] = "9.0.5"
    sglang = profile.with_name("gb300-sglang.yaml")
    sglang.write_text(yaml.safe_dump(doc, sort_keys=False))
    with PackageIndex(None, find_links=packages) as index:
        [found] = check_profiles([sglang], index)  # no engine given: the profile's
    assert found.current.model_dump(mode="json", by_alias=True) == {
        "dynamo": "9.0.0", "flashinfer": "0.7.2.post1", "nixl": "1.4.1", "sglang": "9.0.5"}
    assert found.available is not None and (found.available.dynamo, found.available.sglang) == ("9.1.0", "9.1.5")
    # Newer SGLang and FlashInfer releases no newer Dynamo release pins: listed, not proposed.
    assert found.unshipped == {"sglang": ["9.3.0"], "flashinfer-python": ["0.7.3"]}
    result = CliRunner().invoke(main, ["upgrade", "check", str(sglang), "--find-links", str(packages)])
    assert result.exit_code == 1, result.output
    assert "sglang 9.0.5 -> 9.1.5, flashinfer 0.7.2.post1 -> 0.7.4, nixl 1.4.1 -> 1.5.0" in result.output
