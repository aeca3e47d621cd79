"""stackpin.autotune and `stackpin autotune`: caches built in vLLM's real on-disk layout, a real
distribution registry (tests/registry.py) and OCI layout directories."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from stackpin.autotune.cache import (
    ARTIFACT_TYPE,
    IMAGE_PLATFORMS,
    LAYER_TAR_GZIP,
    LEGACY_LAYER_TAR_GZIP,
    TITLE,
    TYPE_ANNOTATION,
    CacheInfo,
    inspect_cache,
)
from stackpin.autotune.fetch import fetch_cache, unpack_cache
from stackpin.autotune.image import cache_image, pack_cache, push_cache, write_cache_to_layout
from stackpin.autotune.verify import Mismatch, arch_tokens, tuning_groups, verify_cache
from stackpin.catalog import load_catalog
from stackpin.cli.main import main
from stackpin.errors import InputError, IntegrityError, StackpinError
from stackpin.jsonio import canonical_json
from stackpin.lock.oci.client import RegistryClient
from stackpin.lock.oci.media import OCI_CONFIG, OCI_INDEX, OCI_MANIFEST, parse_manifest, sha256_digest
from stackpin.lock.ocilayout import LayoutResolver, LayoutWriter
from stackpin.profile.loader import load_profile
from stackpin.profile.model import Pool, StackProfile
from stackpin.profile.topology import topology_of
from stackpin.profile.tuning import expected_files
from tests.helpers import matches
from tests.registry import RunningRegistry

PROFILES = Path(__file__).resolve().parent.parent / "profiles" / "deepseek-v4.1-flash"
FI = "0.7.2.post1"  # what vLLM 0.33.0 pins (catalog versions.yaml)
ARCH = "103a"  # GB300 = sm_103; FlashInfer names it 103a
HASH_W = "a1" * 32  # config-hash directories: sha256 hex
HASH_P = "b2" * 32
HASH_D = "c3" * 32

META = {
    "flashinfer_version": FI,
    "cuda_version": "13.0",
    "cublas_version": "13.1.0",
    "cudnn_version": "91500",
    "cudnn_frontend_version": "1.16.0",
    "cutlass_dsl_version": "4.3.2",
    "gpu": "NVIDIA GB300",
}


def _verify(info: CacheInfo, profile: StackProfile, catalog: Any) -> list[Mismatch]:
    """verify with the runtime's metadata the capture Job records: every field is checked."""
    return verify_cache(info, profile, catalog, META)


def entries(n: int, rank: int) -> dict[str, list[object]]:
    """FlashInfer file keys are str(key_fields): (op, runner class, bucketed shapes, extras)."""
    out: dict[str, list[object]] = {}
    for i in range(n):
        m = 2 ** (i % 12)
        if i % 2:
            key = ("trtllm::fused_moe", "TrtllmGenMoERunner", ((m, 7168), (256, 7168)), (rank, 4))
            out[str(key)] = ["TrtllmGenMoERunner", [i % 7, 2 * i]]
        else:
            key = ("fp8_gemm", "CutlassFp8GemmRunner", ((m, 7168), (7168, 2048)), ())
            out[str(key)] = ["CutlassFp8GemmRunner", i % 5]
    return out


def write_file(path: Path, meta: dict[str, str] | None = META, n: int = 6, rank: int = 0) -> None:
    doc: dict[str, object] = {}
    if meta is not None:
        doc["_metadata"] = meta
    doc.update(entries(n, rank))
    doc["_generation"] = sha256_digest(json.dumps(doc, sort_keys=True).encode()).removeprefix("sha256:")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))


def write_pool(cache: Path, config_hash: str, tp: int, dp: int = 1, *, fi: str = FI, arch: str = ARCH,
               skip: tuple[str, ...] = (), **kw: object) -> None:
    pool = Pool(tensor_parallel=tp, data_parallel=dp)
    for _, rank, name in expected_files(pool):
        if name not in skip:
            write_file(cache / fi / arch / config_hash / name, rank=rank, **kw)  # type: ignore[arg-type]


def profile_at(tmp: Path, base: str, vllm: str = "0.33.0", flashinfer: str = FI) -> Path:
    """A profile extending a shipped one with other engine pins (the shipped ones pin vLLM 0.31.0)."""
    path = tmp / f"{Path(base).stem}-vllm{vllm}.yaml"
    rel = os.path.relpath(PROFILES / base, tmp)
    path.write_text(
        "apiVersion: stackpin.dev/v1\nkind: StackProfile\n"
        f"extends: {rel}\nmetadata:\n  name: test-{Path(base).stem}\n"
        f"spec:\n  versions:\n    vllm: {vllm}\n    flashinfer: {flashinfer}\n"
    )
    return path


def load(tmp: Path, base: str, **kw: str) -> StackProfile:
    return load_profile(profile_at(tmp, base, **kw)).profile


@pytest.fixture
def tuned_cache(tmp_path: Path) -> Path:
    """$VLLM_CACHE_ROOT of a gb300-tuned worker: 18 replicas of TP4 share one config, dp0 rank0..3."""
    root = tmp_path / "vllm-cache"
    write_pool(root / "flashinfer_autotune_cache", HASH_W, tp=4)
    (root / "torch_compile_cache").mkdir()  # other vLLM caches next to it are not ours
    return root


@pytest.fixture
def disagg_cache(tmp_path: Path) -> Path:
    cache = tmp_path / "flashinfer_autotune_cache"
    write_pool(cache, HASH_P, tp=4)
    write_pool(cache, HASH_D, tp=2, dp=8)
    return cache


@pytest.fixture
def client(tmp_path: Path) -> Iterator[RegistryClient]:
    with RegistryClient(retries=1, backoff=0.01, docker_config=tmp_path / "none.json") as c:
        yield c


def fields(mismatches: list[Mismatch]) -> list[str]:
    return [m.field for m in mismatches]


# --- inspect ------------------------------------------------------------------------------------


def test_inspect_reads_every_rank_file(tuned_cache: Path) -> None:
    info = inspect_cache(tuned_cache)
    assert info.root.endswith("flashinfer_autotune_cache")
    assert [(f.dp, f.rank) for f in info.files] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    f = info.files[0]
    assert f.path == f"{FI}/{ARCH}/{HASH_W}/autotune_configs_dp0_rank0.json"
    assert (f.flashinfer_version, f.arch_list, f.config_hash) == (FI, ARCH, HASH_W)
    assert f.metadata == META and f.entries == 6 and f.generation and len(f.generation) == 64
    assert info.flashinfer_versions == [FI] and info.arch_lists == [ARCH] and info.values("gpu") == ["NVIDIA GB300"]
    assert info.ranks_summary() == f"{HASH_W[:12]}:dp0 rank0-3 (4 files)"
    # The flashinfer_autotune_cache directory itself is accepted too, with the same answer.
    assert inspect_cache(tuned_cache / "flashinfer_autotune_cache") == info


def test_inspect_summarizes_dp_folded_ranks(disagg_cache: Path) -> None:
    info = inspect_cache(disagg_cache)
    assert len(info.files) == 4 + 16
    decode = [f for f in info.files if f.config_hash == HASH_D]
    assert {(f.dp, f.rank) for f in decode} == {(d, 2 * d + t) for d in range(8) for t in range(2)}
    assert info.ranks_summary() == (f"{HASH_P[:12]}:dp0 rank0-3 (4 files); "
                                    f"{HASH_D[:12]}:dp0-7 rank0-15 (16 files)")


@pytest.mark.parametrize(
    ("make", "expect"),
    [
        (lambda d: (d / "autotune_configs_dp0_rank0.json").write_text("{not json"), "not valid JSON"),
        (lambda d: (d / "autotune_configs_dp0_rank0.json").write_text("[1, 2]"), "not a JSON object"),
        (lambda d: (d / "autotune_configs_dp0_rank0.json").write_text('{"k": "v"}'), "is not [runner, tactic"),
        (lambda d: (d / "autotune_configs_rank0.json").write_text("{}"), "unexpected file name"),
        (lambda d: (d / ".autotuner_x1y2.tmp").write_text("{}"), "unexpected file name"),
        (lambda d: (d / "sub").mkdir(), "unexpected directory"),
        (lambda d: (d.parent / "not-a-hash").mkdir(), "expected a config hash"),
        (lambda d: (d / "autotune_configs_dp0_rank1.json").symlink_to(d / "autotune_configs_dp0_rank0.json"),
         "symbolic link"),
    ],
)
def test_inspect_rejects_what_vllm_did_not_write(tmp_path: Path, make: object, expect: str) -> None:
    cache = tmp_path / "flashinfer_autotune_cache"
    write_file(cache / FI / ARCH / HASH_W / "autotune_configs_dp0_rank0.json")
    make(cache / FI / ARCH / HASH_W)  # type: ignore[operator]
    with pytest.raises(InputError) as err:
        inspect_cache(cache)
    assert expect in str(err.value)
    assert str(cache) in str(err.value)  # names the file or directory


def test_inspect_empty_or_missing(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no autotune files found"):
        inspect_cache(tmp_path)
    with pytest.raises(InputError, match="no such directory"):
        inspect_cache(tmp_path / "nope")


def test_inspect_reads_pre_032_shared_file(tmp_path: Path) -> None:
    write_file(tmp_path / "c" / "0.7.0.post1" / ARCH / HASH_W / "autotune_configs.json")
    (f,) = inspect_cache(tmp_path / "c").files
    assert (f.dp, f.rank, f.flashinfer_version) == (None, None, "0.7.0.post1")


# --- verify -------------------------------------------------------------------------------------


def test_arch_tokens_follow_flashinfer() -> None:
    assert arch_tokens("sm_103") == {"103a"} and arch_tokens("sm_90") == {"90a"}
    assert arch_tokens("sm_80") == {"80"} and arch_tokens("sm_107") == {"107a"}


def test_rank_numbering_folds_dp_into_world() -> None:
    assert [n for _, _, n in expected_files(Pool(tensor_parallel=4))] == [
        f"autotune_configs_dp0_rank{r}.json" for r in range(4)]
    decode = expected_files(Pool(tensor_parallel=2, data_parallel=8))
    assert decode[6] == (3, 6, "autotune_configs_dp3_rank6.json")
    assert decode[7] == (3, 7, "autotune_configs_dp3_rank7.json")


def test_tuning_groups_are_tp_groups_per_pp_stage() -> None:
    assert tuning_groups(Pool(tensor_parallel=2, data_parallel=2)) == [[0, 1, 2, 3]]
    assert tuning_groups(Pool(tensor_parallel=2, pipeline_parallel=2, data_parallel=2)) == [
        [0, 1], [2, 3], [4, 5], [6, 7]]


def test_verify_tuned_worker_pool_ok(tmp_path: Path, tuned_cache: Path) -> None:
    profile = load(tmp_path, "gb300-tuned.yaml")
    assert topology_of(profile).by_role["worker"].tensor_parallel == 4
    assert _verify(inspect_cache(tuned_cache), profile, load_catalog()) == []


def test_verify_disagg_pools_ok(tmp_path: Path, disagg_cache: Path) -> None:
    profile = load(tmp_path, "gb300-disagg-wide-ep.yaml")
    assert list(topology_of(profile).by_role) == ["prefill", "decode"]
    assert _verify(inspect_cache(disagg_cache), profile, load_catalog()) == []


def test_verify_missing_rank_is_named(tmp_path: Path) -> None:
    cache = tmp_path / "flashinfer_autotune_cache"
    write_pool(cache, HASH_P, tp=4)
    write_pool(cache, HASH_D, tp=2, dp=8, skip=("autotune_configs_dp3_rank7.json",))
    profile = load(tmp_path, "gb300-disagg-wide-ep.yaml")
    (m,) = _verify(inspect_cache(cache), profile, load_catalog())
    assert m.field == "ranks" and m.pool == "decode"
    assert m.message.startswith("pool decode: missing autotune_configs_dp3_rank7.json (dp 3, rank 7 of TP2 x DP8)")
    assert m.file == f"{FI}/{ARCH}/{HASH_D}/autotune_configs_dp3_rank7.json"


def test_verify_pool_without_directory(tmp_path: Path, tuned_cache: Path) -> None:
    """A TP4-only cache has no directory for decode's TP2 x DP8 (and must not count for it)."""
    profile = load(tmp_path, "gb300-disagg-wide-ep.yaml")
    (m,) = _verify(inspect_cache(tuned_cache), profile, load_catalog())
    assert m.pool == "decode" and "no config directory for TP2 x DP8 (needs 16 files" in m.message


@pytest.mark.parametrize("pool, expected", [
    pytest.param(dict(fi="0.7.0.post1", meta={**META, "flashinfer_version": "0.7.0.post1"}), [
        ("flashinfer", "directory is for FlashInfer 0.7.0.post1, the profile pins 0.7.2.post1..."),
        ("metadata", "_metadata.flashinfer_version is '0.7.0.post1', the stack has '0.7.2.post1': FlashInfer "
         "ignores...(4 files)")], id="wrong-flashinfer-version"),
    pytest.param(dict(arch="100a", meta={**META, "gpu": "NVIDIA B200"}), [
        ("arch", "...'100a' is not 103a (sm_103, the rack's GPU)..."),
        ("metadata", "_metadata.gpu is 'NVIDIA B200', the stack has 'NVIDIA GB300'...")], id="wrong-device-and-arch"),
    # FlashInfer's rule: an arch list of several GPUs is not this rack's one GPU model.
    pytest.param(dict(arch="100a_103a"), [("arch", "...'100a_103a' is not 103a...")], id="arch-list-of-two"),
    pytest.param(dict(meta={**META, "cudnn_version": "unknown"}), [
        ("metadata", "_metadata.cudnn_version is 'unknown', the runtime image has '91500': FlashInfer ignores...")],
        id="indeterminate-metadata"),
    pytest.param(dict(meta={k: v for k, v in META.items() if k != "cutlass_dsl_version"}), [
        ("metadata", "_metadata.cutlass_dsl_version is missing, the runtime image has '4.3.2'...")],
        id="field-missing"),
    pytest.param(dict(meta=None), [("metadata", "...no _metadata block...")], id="missing-metadata"),
    pytest.param(dict(meta={**META, "gpu": "*"}), [], id="wildcard-metadata-accepted"),
])
def test_verify_worker_pool_tuned_elsewhere(tmp_path: Path, pool: dict[str, object],
                                           expected: list[tuple[str, str]]) -> None:
    """gb300-tuned's TP4 worker pool, its files written with `pool` (write_pool's keywords): one finding per
    (field, message template) of `expected`, in order."""
    cache = tmp_path / "c"
    write_pool(cache, HASH_W, tp=4, **pool)  # type: ignore[arg-type]
    found = _verify(inspect_cache(cache), load(tmp_path, "gb300-tuned.yaml"), load_catalog())
    assert fields(found) == [field for field, _ in expected]
    for m, (_, template) in zip(found, expected, strict=True):
        assert matches(template, m.message), m.message


def test_verify_conflicting_metadata(tmp_path: Path, tuned_cache: Path) -> None:
    odd = tuned_cache / "flashinfer_autotune_cache" / FI / ARCH / HASH_W / "autotune_configs_dp0_rank2.json"
    write_file(odd, meta={**META, "cudnn_version": "91400"}, rank=2)
    found = _verify(inspect_cache(tuned_cache), load(tmp_path, "gb300-tuned.yaml"), load_catalog())
    conflict = [m for m in found if m.field == "metadata" and "conflicts with" in m.message]
    assert len(conflict) == 1 and conflict[0].file and conflict[0].file.endswith("dp0_rank2.json")
    # ... and against the runtime it is the one file FlashInfer would ignore.
    [other] = [m for m in found if m.field == "metadata" and m not in conflict]
    assert "cudnn_version is '91400', the runtime image has '91500'" in other.message
    assert "cudnn_version='91400' vs '91500'" in conflict[0].message
    # vLLM's all-ranks gate compares metadata too, so the worker pool's group fails as well.
    assert any(m.field == "ranks" and "rank 2" in m.message for m in found)


def test_verify_entry_counts_must_match_across_the_group(tmp_path: Path, tuned_cache: Path) -> None:
    odd = tuned_cache / "flashinfer_autotune_cache" / FI / ARCH / HASH_W / "autotune_configs_dp0_rank3.json"
    write_file(odd, n=5, rank=3)
    (m,) = _verify(inspect_cache(tuned_cache), load(tmp_path, "gb300-tuned.yaml"), load_catalog())
    assert m.field == "ranks" and "rank 3 has 5 entries, rank 0 has 6" in m.message


def test_verify_single_gpu_pool_on_vllm_033_uses_flashinfer_v2_store(tmp_path: Path) -> None:
    base = profile_at(tmp_path, "gb300-tuned.yaml")
    one = tmp_path / "one-gpu.yaml"
    one.write_text(f"apiVersion: stackpin.dev/v1\nkind: StackProfile\nextends: {base.name}\nmetadata:\n  name: one\n"
                   "spec:\n  placement:\n    pools:\n      worker:\n        tensorParallel: 1\n")
    cache = tmp_path / "c"
    write_pool(cache, HASH_W, tp=1)
    (m,) = _verify(inspect_cache(cache), load_profile(one).profile, load_catalog())
    assert m.pool == "worker" and "managed v2 store" in m.message


def test_verify_shipped_profile_pins_vllm_031_which_reads_one_shared_file(tmp_path: Path) -> None:
    """vLLM 0.31.0 (the shipped profiles' pin) reads autotune_configs.json only: per-rank files are dead weight."""
    shipped = load_profile(PROFILES / "gb300-tuned.yaml").profile
    assert shipped.spec.versions.vllm == "0.31.0"
    legacy = tmp_path / "legacy"
    write_file(legacy / "0.7.0.post1" / ARCH / HASH_W / "autotune_configs.json",
               meta={**META, "flashinfer_version": "0.7.0.post1"})
    assert _verify(inspect_cache(legacy), shipped, load_catalog()) == []
    per_rank = tmp_path / "per-rank"
    write_pool(per_rank, HASH_W, tp=4, fi="0.7.0.post1", meta={**META, "flashinfer_version": "0.7.0.post1"})
    found = _verify(inspect_cache(per_rank), shipped, load_catalog())
    assert [m.field for m in found] == ["ranks", "ranks"]
    assert "reads only autotune_configs.json" in found[0].message
    assert "pool worker: the stack runs 1 distinct engine configs" in found[1].message


def test_verify_wants_a_config_directory_per_distinct_pool_and_autotune_on(tmp_path: Path) -> None:
    """Prefill and decode run different engine configs, so vLLM tunes them into two directories; a
    colocated stack's single directory does not cover a disaggregated one. And autotune off reads nothing."""
    meta = {**META, "flashinfer_version": "0.7.0.post1"}
    one = tmp_path / "one"
    write_file(one / "0.7.0.post1" / ARCH / HASH_W / "autotune_configs.json", meta=meta)
    disagg = load_profile(PROFILES / "gb300-disagg-wide-ep.yaml").profile
    found = _verify(inspect_cache(one), disagg, load_catalog())
    assert {m.pool for m in found} == {"prefill", "decode"} and all(m.field == "ranks" for m in found)
    write_file(one / "0.7.0.post1" / ARCH / ("e" * 64) / "autotune_configs.json", meta=meta)
    assert _verify(inspect_cache(one), disagg, load_catalog()) == []
    launch = load_profile(PROFILES / "gb300-launch.yaml").profile
    assert [m.field for m in _verify(inspect_cache(one), launch, load_catalog())][0] == "mode"


# --- pack ---------------------------------------------------------------------------------------


def _copy_tree(src: Path, dst: Path, mtime: float, mode: int) -> None:
    for path in sorted(src.rglob("*")):
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True)
        else:
            target.write_bytes(path.read_bytes())
            os.chmod(target, mode)
            os.utime(target, (mtime, mtime))


def _two_copies(cache: Path, tmp_path: Path) -> tuple[Path, Path]:
    """Copies of `cache` under a/ and b/, made at different times with other modes."""
    a, b = tmp_path / "a" / "flashinfer_autotune_cache", tmp_path / "b" / "flashinfer_autotune_cache"
    _copy_tree(cache, a, mtime=1_000_000, mode=0o600)
    time.sleep(0.01)
    _copy_tree(cache, b, mtime=time.time(), mode=0o664)
    return a, b


def test_pack_is_deterministic_across_copies(tmp_path: Path, disagg_cache: Path) -> None:
    a, b = _two_copies(disagg_cache, tmp_path)
    first = pack_cache(a)
    assert first == pack_cache(b) == pack_cache(tmp_path / "a")
    assert first[:2] == b"\x1f\x8b" and first[4:8] == b"\0\0\0\0"  # gzip, header mtime 0
    raw = gzip.decompress(first)
    assert raw == pack_cache(a, compress=False)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == sorted(m.name for m in members)
        assert members[0].name == "flashinfer_autotune_cache" and len(members) == 1 + 1 + 1 + 2 + 20
        for m in members:
            assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", "")
            assert m.mode == (0o755 if m.isdir() else 0o644) and not m.pax_headers
    assert b"PaxHeader" not in raw and b"mtime=" not in raw


def test_pack_changes_with_content(tuned_cache: Path) -> None:
    before = pack_cache(tuned_cache)
    write_file(tuned_cache / "flashinfer_autotune_cache" / FI / ARCH / HASH_W / "autotune_configs_dp0_rank0.json", n=7)
    assert pack_cache(tuned_cache) != before


def test_unpack_round_trip(tmp_path: Path, disagg_cache: Path) -> None:
    unpack_cache(pack_cache(disagg_cache), tmp_path / "out")
    got = inspect_cache(tmp_path / "out")
    assert [f.sha256 for f in got.files] == [f.sha256 for f in inspect_cache(disagg_cache).files]
    with pytest.raises(StackpinError, match="not empty"):
        unpack_cache(pack_cache(disagg_cache), tmp_path / "out")


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(
    ("member", "expect"),
    [
        (_member("/etc/flashinfer_autotune_cache/x.json"), "unsafe entry name"),
        (_member("flashinfer_autotune_cache/../../evil.json"), "unsafe entry name"),
        (_member("other/x.json"), "outside flashinfer_autotune_cache/"),
        (_member("flashinfer_autotune_cache/link", tarfile.SYMTYPE, "/etc/passwd"), "link or special file"),
        (_member("flashinfer_autotune_cache/hard", tarfile.LNKTYPE, "x"), "link or special file"),
        (_member("flashinfer_autotune_cache/dev", tarfile.CHRTYPE), "link or special file"),
    ],
)
def test_unpack_rejects_unsafe_members(tmp_path: Path, member: tarfile.TarInfo, expect: str) -> None:
    blob = gzip.compress(_tar((_member("flashinfer_autotune_cache/ok.json"), b"{}"), (member, b"")))
    with pytest.raises(IntegrityError, match=expect):
        unpack_cache(blob, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_unpack_rejects_file_dir_clash(tmp_path: Path) -> None:
    blob = _tar((_member("flashinfer_autotune_cache/a"), b"{}"), (_member("flashinfer_autotune_cache/a/b"), b"{}"))
    with pytest.raises(IntegrityError, match="cannot unpack"):
        unpack_cache(blob, tmp_path / "out")


def test_unpack_rejects_garbage(tmp_path: Path) -> None:
    with pytest.raises(IntegrityError, match="not a gzip stream"):
        unpack_cache(b"\x1f\x8b garbage", tmp_path / "out")
    with pytest.raises(IntegrityError, match="not a tar archive"):
        unpack_cache(gzip.compress(b"x" * 600), tmp_path / "out")


# --- push / fetch ----------------------------------------------------------------------------------


def test_push_fetch_inspect_by_ref(tmp_path: Path, client: RegistryClient, registry: RunningRegistry,
                                   disagg_cache: Path) -> None:
    ref = f"{registry.host}/dynamo/autotune-cache:dsv41-disagg"
    pushed = push_cache(disagg_cache, ref, client)
    again = push_cache(disagg_cache, ref, client)
    assert pushed.digest == again.digest  # same cache, same digest: the pin is reproducible
    resolved = client.resolve(ref)
    assert resolved.digest == pushed.digest
    ann = resolved.annotations
    assert ann["dev.stackpin.autotune.flashinfer"] == FI
    assert ann["dev.stackpin.autotune.device"] == "NVIDIA GB300"
    assert ann["dev.stackpin.autotune.arch"] == ARCH
    assert ann["dev.stackpin.autotune.ranks"].endswith("dp0-7 rank0-15 (16 files)")
    assert ann["org.opencontainers.image.title"] == "flashinfer-autotune-cache.tar.gz"
    # A mountable image: an index over one image per CPU platform, all sharing the one standard layer.
    assert resolved.media_type == OCI_INDEX and ann[TYPE_ANNOTATION] == ARTIFACT_TYPE
    assert sorted(resolved.platforms) == ["linux/amd64", "linux/arm64"]
    diff_id = sha256_digest(pack_cache(disagg_cache, compress=False))
    for key, child in resolved.platforms.items():
        manifest, blobs = client.pull_artifact(f"{registry.host}/dynamo/autotune-cache@{child}")
        assert "artifactType" not in manifest and manifest["mediaType"] == OCI_MANIFEST
        assert [d["mediaType"] for d in manifest["layers"]] == [LAYER_TAR_GZIP]
        assert manifest["layers"][0]["annotations"] == {"org.opencontainers.image.title": TITLE}
        assert blobs == [pack_cache(disagg_cache)]
        assert manifest["config"]["mediaType"] == OCI_CONFIG
        config = json.loads(client.pull_blob(ref, manifest["config"]["digest"]))
        assert config == {"architecture": key.split("/")[1], "os": "linux", "config": {},
                          "rootfs": {"type": "layers", "diff_ids": [diff_id]}}

    fetched = fetch_cache(f"{registry.host}/dynamo/autotune-cache@{pushed.digest}", tmp_path / "got", client=client)
    assert fetched.digest == pushed.digest
    assert [f.sha256 for f in fetched.info.files] == [f.sha256 for f in inspect_cache(disagg_cache).files]
    profile = load(tmp_path, "gb300-disagg-wide-ep.yaml")
    assert _verify(fetched.info, profile, load_catalog()) == []


def test_tampered_blob_is_refused(tmp_path: Path, client: RegistryClient, registry: RunningRegistry,
                                  tuned_cache: Path) -> None:
    ref = f"{registry.host}/dynamo/autotune-tampered:1"
    # Content of its own: the registry shares blobs by digest, other tests must not see this one tampered.
    write_file(tuned_cache / "flashinfer_autotune_cache" / FI / ARCH / HASH_W / "autotune_configs_dp0_rank0.json", n=11)
    push_cache(tuned_cache, ref, client)
    blob = bytearray(pack_cache(tuned_cache))
    blob[len(blob) // 2] ^= 0xFF
    registry.blob_path(sha256_digest(pack_cache(tuned_cache))).write_bytes(bytes(blob))
    with pytest.raises(IntegrityError):
        fetch_cache(ref, tmp_path / "got", client=client)
    assert not (tmp_path / "got").exists()


def test_fetch_refuses_other_artifacts(tmp_path: Path, client: RegistryClient, registry: RunningRegistry) -> None:
    ref = f"{registry.host}/dynamo/not-a-cache:1"
    client.push_artifact(ref, [(b"hello", "text/plain", None)], "application/vnd.example.thing")
    with pytest.raises(StackpinError, match="is not an autotune cache"):
        fetch_cache(ref, tmp_path / "got", client=client)


def test_layout_write_and_fetch(tmp_path: Path, tuned_cache: Path) -> None:
    ref = "nvcr.io/nvidia/ai-dynamo/autotune-cache:dsv41-flash-gb300"
    written = write_cache_to_layout(tuned_cache, tmp_path / "layout", ref)
    assert written.digest == write_cache_to_layout(tuned_cache, tmp_path / "layout2", ref).digest
    fetched = fetch_cache(ref, tmp_path / "got", layout=tmp_path / "layout")
    assert fetched.digest == written.digest and len(fetched.info.files) == 4
    blob = tmp_path / "layout" / "blobs" / "sha256" / sha256_digest(pack_cache(tuned_cache)).removeprefix("sha256:")
    blob.write_bytes(b"tampered")
    with pytest.raises(IntegrityError):
        fetch_cache(ref, tmp_path / "got2", layout=tmp_path / "layout")


def test_same_cache_same_digests_in_registry_and_layout(tmp_path: Path, client: RegistryClient,
                                                       registry: RunningRegistry, disagg_cache: Path) -> None:
    """Two copies of one cache, made at different times with other modes: one index digest, whether
    pushed to a registry or written to an OCI layout."""
    a, b = _two_copies(disagg_cache, tmp_path)
    ref = "nvcr.io/nvidia/ai-dynamo/autotune-cache:same"
    in_layout = [write_cache_to_layout(src, tmp_path / f"layout-{i}", ref) for i, src in enumerate((a, b))]
    pushed = [push_cache(src, f"{registry.host}/dynamo/autotune-same:{i}", client) for i, src in enumerate((a, b))]
    assert len({r.digest for r in in_layout + pushed}) == 1
    assert in_layout[0].platforms == pushed[0].platforms == cache_image(inspect_cache(a)).platforms
    assert in_layout[0].annotations == pushed[0].annotations  # what `stackpin lock` reads
    index = parse_manifest(LayoutResolver(tmp_path / "layout-0").read_blob(in_layout[0].digest), "index")
    assert [m["platform"] for m in index["manifests"]] == [{"os": o, "architecture": c} for o, c in IMAGE_PLATFORMS]
    assert "artifactType" not in index and index["annotations"][TYPE_ANNOTATION] == ARTIFACT_TYPE
    for key in ("flashinfer", "device", "arch", "ranks"):
        assert index["annotations"][f"dev.stackpin.autotune.{key}"]


def _layout_image(path: Path, ref: str, layers: dict[str, bytes], diff_ids: dict[str, str] | None = None) -> None:
    """An index over per-platform images whose layer (and config diff_ids) the test chooses."""
    writer = LayoutWriter(path)
    entries = []
    for plat, layer in layers.items():
        os_name, arch = plat.split("/")
        diff_id = (diff_ids or {}).get(plat) or sha256_digest(gzip.decompress(layer))
        config = writer.add_blob(canonical_json({"architecture": arch, "os": os_name, "config": {},
                                                 "rootfs": {"type": "layers", "diff_ids": [diff_id]}}), OCI_CONFIG)
        manifest = canonical_json({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config,
                                   "layers": [writer.add_blob(layer, LAYER_TAR_GZIP)]})
        entries.append({**writer.add_blob(manifest, OCI_MANIFEST), "platform": {"os": os_name, "architecture": arch}})
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries,
             "annotations": {TYPE_ANNOTATION: ARTIFACT_TYPE}}
    writer._tag(writer._tagged(ref), canonical_json(index), OCI_INDEX)


def test_fetch_checks_every_platform_image(tmp_path: Path, tuned_cache: Path, disagg_cache: Path) -> None:
    ref = "nvcr.io/nvidia/ai-dynamo/autotune-cache:x"
    tuned, disagg = pack_cache(tuned_cache), pack_cache(disagg_cache)
    _layout_image(tmp_path / "ok", ref, {"linux/arm64": tuned, "linux/amd64": tuned})
    assert len(fetch_cache(ref, tmp_path / "got", layout=tmp_path / "ok").info.files) == 4
    _layout_image(tmp_path / "split", ref, {"linux/arm64": tuned, "linux/amd64": disagg})
    with pytest.raises(StackpinError, match="another layer than the other platforms"):
        fetch_cache(ref, tmp_path / "got-split", layout=tmp_path / "split")
    _layout_image(tmp_path / "diff", ref, {"linux/arm64": tuned}, {"linux/arm64": sha256_digest(b"other")})
    with pytest.raises(IntegrityError, match="diff_ids"):
        fetch_cache(ref, tmp_path / "got-diff", layout=tmp_path / "diff")
    assert not (tmp_path / "got-split").exists() and not (tmp_path / "got-diff").exists()


@pytest.mark.parametrize(("member", "expect"), [
    (_member("flashinfer_autotune_cache/../../evil.json"), "unsafe entry name"),
    (_member("flashinfer_autotune_cache/link", tarfile.SYMTYPE, "/etc/passwd"), "link or special file"),
    (_member("etc/passwd"), "outside flashinfer_autotune_cache/"),
])
def test_fetch_image_refuses_unsafe_members(tmp_path: Path, member: tarfile.TarInfo, expect: str) -> None:
    ref = "nvcr.io/nvidia/ai-dynamo/autotune-cache:evil"
    layer = gzip.compress(_tar((_member("flashinfer_autotune_cache/ok.json"), b"{}"), (member, b"")))
    _layout_image(tmp_path / "layout", ref, {"linux/arm64": layer, "linux/amd64": layer})
    with pytest.raises(IntegrityError, match=expect):
        fetch_cache(ref, tmp_path / "got", layout=tmp_path / "layout")
    assert not (tmp_path / "got").exists()


def test_fetch_refuses_images_that_are_not_caches(tmp_path: Path) -> None:
    ref = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1"
    LayoutWriter(tmp_path / "layout").add_image(ref, [("linux", "arm64"), ("linux", "amd64")])
    with pytest.raises(StackpinError, match="is not an autotune cache"):
        fetch_cache(ref, tmp_path / "got", layout=tmp_path / "layout")


def test_earlier_artifact_form_is_read_but_not_mountable(tmp_path: Path, tuned_cache: Path) -> None:
    ref = "nvcr.io/nvidia/ai-dynamo/autotune-cache:old"
    LayoutWriter(tmp_path / "layout").add_artifact(
        ref, [(pack_cache(tuned_cache), LEGACY_LAYER_TAR_GZIP, {"org.opencontainers.image.title": TITLE})],
        ARTIFACT_TYPE, {"dev.stackpin.autotune.flashinfer": FI})
    fetched = fetch_cache(ref, tmp_path / "got", layout=tmp_path / "layout")
    assert not fetched.mountable and len(fetched.info.files) == 4
    code, out, _ = cli("verify", ref, str(profile_at(tmp_path, "gb300-tuned.yaml")), "--oci-layout",
                       str(tmp_path / "layout"))
    assert code == 1 and out.startswith("mismatch: format: ") and "image volume cannot mount it" in out
    code, out, err = cli("inspect", ref, "--oci-layout", str(tmp_path / "layout"), "-o", "json")
    assert code == 0 and json.loads(out)["mountable"] is False and "warning:" in err


# --- CLI ----------------------------------------------------------------------------------------


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["autotune", *args])
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def test_cli_inspect_dir(tuned_cache: Path) -> None:
    code, out, _ = cli("inspect", str(tuned_cache))
    assert code == 0 and "flashinfer: 0.7.2.post1  arch: 103a  device: NVIDIA GB300" in out
    assert "autotune_configs_dp0_rank3.json  dp0 rank3  6 entries" in out
    code, out, _ = cli("inspect", str(tuned_cache), "-o", "json")
    data = json.loads(out)
    assert code == 0 and data["flashinfer"] == [FI] and len(data["files"]) == 4 and data["digest"] is None


def test_cli_verify_exit_codes(tmp_path: Path, tuned_cache: Path) -> None:
    good = profile_at(tmp_path, "gb300-tuned.yaml")
    runtime = tmp_path / "runtime-metadata-worker.json"
    runtime.write_text(json.dumps(META))
    code, out, _ = cli("verify", str(tuned_cache), str(good), "--runtime-metadata", str(runtime))
    assert code == 0 and out == "ok: 4 files fit test-gb300-tuned (pools: worker)\n"
    # Without the runtime's metadata, the five library versions are listed as unchecked, not passed over.
    code, out, _ = cli("verify", str(tuned_cache), str(good))
    unchecked = [line for line in out.splitlines() if line.startswith("unchecked: runtime: _metadata.")]
    assert code == 0 and len(unchecked) == 5 and out.startswith("ok: 4 files fit test-gb300-tuned (pools: worker)\n")
    runtime.write_text(json.dumps({**META, "cuda_version": "12.9"}))
    code, out, _ = cli("verify", str(tuned_cache), str(good), "--runtime-metadata", str(runtime))
    assert code == 1 and "_metadata.cuda_version is '13.0', the runtime image has '12.9'" in out
    for bad_runtime, says in (("[]", "not a JSON object"), ('{"gpu": 1}', "flashinfer_version: missing")):
        runtime.write_text(bad_runtime)
        code, out, err = cli("verify", str(tuned_cache), str(good), "--runtime-metadata", str(runtime))
        assert code == 2 and out == "" and err.count("\n") == 1 and says in err and str(runtime) in err
    runtime.write_text(json.dumps(META))

    disagg = profile_at(tmp_path, "gb300-disagg-wide-ep.yaml")
    code, out, err = cli("verify", str(tuned_cache), str(disagg), "--runtime-metadata", str(runtime))
    assert code == 1 and out.splitlines() == [
        "mismatch: ranks: pool decode: no config directory for TP2 x DP8 (needs 16 files, "
        "autotune_configs_dp0_rank0.json .. autotune_configs_dp7_rank15.json)"]
    code, out, _ = cli("verify", str(tuned_cache), str(disagg), "-o", "json")
    assert code == 1 and json.loads(out)["mismatches"][0]["pool"] == "decode"

    bad = tuned_cache / "flashinfer_autotune_cache" / FI / ARCH / HASH_W / "autotune_configs_dp0_rank1.json"
    bad.write_text("{")
    code, out, err = cli("verify", str(tuned_cache), str(good))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: {bad}: not valid JSON")
    code, _, err = cli("verify", str(tuned_cache), str(tmp_path / "missing.yaml"))
    assert code == 2 and "no such file" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("inspect", str(tmp_path / "no-such-dir"))
    assert code == 2 and "no such directory" in err


def test_cli_pack_layout_and_file(tmp_path: Path, tuned_cache: Path) -> None:
    ref = "nvcr.io/nvidia/ai-dynamo/autotune-cache:dsv41-flash-gb300"
    code, out, _ = cli("pack", str(tuned_cache), "--oci-layout", str(tmp_path / "layout"), "--tag", ref,
                       "--out", str(tmp_path / "cache.tar.gz"))
    assert code == 0 and (tmp_path / "layout" / "index.json").is_file()
    assert (tmp_path / "cache.tar.gz").read_bytes() == pack_cache(tuned_cache)
    pin = next(line for line in out.splitlines() if line.startswith("pin: "))
    assert pin.startswith("pin: nvcr.io/nvidia/ai-dynamo/autotune-cache@sha256:")
    code, out, _ = cli("verify", ref, str(profile_at(tmp_path, "gb300-tuned.yaml")), "--oci-layout",
                       str(tmp_path / "layout"))
    assert code == 0 and out.startswith("ok: 4 files")
    code, _, err = cli("pack", str(tuned_cache), "--oci-layout", str(tmp_path / "layout"))
    assert code == 2 and "--oci-layout and --tag go together" in err
    code, _, err = cli("pack", str(tuned_cache))
    assert code == 2 and "nothing to do" in err


def test_cli_push_then_inspect_ref(tmp_path: Path, registry: RunningRegistry, tuned_cache: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))  # never the developer's credentials
    ref = f"{registry.host}/dynamo/autotune-cli:1"
    code, out, _ = cli("pack", str(tuned_cache), "--push", ref)
    assert code == 0 and f"pin: {registry.host}/dynamo/autotune-cli@sha256:" in out
    code, out, _ = cli("inspect", ref, "-o", "json")
    data = json.loads(out)
    assert code == 0 and data["digest"].startswith("sha256:") and data["ranks"].endswith("(4 files)")
    code, out, _ = cli("verify", ref, str(profile_at(tmp_path, "gb300-tuned.yaml")))
    assert code == 0
    code, _, err = cli("inspect", f"{registry.host}/dynamo/absent:1")
    assert code == 2 and "not found" in err and len(err.strip().splitlines()) == 1


def test_info_is_frozen(tuned_cache: Path) -> None:
    info = inspect_cache(tuned_cache)
    assert isinstance(info, CacheInfo)
    with pytest.raises(ValidationError):
        info.root = "x"  # type: ignore[misc]


@pytest.mark.parametrize("records", [[], None, "x"], ids=["list", "null", "string"])
def test_records_that_flashinfer_raises_on_are_refused(tuned_cache: Path, records: object) -> None:
    """FlashInfer 0.7.0.post1's load_configs raises ValueError on `_records` that is not a JSON object, and
    vLLM's warm-up does not catch it: every worker would crash. inspect (and so verify and pack) refuse it."""
    path = tuned_cache / "flashinfer_autotune_cache" / FI / ARCH / HASH_W / "autotune_configs_dp0_rank0.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "_records": records}))
    with pytest.raises(InputError, match="_records is not a JSON object; FlashInfer's load_configs raises on it"):
        inspect_cache(tuned_cache)
