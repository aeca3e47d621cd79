"""The Argo CD health check of a DynamoGraphDeployment (stackpin/rollout/argocd_health.py), run in a real Lua 5.1
(lupa; Argo CD runs gopher-lua, a Lua 5.1) the way Argo CD runs it (util/lua/lua.go at v3.5.1 `runLua`: only the
base, table and package libraries and a safe os opened; `obj` a global holding the object; the chunk's return
value the health), on the script exactly as each shipped argocd-cm file stores it.

The objects are DynamoGraphDeployments in each state the Dynamo operator writes, each valid under the bundled
CRD's openAPIV3Schema (stackpin/validate/crds/, v1beta1: what render writes), and checked so with jsonschema.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from lupa import lua51 as lupa  # Lua 5.1, the language gopher-lua implements

from stackpin.rollout.argocd_health import ARGOCD_CM_FILE, DGD_HEALTH_KEY, DGD_HEALTH_LUA, health_configmap

ROOT = Path(__file__).resolve().parent.parent
CRD = ROOT / "stackpin" / "validate" / "crds" / "nvidia.com_dynamographdeployments.yaml"
SHIPPED = [ROOT / "gitops" / "argocd" / ARGOCD_CM_FILE, ROOT / "gitops" / "fleet" / "argocd" / ARGOCD_CM_FILE]
# What Argo CD's gopher-lua state has (lua.go opens these; SkipOpenLibs drops the rest): everything else goes.
ARGOCD_GLOBALS = {"_G", "_VERSION", "assert", "collectgarbage", "dofile", "error", "getfenv", "getmetatable",
                  "ipairs", "load", "loadfile", "loadstring", "module", "next", "package", "pairs", "pcall", "print",
                  "rawequal", "rawget", "rawset", "require", "select", "setfenv", "setmetatable", "table",
                  "tonumber", "tostring", "type", "unpack", "xpcall", "os"}


@cache
def dgd_schema() -> dict[str, Any]:
    crd = next(d for d in yaml.safe_load_all(CRD.read_text(encoding="utf-8")) if d)
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    return dict(version["schema"]["openAPIV3Schema"])


def dgd(status: dict[str, Any] | None, generation: int = 1) -> dict[str, Any]:
    """A DynamoGraphDeployment as the API server returns it, valid under the CRD's schema."""
    obj: dict[str, Any] = {
        "apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
        "metadata": {"name": "dsv41-flash", "namespace": "dynamo", "generation": generation},
        "spec": {"components": [{"name": "frontend", "type": "frontend", "replicas": 1}]},
    }
    if status is not None:
        obj["status"] = status
    validator = jsonschema.Draft7Validator(dgd_schema(), format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]
    assert errors == [], errors
    return obj


def ready(status: str, reason: str, message: str, generation: int = 1) -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation}


def argocd_lua() -> Any:
    """A Lua 5.1 with Argo CD's libraries only: no string, math, io or debug (so no ("x"):format either)."""
    runtime = lupa.LuaRuntime(register_eval=False, unpack_returned_tuples=True)
    runtime.execute("debug.getmetatable('').__index = nil")  # string methods go with the string library
    g = runtime.globals()
    for name in [n for n in g if n not in ARGOCD_GLOBALS]:
        g[name] = None
    return runtime


def health(script: str, obj: dict[str, Any]) -> dict[str, str]:
    runtime = argocd_lua()
    runtime.globals()["obj"] = runtime.table_from(copy.deepcopy(obj), recursive=True)
    result = runtime.execute(script)
    assert lupa.lua_type(result) == "table", result
    out = {str(k): v for k, v in result.items()}
    assert set(out) == {"status", "message"} and all(isinstance(v, str) for v in out.values()), out
    return out


def shipped_scripts() -> list[tuple[str, str]]:
    out = []
    for path in SHIPPED:
        [cm] = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
        out.append((str(path.relative_to(ROOT)), cm["data"][DGD_HEALTH_KEY]))
    return out


# The states the operator writes (its controller: `pending` while reconciling, `successful` with Ready=True once
# every resource is ready, `failed` with the error as the Ready message; `initializing` is the CRD's default).
CASES = [
    (None, "Progressing", "Waiting for the Dynamo operator to report a state"),
    ({"state": "initializing"}, "Progressing", "State initializing"),
    ({"state": "pending", "observedGeneration": 1, "conditions": [
        ready("False", "some_resources_are_not_ready", "Resources not ready: dsv41-flash-0")]},
     "Progressing", "State pending: Resources not ready: dsv41-flash-0"),
    ({"state": "successful", "observedGeneration": 1, "conditions": [
        ready("True", "all_resources_are_ready", "All resources are ready")]},
     "Healthy", "State successful: All resources are ready"),
    ({"state": "successful", "observedGeneration": 1, "conditions": [ready("True", "all_resources_are_ready", "")]},
     "Healthy", "State successful: all_resources_are_ready"),
    ({"state": "failed", "observedGeneration": 1, "conditions": [
        ready("False", "ValidationFailed", "Validation failed: spec.components[0].replicas")]},
     "Degraded", "State failed: Validation failed: spec.components[0].replicas"),
    ({"state": "failed"}, "Degraded", "State failed"),
    # Transient: the state written, the condition not yet (the operator writes both in one update, but a
    # status from elsewhere may not).
    ({"state": "successful", "conditions": [ready("False", "rolling_update_in_progress", "")]},
     "Progressing", "State successful, Ready is False: rolling_update_in_progress"),
]


@pytest.mark.parametrize("where", [str(p.relative_to(ROOT)) for p in SHIPPED])
@pytest.mark.parametrize(("status", "verdict", "message"), CASES)
def test_each_state_the_operator_writes_gives_its_health(where: str, status: dict[str, Any] | None, verdict: str,
                                                         message: str) -> None:
    script = dict(shipped_scripts())[where]
    assert health(script, dgd(status)) == {"status": verdict, "message": message}


def test_a_status_of_an_older_generation_is_progressing() -> None:
    """A new revision applied (generation 2) while the status still says generation 1 was successful."""
    old = {"state": "successful", "observedGeneration": 1,
           "conditions": [ready("True", "all_resources_are_ready", "All resources are ready")]}
    assert health(DGD_HEALTH_LUA, dgd(old, generation=2)) == {
        "status": "Progressing", "message": "Waiting for the Dynamo operator to observe generation 2"}


def test_a_state_off_the_schema_is_unknown_not_healthy() -> None:
    """A newer operator's state (the CRD's enum refuses it today, so built without the schema check)."""
    obj = dgd(None)
    obj["status"] = {"state": "degraded"}
    assert health(DGD_HEALTH_LUA, obj) == {"status": "Unknown", "message": "Unknown state degraded"}


def test_the_script_agrees_with_stackpins_readiness() -> None:
    """Healthy exactly when `stackpin status` would call the DynamoGraphDeployment ready (its components
    reported ready too, which the operator's `successful` implies)."""
    from stackpin.deploy.readiness import readiness

    for status, _, _ in CASES:
        obj = dgd(status)
        if status is not None and status.get("state") == "successful":
            obj["status"]["components"] = {"frontend": {"componentKind": "Deployment", "componentNames": ["f"],
                                                        "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}}
            obj = dgd(obj["status"])
        assert (health(DGD_HEALTH_LUA, obj)["status"] == "Healthy") is readiness(obj).ready, status


def test_the_sandbox_is_as_narrow_as_argo_cds() -> None:
    """The helper does take string functions away: a script using them fails here as it would in Argo CD."""
    with pytest.raises(lupa.LuaError):
        argocd_lua().execute("return string.format('%d', 1)")
    with pytest.raises(lupa.LuaError):
        argocd_lua().execute("return ('x'):upper()")


def test_the_shipped_files_hold_the_script_as_stackpin_writes_it() -> None:
    for path in SHIPPED:
        [cm] = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
        assert cm == health_configmap(), path
        # The key Argo CD reads (util/settings/settings.go convertToOverrideKey: <group>_<kind>).
        group, kind = DGD_HEALTH_KEY.removeprefix("resource.customizations.health.").split("_")
        assert (group, kind) == ("nvidia.com", "DynamoGraphDeployment")
        assert cm["metadata"]["labels"]["app.kubernetes.io/part-of"] == "argocd"
