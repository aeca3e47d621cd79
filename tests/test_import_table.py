"""vLLM's import reads the same tables render writes through (stackpin.backends.vllm: MODELLED, MODELLED_DYNAMO,
MODELLED_JSON, MODELLED_OFF, MODELLED_ALIASES, the env names): every option there is consumed, a flag added to
the table is imported without an edit in stackpin.imports, and every shipped lock's render imports back to the
same worker argv with nothing of it left in engineArgs."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from stackpin.backends import engine
from stackpin.backends.vllm import Vllm
from stackpin.imports.dgd import dgd_from_object, dgds_in
from stackpin.imports.profile import Note, _pool, import_dgd, reading
from stackpin.imports.roundtrip import round_trip
from stackpin.lock.lockfile import read_lock
from stackpin.profile.engine_args import POOL
from stackpin.render.build import build_objects
from tests.lockkit import ROOT

LOCKS = sorted((ROOT / "lockfiles").glob("*.lock.yaml"))
AGG = ROOT / "tests" / "data" / "upstream" / "examples_backends_vllm_deploy_v1beta1_agg.yaml"


def _with_args(extra: list[str]) -> Any:
    """Dynamo's vLLM agg example with `extra` appended to its worker's argv."""
    docs = [d for d in yaml.safe_load_all(AGG.read_text()) if d]
    dgd = copy.deepcopy(next(d for d in docs if d["kind"] == "DynamoGraphDeployment"))
    worker = next(c for c in dgd["spec"]["components"] if c["name"] == "VllmDecodeWorker")
    worker["podTemplate"]["spec"]["containers"][0]["args"] += extra
    return dgd_from_object(dgd, str(AGG))


def test_every_option_render_writes_is_consumed_by_the_import() -> None:
    eng = engine("vllm")
    read = reading(eng)
    written = set(eng.modelled) | set(eng.modelled_dynamo) | {s for s, _ in eng.modelled_off.values()} \
        | set(eng.modelled_aliases)
    assert written <= read.consumed
    # each stack field is read from its option, each pool field into the pool, each JSON key into its field
    assert {f"{POOL}.{f}" for f in read.pool.values()} | set(read.stack.values()) <= set(eng.modelled.values())
    assert set(read.json) == set(eng.modelled_json) and set(read.json) <= set(read.stack)
    assert {eng.ready_timeout_env, eng.autotune_dir_env} <= read.derived_env


def test_a_flag_added_to_the_backends_table_is_imported_without_an_edit_here() -> None:
    class Extended(Vllm):
        modelled: Mapping[str, str] = {**Vllm.modelled, "--new-knob": f"{POOL}.newKnob"}

    read = reading(Extended())
    [dgd] = [_with_args(["--new-knob", "7"])]
    comp = next(c for c in dgd.components if c.name == "VllmDecodeWorker")
    notes: list[Note] = []
    pool = _pool(comp, {"--model": "m", "--new-knob": "7"}, read, None, None, notes, "worker")
    assert pool["newKnob"] == 7 and "engineArgs" not in pool
    # without the table entry, the same flag is passed through
    plain = _pool(comp, {"--model": "m", "--new-knob": "7"}, reading(Vllm()), None, None, notes, "worker")
    assert plain["engineArgs"] == {"--new-knob": 7} and "newKnob" not in plain


def test_cpu_offload_is_read_back_into_its_field() -> None:
    # render writes --cpu-offload-gb from spec.fallbacks.cpuOffloadGib; the import reads it back from the same table
    imported = import_dgd(_with_args(["--cpu-offload-gb", "8", "--no-enable-flashinfer-autotune"]), platform="h200")
    spec = imported.profile["spec"]
    assert spec["fallbacks"] == {"cpuOffloadGib": 8} and spec["autotune"] == {"mode": "off"}
    assert "engineArgs" not in spec["placement"]["pools"]["worker"]


def test_a_json_option_reads_back_key_by_key() -> None:
    spec_config = '{"method":"mtp","num_speculative_tokens":2,"revision":"abc","prompt_lookup_max":4}'
    imported = import_dgd(_with_args(["--speculative-config", spec_config, "--max-cudagraph-capture-size", "64"]),
                          platform="h200")
    spec = imported.profile["spec"]
    assert spec["speculative"] == {"method": "mtp", "numSpeculativeTokens": 2}  # revision: the lock pins it
    assert spec["cudaGraphs"] == {"maxCaptureSize": 64}
    assert any(n.item == "--speculative-config.prompt_lookup_max" for n in imported.notes)


@pytest.mark.parametrize("path", LOCKS, ids=lambda p: p.name)
def test_each_shipped_locks_render_imports_back_to_the_same_argv(path: Path) -> None:
    lock = read_lock(path)
    [dgd] = dgds_in([(obj, "render") for obj in build_objects(lock)])
    imported = import_dgd(dgd)
    read = reading(engine(imported.profile["spec"].get("engine", "vllm")))
    for role, pool in imported.profile["spec"]["placement"]["pools"].items():
        passed = set(pool.get("engineArgs", {})) | set(pool.get("dynamoArgs", {}))
        assert not passed & read.consumed, (role, sorted(passed & read.consumed))
    flags = [(i.component, i.item, i.upstream, i.rendered) for i in round_trip(dgd, imported).differences
             if i.item.startswith("flag ")]
    assert not flags, flags
