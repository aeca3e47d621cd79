"""The import round trip over all 21 upstream vLLM DGDs (issue 36): each imports, locks and renders, and every
item that differs between the upstream DGD and the render of its imported profile is in `--report` with a
reason and on stderr. The differences are found by a reader written here, independently of stackpin's
(stackpin.imports.dgd / compare): the raw YAML, `sh -c` scripts split with shlex after the container's env
and the script's exports are expanded, argv flag by flag with JSON objects key by key."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from stackpin.cli.main import main as cli_main
from stackpin.imports.profile import import_dgd
from stackpin.imports.roundtrip import round_trip
from stackpin.imports.source import read_dgds
from stackpin.profile.loader import load_profile
from stackpin.render.build import build_objects
from stackpin.yamlio import dump_yaml
from tests.lockkit import ROOT, lock_loaded

UPSTREAM = ROOT / "tests" / "data" / "upstream"
DGDS = sorted(p for p in UPSTREAM.glob("*.yaml") if "kind: DynamoGraphDeployment" in p.read_text())
PLATFORM = {"recipes_deepseek-v4_deepseek-v4-pro_vllm_disagg_gb200_deploy": "gb200-nvl72"}


def _platform(path: Path) -> str | None:
    return PLATFORM.get(path.stem, None if path.stem.startswith("recipes") else "h200")


# --- the independent reader ----------------------------------------------------------------------------

def _words(command: list[str], env: Mapping[str, str]) -> list[str]:
    if command and command[0].rsplit("/", 1)[-1] in ("sh", "bash") and len(command) > 2 and "c" in command[1]:
        script = command[2].replace("\\\n", " ")
        values = dict(env)
        for name, value in re.findall(r"export\s+([A-Za-z_]\w*)=(\S+)", script):
            values[name] = value.strip("\"'")
        lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        # Split first, expand after (each variable is quoted where it is used, so it stays one word).
        tokens = [re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2), m.group(0)), t)
                  for t in lexer]
        start = next(i for i, t in enumerate(tokens) if re.fullmatch(r"python3?(\.\d+)?", t.rsplit("/", 1)[-1])
                     and tokens[i + 1:i + 2] == ["-m"] and tokens[i + 2].startswith("dynamo."))
        end = next((i for i in range(start, len(tokens)) if set(tokens[i]) <= set("();<>|&")), len(tokens))
        if end < len(tokens) and tokens[end - 1].isdigit() and tokens[end].startswith(">"):
            end -= 1  # `2>&1`: the 2 is a file descriptor
        return tokens[start:end]
    return command


def _flags(words: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            continue
        if "=" in word:
            name, value = word.split("=", 1)
        elif i < len(words) and not words[i].startswith("--"):
            name, value = word, words[i]
            i += 1
        else:
            name, value = word, "switch"
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed:
            out.pop(name, None)
            out.update({f"flag {name}.{k}": json.dumps(v, sort_keys=True) for k, v in parsed.items()})
        else:
            out[f"flag {name}"] = value
    return out


def _env_value(item: Mapping[str, Any], config_maps: Mapping[str, Mapping[str, str]]) -> str:
    if "valueFrom" not in item:
        return str(item.get("value", ""))
    ref = item["valueFrom"].get("configMapKeyRef")
    return config_maps.get(ref["name"], {}).get(ref["key"], "(ref)") if ref else "(ref)"


def _items(raw: Mapping[str, Any], v1alpha1: bool,
           config_maps: Mapping[str, Mapping[str, str]]) -> tuple[str, dict[str, str]]:
    """(role hint, items) of one component as Kubernetes would run it."""
    if v1alpha1:
        pod = raw.get("extraPodSpec") or {}
        main = pod.get("mainContainer") or {}
        env_list = [*(raw.get("envs") or []), *(main.get("env") or [])]
        res = raw.get("resources") or {}
        resources = {kind: {({"gpu": "nvidia.com/gpu"}.get(k, k)): str(v) for k, v in (res.get(kind) or {}).items()
                            if k not in ("custom", "gpuType")} | {k: str(v) for k, v in
                                                                 ((res.get(kind) or {}).get("custom") or {}).items()}
                     for kind in ("requests", "limits")}
        shm = (raw.get("sharedMemory") or {}).get("size")
        env_from = [f"secret {raw['envFromSecret']}"] if raw.get("envFromSecret") else []
        mounts = {m["mountPoint"]: "pvc" for m in raw.get("volumeMounts") or []}
        hint = raw.get("subComponentType") or raw.get("componentType") or "worker"
    else:
        pod = (raw.get("podTemplate") or {}).get("spec") or {}
        main = next((c for c in pod.get("containers") or [] if c.get("name") == "main"), {})
        env_list = main.get("env") or []
        res = main.get("resources") or {}
        resources = {kind: {k: str(v) for k, v in (res.get(kind) or {}).items()} for kind in ("requests", "limits")}
        shm = raw.get("sharedMemorySize")
        env_from = []
        mounts = {}
        hint = raw.get("type") or "worker"
    for ref in main.get("envFrom") or []:
        env_from += [f"{label} {ref[key]['name']}" for key, label in (("secretRef", "secret"),
                                                                      ("configMapRef", "configMap")) if key in ref]
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for m in main.get("volumeMounts") or []:
        vol = volumes.get(m["name"], {})
        if m["mountPath"] == "/dev/shm":
            shm = shm or (vol.get("emptyDir") or {}).get("sizeLimit")
        else:
            mounts[m["mountPath"]] = json.dumps(vol, sort_keys=True)
    env = {e["name"]: _env_value(e, config_maps) for e in env_list}
    plain = {k: v for k, v in env.items() if v != "(ref)"}
    out = {"replicas": str(raw.get("replicas", 1)), "nodes": str((raw.get("multinode") or {}).get("nodeCount", 1))}
    command = [*(main.get("command") or []), *(main.get("args") or [])]
    out.update(_flags(_words(command, plain)))
    out.update({f"env {k}": v for k, v in env.items()})
    out.update({f"envFrom {r}": "set" for r in env_from})
    for kind, values in resources.items():
        out.update({f"resources.{kind}.{k}": v for k, v in values.items()})
    if shm:
        out["sharedMemory"] = str(shm)
    out.update({f"volume {path}": v for path, v in mounts.items()})
    return str(hint), out


def _by_role(doc: Mapping[str, Any], config_maps: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    v1alpha1 = doc["apiVersion"].endswith("v1alpha1")
    spec = doc["spec"]
    raws = list(spec["services"].values()) if v1alpha1 else spec["components"]
    read = [_items(raw, v1alpha1, config_maps) for raw in raws]
    workers = [(hint, items) for hint, items in read if any(k.startswith("flag ") for k in items)
               and hint not in ("frontend", "main", "planner")]

    def mode(hint: str, items: dict[str, str]) -> str:
        if "flag --disaggregation-mode" in items:
            return items["flag --disaggregation-mode"]
        if "flag --is-prefill-worker" in items:
            return "prefill"
        return "decode" if "flag --is-decode-worker" in items else hint
    disagg = any(mode(h, i) == "prefill" for h, i in workers)
    out = {"frontend": i for h, i in read if h in ("frontend", "main")}  # noqa: B035 - one frontend per DGD
    for hint, items in workers:
        out["prefill" if disagg and mode(hint, items) == "prefill" else "decode" if disagg else "worker"] = items
    return out


def _render(profile: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    profile = json.loads(json.dumps(profile))
    image = profile["spec"]["versions"]["runtimeImage"]
    if "@" in image:
        profile["spec"]["versions"]["runtimeImage"] = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.1"
    path = tmp_path / "imported.yaml"
    path.write_text(dump_yaml(profile, sort_keys=False))
    [lock] = lock_loaded([load_profile(path)])
    return next(o for o in build_objects(lock) if o["kind"] == "DynamoGraphDeployment")


# Items the report does not compare because a lock pins them (a stand-in lock here): see NOT_COMPARED.
PINNED = {"flag --revision"}
# What spec.placement.podOverrides / sharedMemory carry: never `dropped` now, and equal in the render.
CARRIABLE = ("resources.", "env ", "envFrom ", "volume ", "toleration ", "nodeSelector ", "sharedMemory")
# Env render rewrites into a flag (the router's mode, the migration limit): dropped as env, kept as the flag.
REWRITTEN_ENV = {"env DYN_ROUTER_MODE", "env DYN_MIGRATION_LIMIT"}


@pytest.mark.parametrize("path", DGDS, ids=lambda p: p.stem)
def test_every_difference_is_in_the_report_and_on_stderr(path: Path, tmp_path: Path) -> None:
    [dgd] = read_dgds(path)
    imported = import_dgd(dgd, platform=_platform(path))
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    config_maps = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d.get("kind") == "ConfigMap"}
    original = next(d for d in docs if d.get("kind") == "DynamoGraphDeployment")
    upstream = _by_role(original, config_maps)
    ours = _render(imported.profile, tmp_path)
    rendered = _by_role(ours, {})
    assert set(rendered) <= set(upstream), "the render serves a role upstream does not"
    found = {(role, item) for role in upstream for item in set(upstream[role]) | set(rendered.get(role, {}))
             if upstream[role].get(item) != rendered.get(role, {}).get(item) and item not in PINNED}
    if original["apiVersion"] != ours["apiVersion"]:  # the pinned Dynamo's storage version (catalog/versions.yaml)
        found.add(("dgd", "apiVersion"))
    trip = round_trip(dgd, imported)
    reported = {(i.component, i.item): i for i in trip.differences}
    silent = sorted(found - set(reported))
    assert not silent, f"differences the report does not list: {silent}"
    unexplained = [(i.component, i.item) for i in trip.differences if i.reason is None]
    assert not unexplained, unexplained
    # What the profile can carry is carried: nothing of it dropped, and what is carried the render has as written.
    dropped = [(i.component, i.item) for i in trip.items if i.status == "dropped" and i.item.startswith(CARRIABLE)
               and i.item not in REWRITTEN_ENV]
    assert not dropped, dropped
    carried = {(i.component, i.item) for i in trip.items if i.status == "carried"}
    assert not carried & found, sorted(carried & found)
    result = CliRunner().invoke(cli_main, ["import", str(path), "--out", str(tmp_path / "p.yaml"),
                                           "--report", str(tmp_path / "r.json"),
                                           *(["--platform", p] if (p := _platform(path)) else [])])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    for role, item in sorted(found):
        assert any(line.startswith(f"round trip: {role}: {item}: ") for line in lines), (role, item)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["unexplained"] == 0 and len(data["items"]) == len(trip.items)


def test_all_23_upstream_dgds_are_here() -> None:
    wheel = [p for p in DGDS if p.stem.startswith("ai-dynamo-1.6.1_")]
    assert len(DGDS) == 23 and len(wheel) == 12


def test_a_v1beta1_recipe_pinned_to_1_3_1_renders_v1alpha1_and_says_so(tmp_path: Path) -> None:
    # Dynamo 1.3.1's operator stores v1alpha1 (catalog/versions.yaml dgd_storage: v1beta1 from 1.5.0).
    path = UPSTREAM / "recipes_deepseek-v4_deepseek-v4-flash_vllm_disagg-b200-agentic_deploy.yaml"
    result = CliRunner().invoke(cli_main, ["import", str(path), "--out", str(tmp_path / "p.yaml"), "--report", "-"])
    assert result.exit_code == 0, result.output
    [item] = [i for i in json.loads(result.stdout)["items"] if i["item"] == "apiVersion"]
    assert (item["component"], item["upstream"], item["rendered"], item["status"]) == \
        ("dgd", "nvidia.com/v1beta1", "nvidia.com/v1alpha1", "differs")
    assert "Dynamo 1.3.1" in item["reason"] and "dgd_storage" in item["reason"]
    assert any(line.startswith("round trip: dgd: apiVersion: differs: upstream nvidia.com/v1beta1, rendered "
                               "nvidia.com/v1alpha1: stackpin renders") for line in result.stderr.splitlines())


def test_a_report_that_cannot_be_written_leaves_no_profile(tmp_path: Path) -> None:
    agg = UPSTREAM / "examples_backends_vllm_deploy_v1beta1_agg.yaml"
    out, report = tmp_path / "p.yaml", tmp_path / "missing" / "r.json"
    run = CliRunner().invoke(cli_main, ["import", str(agg), "--platform", "gb300-nvl72", "--out", str(out),
                                        "--report", str(report)])
    assert run.exit_code == 2 and f"{report}: cannot write: {report.parent} is not a directory" in run.output
    assert not out.exists()
