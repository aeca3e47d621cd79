"""Site facts (issue 35): the probe's output parsed, imported into site.yaml (from logs and from Node objects on a
real API server), and read before the catalog by validate, lock, render and the attestation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from click.testing import CliRunner

from stackpin.catalog import load_catalog
from stackpin.catalog.site import SiteView
from stackpin.cli.main import main
from stackpin.lock.lockfile import StackLock, stack_digest
from stackpin.render.output import render_stack
from stackpin.site.facts import build_site, site_yaml
from stackpin.site.probe_runtime import PREFIX
from stackpin.site.readings import cuda_version, parse_logs, parse_query
from tests.kube import Kube
from tests.lockkit import shipped_locks

DATA = Path(__file__).parent / "data" / "site"
ROOT = Path(__file__).resolve().parent.parent
RUBIN = ROOT / "profiles" / "deepseek-v4.1-flash" / "vera-rubin-tuned.yaml"
HEADER = (DATA / "summary-header.txt").read_text()


def _line(node: str, csv_file: str, platform: str = "vera-rubin-nvl72", at: str = "2026-06-02T10:00:00Z",
          exit_code: int = 0) -> str:
    query = {"exit": exit_code, "stdout": (DATA / csv_file).read_text() if exit_code == 0 else "",
             "stderr": "" if exit_code == 0 else "Failed to initialize NVML: Driver/library version mismatch\n"}
    body = {"v": 1, "node": node, "platform": platform, "at": at, "query": query,
            "summary": {"exit": 0, "stdout": HEADER, "stderr": ""}}
    return PREFIX + json.dumps(body, sort_keys=True)


def test_query_csv_in_nvidia_smis_format_with_unknown_values() -> None:
    gpus = parse_query((DATA / "rubin-prerelease.csv").read_text(), "x")
    assert [g.name for g in gpus] == ["NVIDIA Graphics Device"] * 4
    assert [g.memory_mib for g in gpus] == [294912, 294912, 294912, 294400]
    assert gpus[2].power_limit_w is None and gpus[0].power_limit_w == 1800.0  # [N/A] is no value
    assert {g.compute_cap for g in gpus} == {"10.7"}
    assert cuda_version(HEADER) == "13.1"
    with pytest.raises(Exception, match="x: nvidia-smi printed 2 field"):
        parse_query("NVIDIA H200, 143771\n", "x")


def test_probe_lines_are_found_in_kubectl_logs_with_prefixes() -> None:
    logs = "\n".join([f"[pod/probe-0-abc/probe] {_line('rubin-a', 'rubin-prerelease.csv')}", "some other line",
                      _line("rubin-b", "rubin-prerelease.csv", at="2026-06-02T10:01:00Z"),
                      _line("rubin-c", "rubin-prerelease.csv", exit_code=9)])
    readings = parse_logs(logs, "probe.log")
    assert [(r.node, r.problem) for r in readings] == [
        ("rubin-a", None), ("rubin-b", None),
        ("rubin-c", "nvidia-smi failed (exit 9: Failed to initialize NVML: Driver/library version mismatch)")]
    facts, problems = build_site(readings, [], platforms=set(load_catalog().bundled_hardware.platforms),
                                 now="2026-06-02T11:00:00Z")
    rubin = facts.platforms["vera-rubin-nvl72"]
    assert rubin.gpu_names == ("NVIDIA Graphics Device",) and rubin.hbm_mib == 294400  # the smallest GPU
    assert rubin.cuda_version == "13.1" and rubin.compute_capability == "10.7" and rubin.power_limit_w == 1800.0
    assert rubin.measured["gpuNames"].nodes == ("rubin-a", "rubin-b")
    assert rubin.measured["gpuNames"].at == "2026-06-02T10:01:00Z"
    assert problems == ["rubin-c (vera-rubin-nvl72): nvidia-smi failed (exit 9: Failed to initialize NVML: "
                        "Driver/library version mismatch)"]
    with pytest.raises(Exception, match=r"probe.log:2: the probe line is not JSON"):
        parse_logs("x\n" + PREFIX + "{not json\n", "probe.log")


def _import(tmp_path: Path, *lines: str, extra: tuple[str, ...] = ()) -> Path:
    logs = tmp_path / "probe.log"
    logs.write_text("\n".join(lines) + "\n")
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    result = CliRunner().invoke(main, ["site", "import", str(logs), "--out", str(site / "site.yaml"), *extra])
    assert result.exit_code == 0, result.output
    return site


def _validate(monkeypatch: pytest.MonkeyPatch, site: Path | None) -> str:
    if site is not None:
        monkeypatch.setenv("STACKPIN_CATALOG_PATH", str(site))
    result = CliRunner().invoke(main, ["validate", str(RUBIN)])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_measured_fact_replaces_the_estimate_and_validate_says_so(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    before = _validate(monkeypatch, None)
    assert "info SP262 spec.target.platform: vera-rubin-nvl72: GPU name 'NVIDIA Rubin'" in before
    assert "SP261" not in before
    site = _import(tmp_path, _line("rubin-a", "rubin-prerelease.csv"))
    after = _validate(monkeypatch, site)
    notes = [line for line in after.splitlines() if "SP261" in line]
    assert any("site fact gpuNames: NVIDIA Graphics Device replaces the catalog's NVIDIA Rubin (an estimate); "
               "measured by nvidia-smi --query-gpu=name on rubin-a at 2026-06-02T10:00:00Z" in n for n in notes)
    assert any("site fact hbmMib: 294400 MiB replaces the catalog's 277.5 GiB (an estimate)" in n for n in notes)
    # What the probe cannot see (the node label) stays an estimate; with a site overlay that is a warning.
    [left] = [line for line in after.splitlines() if "SP262" in line]
    assert "warning SP262" in left and "node label nvidia.com/gpu.product=NVIDIA-Rubin" in left
    assert "GPU name" not in left and "HBM" not in left
    assert load_catalog().gpu_of("vera-rubin-nvl72").device_name == "NVIDIA Graphics Device"


def test_a_disagreeing_measurement_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _import(tmp_path, _line("rubin-a", "gb300.csv"))  # compute capability 10.3 on a "Rubin" pool
    out = _validate(monkeypatch, site)
    assert "warning SP263 spec.target.platform: the site's GPUs report compute capability 10.3; the catalog's " \
           "Rubin (Vera Rubin) is sm_107 (10.7)" in out


def test_a_bad_overlay_is_one_line_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "site.yaml").write_text("apiVersion: stackpin.dev/v1\nkind: SiteFacts\nplatforms:\n"
                                        "  rubin-nvl144:\n    measured: {}\n")
    monkeypatch.setenv("STACKPIN_CATALOG_PATH", str(tmp_path))
    result = CliRunner().invoke(main, ["validate", str(RUBIN)])
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {tmp_path}/site.yaml:4:3: platforms.rubin-nvl144: not a catalog platform")


@pytest.mark.parametrize("kind", ["fifo", "device link", "directory"])
def test_a_site_yaml_that_is_no_file_is_refused_not_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           kind: str) -> None:
    """Skipping it would silently drop the site's facts: it is named, in one line, and nothing is read from it."""
    path = tmp_path / "site.yaml"
    {"fifo": lambda: os.mkfifo(path), "device link": lambda: path.symlink_to("/dev/zero"),
     "directory": lambda: path.mkdir()}[kind]()
    monkeypatch.setenv("STACKPIN_CATALOG_PATH", str(tmp_path))
    result = CliRunner().invoke(main, ["validate", str(RUBIN)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"error: {path}: cannot read the catalog file: not a regular file"]


# --- the lock records the facts; render reads only the lock ------------------------------------------

def _with_site(lock: StackLock, view: SiteView | None) -> StackLock:
    resolved = lock.resolved.replace(site=view)
    return msgspec.structs.replace(lock, resolved=resolved, stack_digest=stack_digest(lock.profile, resolved))


def _view(tmp_path: Path, csv_file: str = "rubin-prerelease.csv", strict: bool = False) -> SiteView:
    readings = parse_logs(_line("rubin-a", csv_file), "probe.log")
    facts, _ = build_site(readings, [], platforms=set(load_catalog().bundled_hardware.platforms),
                          now="2026-06-02T11:00:00Z", strict=strict)
    (tmp_path / "site.yaml").write_text(site_yaml(facts))
    monkey_free = load_catalog().for_lock(None)
    assert monkey_free.site_views == {}
    from stackpin.catalog.site import read_site

    read, digest = read_site(tmp_path / "site.yaml", set(load_catalog().bundled_hardware.platforms))
    return SiteView(platform="vera-rubin-nvl72", strict=read.strict, facts=read.platforms["vera-rubin-nvl72"],
                    overlay=digest)


def _expected(lock: StackLock) -> dict[str, Any]:
    [cm] = [yaml.safe_load(t) for n, t in render_stack(lock).files.items() if n.startswith("configmap-")]
    return {"script": cm["data"]["attest.py"], "expected": json.loads(cm["data"]["expected.json"])}


def test_render_reads_the_locks_site_facts_not_a_site_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = shipped_locks()["vera-rubin-tuned"]
    plain = render_stack(lock).files
    _import(tmp_path, _line("rubin-a", "rubin-prerelease.csv"))
    monkeypatch.setenv("STACKPIN_CATALOG_PATH", str(tmp_path / "site"))
    assert render_stack(lock).files == plain  # a site.yaml found now changes nothing the lock did not record
    measured = _with_site(lock, _view(tmp_path))
    assert measured.stack_digest != lock.stack_digest
    expected = _expected(measured)["expected"]
    assert expected["gpu"] == "NVIDIA Graphics Device" and "gpuCheck" not in expected
    monkeypatch.delenv("STACKPIN_CATALOG_PATH")
    assert render_stack(measured).files == render_stack(measured).files  # and the same bytes without one


def test_the_lock_records_the_overlay_and_lock_check_sees_it_change(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from stackpin.lock.lockfile import check_locks, read_lock
    from stackpin.lock.run import run_lock
    from tests.lockkit import build_demo_mirror, load_profile

    shutil.copy(RUBIN.parent / "gb300-tuned.yaml", tmp_path / "gb300-tuned.yaml")
    shutil.copy(RUBIN, tmp_path / "vera-rubin-tuned.yaml")
    site = _import(tmp_path, _line("rubin-a", "rubin-prerelease.csv"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STACKPIN_CATALOG_PATH", str(site))
    profiles = [Path("vera-rubin-tuned.yaml")]
    build_demo_mirror(Path("mirror"), [load_profile(p).profile for p in profiles])
    run_lock(profiles, Path("lockfiles"), oci_layout="mirror/oci", hf_cache="mirror/hf")
    lock = read_lock(Path("lockfiles/vera-rubin-tuned.lock.yaml"))
    assert lock.resolved.site is not None and lock.resolved.site.facts.gpu_names == ("NVIDIA Graphics Device",)
    assert [o.status for o in check_locks(profiles, Path("lockfiles"))] == ["current"]
    monkeypatch.delenv("STACKPIN_CATALOG_PATH")
    [gone] = check_locks(profiles, Path("lockfiles"))
    assert (gone.status, gone.detail) == ("stale", "the site overlay it was locked with is gone; relock, or restore "
                                                   "site.yaml")


# --- the attestation: measured must match, an estimate only logs ---------------------------------------

def _attest(tmp_path: Path, lock: StackLock, names: list[str]) -> subprocess.CompletedProcess[str]:
    rendered = _expected(lock)
    script, expected = tmp_path / "attest.py", rendered["expected"]
    script.write_text(rendered["script"])
    expected["packages"], expected["autotuneCache"] = {}, None  # the GPU check alone
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n[ \"$1 $2\" = '--query-gpu=name --format=csv,noheader' ] || exit 64\n"
                   + "".join(f"echo '{n}'\n" for n in names))
    smi.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    return subprocess.run([sys.executable, "-S", str(script), str(tmp_path / "expected.json")], capture_output=True,
                          text=True, env=env, timeout=60, check=False)


def test_an_estimated_gpu_name_logs_a_mismatch_and_passes(tmp_path: Path) -> None:
    lock = shipped_locks()["vera-rubin-tuned"]
    assert _expected(lock)["expected"]["gpuCheck"] == "log"
    run = _attest(tmp_path, lock, ["NVIDIA Graphics Device"] * 4)
    assert run.returncode == 0, run.stderr
    assert run.stderr.startswith("attestation note: GPU NVIDIA Graphics Device is not NVIDIA Rubin, the catalog's "
                                 "unconfirmed name")
    assert "GPU 4x NVIDIA Graphics Device (the catalog's NVIDIA Rubin unconfirmed)" in run.stdout


def test_a_measured_gpu_name_must_match(tmp_path: Path) -> None:
    lock = _with_site(shipped_locks()["vera-rubin-tuned"], _view(tmp_path))
    ok = _attest(tmp_path, lock, ["NVIDIA Graphics Device"] * 4)
    assert ok.returncode == 0 and ok.stderr == "" and "GPU 4x NVIDIA Graphics Device" in ok.stdout
    bad = _attest(tmp_path, lock, ["NVIDIA Rubin"] * 4)
    assert bad.returncode == 1 and bad.stderr.rstrip().endswith(
        "GPU NVIDIA Rubin is not the rack's NVIDIA Graphics Device")


def test_a_strict_site_fails_on_an_estimate_it_did_not_measure(tmp_path: Path) -> None:
    view = _view(tmp_path, strict=True)
    facts = view.facts.replace(gpu_names=None, measured={k: v for k, v in view.facts.measured.items()
                                                         if k != "gpuNames"})
    lock = _with_site(shipped_locks()["vera-rubin-tuned"], view.replace(facts=facts))
    assert "gpuCheck" not in _expected(lock)["expected"]
    run = _attest(tmp_path, lock, ["NVIDIA Graphics Device"])
    assert run.returncode == 1 and "GPU NVIDIA Graphics Device is not the rack's NVIDIA Rubin" in run.stderr


def test_a_confirmed_catalog_name_still_fails_the_pod(tmp_path: Path) -> None:
    lock = shipped_locks()["gb300-tuned"]
    assert "gpuCheck" not in _expected(lock)["expected"]
    assert _attest(tmp_path, lock, ["NVIDIA H200"]).returncode == 1


# --- the cluster: Node objects and the probe through stackpin's cluster edge ----------------------------

def test_import_from_cluster_reads_node_objects(kube: Kube, tmp_path: Path) -> None:
    pool = kube.namespace  # a label of this test's own nodes: the server is shared
    names = [f"{pool}-rubin-{i}" for i in range(2)]
    for name in names:
        kube.env.ok("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"example.com/pool": pool, "nvidia.com/gpu.product": "NVIDIA-Graphics-Device",
                                     "nvidia.com/gpu.clique": "9277d399.32766", "kubernetes.io/arch": "arm64"}}})
        kube.env.ok("PATCH", f"/api/v1/nodes/{name}/status", {"status": {
            "allocatable": {"nvidia.com/gpu": "4", "cpu": "144"}, "capacity": {"nvidia.com/gpu": "4", "cpu": "144"}}},
            content_type="application/merge-patch+json")
    try:
        logs = tmp_path / "probe.log"
        logs.write_text(_line(names[0], "rubin-prerelease.csv") + "\n")
        out = tmp_path / "site.yaml"
        result = kube.stackpin("site", "import", str(logs), "--from-cluster", "--selector", f"example.com/pool={pool}",
                               "--platform", "vera-rubin-nvl72", "--out", str(out), namespace=False)
        assert result.exit_code == 0, result.output
        rubin = yaml.safe_load(out.read_text())["platforms"]["vera-rubin-nvl72"]
        assert rubin["gpuProduct"] == "NVIDIA-Graphics-Device" and rubin["gpusPerNode"] == 4
        assert rubin["imex"] is True  # envtest serves the bundled ComputeDomain CRD; both nodes carry a clique
        assert rubin["measured"]["gpuProduct"]["nodes"] == names
        assert rubin["measured"]["gpuNames"]["nodes"] == [names[0]]  # only one node's probe line was given
    finally:
        for name in names:
            kube.env.request("DELETE", f"/api/v1/nodes/{name}")


def test_probe_apply_creates_the_job_through_the_cluster_edge(kube: Kube) -> None:
    result = kube.stackpin("site", "probe", "--platform", "vera-rubin-nvl72", "--image", "example.com/py:3.12",
                           "--nodes", "2", "--selector", "example.com/pool=rubin", "--apply")
    assert result.exit_code == 0, result.output
    job = kube.env.ok("GET", f"/apis/batch/v1/namespaces/{kube.namespace}/jobs/stackpin-site-probe-vera-rubin-nvl72")
    spec = job["spec"]["template"]["spec"]
    assert job["spec"]["completions"] == 2
    assert spec["nodeSelector"] == {"example.com/pool": "rubin", "kubernetes.io/arch": "arm64"}
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_the_probe_script_prints_one_line_import_reads(tmp_path: Path) -> None:
    from stackpin.site.probe import SCRIPT

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nif [ $# -eq 0 ]; then cat '{DATA / 'summary-header.txt'}'; exit 0; fi\n"
                   f"[ \"$1 $2\" = '--query-gpu=name,memory.total,driver_version,power.limit,compute_cap "
                   f"--format=csv,noheader,nounits' ] || exit 64\ncat '{DATA / 'rubin-prerelease.csv'}'\n")
    smi.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "NODE_NAME": "rubin-7", **{k: os.environ[k] for k in ("LC_ALL",)
                                                                          if k in os.environ}}
    run = subprocess.run([sys.executable, "-S", str(SCRIPT), "vera-rubin-nvl72"], capture_output=True, text=True,
                         env=env, timeout=60, check=True)
    [reading] = parse_logs(run.stdout, "stdout")
    assert (reading.node, reading.cuda_version, reading.problem) == ("rubin-7", "13.1", None)
    assert len(reading.gpus) == 4
