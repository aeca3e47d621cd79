"""`stackpin import` (issue 19, item 2): every upstream DGD -> a profile that validates, locks and renders back
to the same serving shape; the reader on hostile input; the CLI's output rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from stackpin.cli.main import main as cli_main
from stackpin.errors import InputError
from stackpin.imports.compare import roles
from stackpin.imports.dgd import dgds_in
from stackpin.imports.profile import import_dgd
from stackpin.imports.roundtrip import round_trip
from stackpin.imports.shell import ShellError, parse_script
from stackpin.imports.source import read_dgds
from stackpin.profile.loader import load_profile
from stackpin.render.build import build_objects
from stackpin.yamlio import dump_yaml
from tests.lockkit import ROOT, lock_loaded

UPSTREAM = ROOT / "tests" / "data" / "upstream"
DGD_FILES = sorted(p for p in UPSTREAM.glob("*.yaml") if "kind: DynamoGraphDeployment" in p.read_text())
# The Qwen examples select no node; the V4 Pro recipe none either (it relies on its ComputeDomain).
PLATFORM = {"recipes_deepseek-v4_deepseek-v4-pro_vllm_disagg_gb200_deploy": "gb200-nvl72"}
def _render(profile: dict[str, object], tmp_path: Path) -> object:
    path = tmp_path / "imported.yaml"
    path.write_text(dump_yaml(profile, sort_keys=False))
    [lock] = lock_loaded([load_profile(path)])
    [dgd] = dgds_in([(obj, "render") for obj in build_objects(lock)])
    return dgd


def test_shape_survives_every_round_trip(tmp_path: Path) -> None:
    for path in DGD_FILES:
        [upstream] = read_dgds(path)
        imported = import_dgd(upstream, platform=PLATFORM.get(path.stem, None if "recipes" in path.stem else "h200"))
        imported.profile["spec"]["versions"]["runtimeImage"] = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.1"  # type: ignore[index]
        ours = _render(imported.profile, tmp_path)
        theirs, mine = roles(upstream), roles(ours)  # type: ignore[arg-type]
        assert set(mine) == set(theirs), path.name  # every serving role, none added (planners are reported)
        for role, comp in theirs.items():
            shape = (comp.gpus, comp.replicas, comp.node_count, sorted(comp.claims))
            other = mine[role]
            assert (other.gpus, other.replicas, other.node_count, sorted(other.claims)) == shape, (path.name, role)


def test_import_validates_and_refuses_to_overwrite(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "p.yaml"
    src = str(UPSTREAM / "recipes_deepseek-v4_deepseek-v4-flash_vllm_agg_gb200_deploy.yaml")
    first = runner.invoke(cli_main, ["import", src, "--out", str(out)])
    assert first.exit_code == 0, first.output
    assert "not carried: stack: versions.dynamo: Dynamo 1.2.0 is not in stackpin's version catalog" in first.stderr
    assert yaml.safe_load(out.read_text())["spec"]["cudaGraphs"]["compilation"] == {"custom_ops": ["all"]}
    assert runner.invoke(cli_main, ["validate", str(out)]).exit_code == 0
    again = runner.invoke(cli_main, ["import", src, "--out", str(out)])
    assert again.exit_code == 2 and "exists; pass --force" in again.stderr
    assert runner.invoke(cli_main, ["import", src, "--out", str(out), "--force"]).exit_code == 0
    as_json = runner.invoke(cli_main, ["import", src, "-o", "json"])
    data = json.loads(as_json.stdout)
    assert data["profile"]["spec"]["placement"]["pools"]["worker"]["tensorParallel"] == 4
    assert any(n["item"] == "service" for n in data["notCarried"])


def test_kustomize_directory_of_stackpins_own_render() -> None:
    [dgd] = read_dgds(ROOT / "manifests" / "gb300-disagg-wide-ep")
    assert {c.type for c in dgd.components} == {"frontend", "prefill", "decode"}
    decode = next(c for c in dgd.components if c.type == "decode")
    assert decode.node_count == 4 and decode.gpus == 4 and decode.claims == ("compute-domain-channel",)


@pytest.mark.parametrize("text, message", [
    ("kind: DynamoGraphDeployment\napiVersion: nvidia.com/v9\nmetadata: {name: x}\n",
     "not a DynamoGraphDeployment version"),
    ("kind: DynamoGraphDeployment\napiVersion: nvidia.com/v1beta1\nmetadata: {name: x}\nspec: {components: 3}\n",
     "expected a list"),
    ("kind: DynamoGraphDeployment\napiVersion: nvidia.com/v1beta1\nmetadata: {name: x}\nspec:\n  components:\n"
     "  - {name: w, replicas: -1}\n", "expected a count"),
    ("kind: DynamoGraphDeployment\napiVersion: nvidia.com/v1beta1\nmetadata: {name: x}\nspec:\n  components:\n"
     "  - name: w\n    podTemplate: {spec: {containers: [{name: main, command: [sh, -c],\n"
     "      args: ['python3 -m dynamo.vllm $(date)']}]}}\n",
     "command substitution"),
    ("a: [", "invalid YAML"),
    ("kind: ConfigMap\n", "holds no DynamoGraphDeployment"),
])
def test_bad_input_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        read_dgds(path)
    assert message in str(info.value) and len(info.value.lines()) == 1


def test_fifo_link_and_escaping_kustomization_are_refused(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        read_dgds(fifo)
    link = tmp_path / "link.yaml"
    link.symlink_to(UPSTREAM / "examples_backends_vllm_deploy_v1beta1_agg.yaml")
    with pytest.raises(InputError, match="symbolic link"):
        read_dgds(link)
    kdir = tmp_path / "k"
    kdir.mkdir()
    (kdir / "kustomization.yaml").write_text("resources: [../outside.yaml]\n")
    with pytest.raises(InputError, match="outside"):
        read_dgds(kdir)
    (kdir / "kustomization.yaml").write_text("resources: []\npatches: [{path: p.yaml}]\n")
    with pytest.raises(InputError, match="kubectl kustomize"):
        read_dgds(kdir)


def test_shell_quoting() -> None:
    script = parse_script("set -e\nexport A=1\nexec python3 -m dynamo.vllm --a \"${A}\" '${A}' "
                          "--j '{\n \"k\": 1\n}' \\\n  --b ${B:-d} --c $C # tail\n", {})
    assert script.commands[-1] == ("exec", "python3", "-m", "dynamo.vllm", "--a", "1", "${A}", "--j",
                                   '{\n "k": 1\n}', "--b", "d", "--c", "${C}")
    assert script.unresolved == ("C",)
    with pytest.raises(ShellError):
        parse_script("python3 -m dynamo.vllm --x `id`", {})
    with pytest.raises(ShellError, match="unterminated"):
        parse_script("python3 -m dynamo.vllm --x 'open", {})


def test_configmap_env_is_resolved_from_the_same_file() -> None:
    [dgd] = read_dgds(UPSTREAM / "recipes_deepseek-v4_deepseek-v4-pro-0813_vllm_disagg-gb200-agentic_deploy.yaml")
    decode = next(c for c in dgd.components if c.type == "decode")
    assert decode.entry is not None
    spec = decode.entry.argv[decode.entry.argv.index("--speculative-config") + 1]
    assert yaml.safe_load(spec)["method"] == "dspark"


def _notes(path: Path, **kwargs: str) -> tuple[dict[str, object], dict[tuple[str, str], str]]:
    [dgd] = read_dgds(path)
    imported = import_dgd(dgd, **kwargs)
    return imported.profile, {(n.component, n.item): n.message for n in imported.notes}


def test_kv_transfer_config_set_on_prefill_only_is_carried(tmp_path: Path) -> None:
    # Dynamo's vLLM disagg examples pass --kv-transfer-config to the prefill worker only.
    src = UPSTREAM / "examples_backends_vllm_deploy_v1beta1_disagg.yaml"
    profile, notes = _notes(src, platform="h200")
    assert profile["spec"]["placement"]["kvConnector"] == "NixlConnector"  # type: ignore[index]
    assert "not set here (VllmPrefillWorker sets it)" in notes[("VllmDecodeWorker", "--kv-transfer-config")]
    out = tmp_path / "p.yaml"
    runner = CliRunner()
    assert runner.invoke(cli_main, ["import", str(src), "--platform", "h200", "--out", str(out)]).exit_code == 0
    checked = runner.invoke(cli_main, ["validate", str(out)])
    assert "SP151" not in checked.output and checked.exit_code == 0, checked.output


def test_a_token_secret_without_a_model_store_is_carried_per_component() -> None:
    src = UPSTREAM / "examples_backends_vllm_deploy_v1beta1_agg.yaml"
    [dgd] = read_dgds(src)
    imported = import_dgd(dgd, platform="h200")
    assert "modelStore" not in imported.profile["spec"]
    overrides = imported.profile["spec"]["placement"]["podOverrides"]
    for role in ("worker", "frontend"):
        [main] = overrides[role]["spec"]["containers"]
        assert main["envFrom"] == [{"secretRef": {"name": "hf-token-secret"}}]
    assert not [n for n in imported.notes if n.item.startswith("envFrom")]
    trip = round_trip(dgd, imported)
    assert {(i.component, i.status) for i in trip.items if i.item == "envFrom secret hf-token-secret"} == \
        {("worker", "carried"), ("frontend", "carried")}
    # With a model volume the Secret is carried as spec.modelStore.tokenSecret, and not patched.
    profile, notes = _notes(UPSTREAM / "recipes_deepseek-v4_deepseek-v4-flash_vllm_agg_gb200_deploy.yaml")
    assert profile["spec"]["modelStore"]["tokenSecret"] == "hf-token-secret"  # type: ignore[index]
    assert not [k for k in notes if k[1].startswith("envFrom")]
    assert "envFrom" not in json.dumps(profile["spec"]["placement"].get("podOverrides"))  # type: ignore[index]


def test_frontend_flags_are_checked_against_the_named_releases_catalog() -> None:
    src = UPSTREAM / "recipes_deepseek-v4_deepseek-v4-flash_vllm_disagg-b200-agentic_deploy.yaml"
    profile, notes = _notes(src)
    assert profile["spec"]["versions"]["dynamo"] == "1.3.1"  # type: ignore[index]
    kept = profile["spec"]["placement"]["frontendArgs"]  # type: ignore[index]
    # 1.3.1's catalog (read from its wheel) has all three: carried, checked, no note.
    for flag in ("--kv-cache-block-size", "--http-host", "--router-reset-states"):
        assert flag in kept
        assert ("Frontend", flag) not in notes
    # 1.6.1's has no --router-reset-states: named as absent and dropped; the others carried without a note.
    profile, notes = _notes(src, dynamo="1.6.1")
    assert {"--http-host", "--kv-cache-block-size"} <= set(profile["spec"]["placement"]["frontendArgs"])  # type: ignore[index]
    assert ("Frontend", "--http-host") not in notes
    assert notes[("Frontend", "--router-reset-states")] == ("not an option of Dynamo 1.6.1's frontend; "
                                                            "not carried over")


def test_frontend_flags_of_a_release_without_a_catalog_are_kept_unchecked() -> None:
    # 1.4.2 is pinned in versions.yaml but has no engine catalog.
    src = UPSTREAM / "recipes_deepseek-v4_deepseek-v4-flash_vllm_disagg-b200-agentic_deploy.yaml"
    profile, notes = _notes(src, dynamo="1.4.2")
    kept = profile["spec"]["placement"]["frontendArgs"]  # type: ignore[index]
    for flag in ("--kv-cache-block-size", "--http-host", "--router-reset-states"):
        assert flag in kept
        assert notes[("Frontend", flag)] == "no catalog for Dynamo 1.4.2's frontend; kept unchecked"


def test_what_the_profile_does_not_model_is_carried_in_pod_overrides(tmp_path: Path) -> None:
    doc = yaml.safe_load((UPSTREAM / "examples_backends_vllm_deploy_v1beta1_agg.yaml").read_text())
    frontend, worker = doc["spec"]["components"]
    pod = worker["podTemplate"]["spec"]
    main = pod["containers"][0]
    main["resources"] = {
        "requests": {"cpu": "16", "memory": "20Gi", "nvidia.com/gpu": "1", "rdma/ib": "1", "ephemeral-storage": "2Gi"},
        "limits": {"cpu": "128", "memory": "100Gi", "nvidia.com/gpu": "1", "hugepages-2Mi": "1Gi"}}
    main["env"] = [*main.get("env", []), {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf",
                                                                                            "key": "token"}}},
                   {"name": "A", "value": "cost $5"}]
    main["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch", "readOnly": True}]
    pod["volumes"] = [{"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}}]
    pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pod["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H200", "site.example/pool": "serving"}
    frontend["sharedMemorySize"] = "40Gi"
    worker["sharedMemorySize"] = "64Gi"
    path = tmp_path / "dgd.yaml"
    path.write_text(yaml.safe_dump(doc))
    [dgd] = read_dgds(path)
    imported = import_dgd(dgd, platform="h200")
    placement = imported.profile["spec"]["placement"]
    assert placement["sharedMemory"] == {"frontend": "40Gi", "worker": "64Gi"}
    patch = placement["podOverrides"]["worker"]["spec"]
    [patched] = patch["containers"]
    # GPUs are the topology's; CPU and memory requests only where they differ from render's (8 / 50Gi per GPU).
    assert patched["resources"] == {"requests": {"cpu": "16", "memory": "20Gi", "rdma/ib": "1",
                                                 "ephemeral-storage": "2Gi"},
                                    "limits": {"cpu": "128", "memory": "100Gi", "hugepages-2Mi": "1Gi"}}
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"key": "token", "name": "hf"}}} in patched["env"]
    assert imported.profile["spec"]["kernels"]["env"]["A"] == "cost $5"  # the main worker's: one set per stack
    assert patched["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch", "readOnly": True}]
    assert patch["volumes"] == [{"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}}]
    assert patch["nodeSelector"] == {"site.example/pool": "serving"}  # the platform's own label render writes
    assert patch["tolerations"] == [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]
    names = {(n.component, n.item) for n in imported.notes}
    assert not [i for i in names if i[1].startswith(("resources", "env ", "volume", "toleration", "nodeSelector",
                                                     "sharedMemory"))], names
    out = tmp_path / "p.yaml"
    out.write_text(dump_yaml(imported.profile, sort_keys=False))
    checked = CliRunner().invoke(cli_main, ["validate", str(out)])
    assert checked.exit_code == 0 and "SP271" in checked.output, checked.output
    trip = round_trip(dgd, imported)
    status = {(i.component, i.item): i.status for i in trip.items}
    for item in ("resources.requests.cpu", "resources.limits.memory", "resources.requests.rdma/ib",
                 "resources.limits.hugepages-2Mi", "resources.requests.ephemeral-storage", "env HF_TOKEN",
                 "volume /scratch", "nodeSelector site.example/pool",
                 'toleration {"effect":"NoSchedule","key":"nvidia.com/gpu","operator":"Exists"}'):
        assert status[("worker", item)] == "carried", item
    assert status[("worker", "env A")] == "same"
    assert status[("worker", "sharedMemory")] == "carried" and status[("frontend", "sharedMemory")] == "carried"
    assert not [i for i in trip.items if i.status == "dropped" and not i.item.startswith("launch script")], \
        [i for i in trip.items if i.status == "dropped"]


def test_a_pools_own_env_is_carried_and_the_stacks_removed(tmp_path: Path) -> None:
    doc = yaml.safe_load((UPSTREAM / "examples_backends_vllm_deploy_v1beta1_disagg.yaml").read_text())
    by_name = {c["name"]: c for c in doc["spec"]["components"]}
    by_name["VllmDecodeWorker"]["podTemplate"]["spec"]["containers"][0]["env"] = [{"name": "ONLY_DECODE",
                                                                                     "value": "1"}]
    by_name["VllmPrefillWorker"]["podTemplate"]["spec"]["containers"][0]["env"] = [{"name": "ONLY_PREFILL",
                                                                                      "value": "2"}]
    path = tmp_path / "dgd.yaml"
    path.write_text(yaml.safe_dump(doc))
    [dgd] = read_dgds(path)
    imported = import_dgd(dgd, platform="h200")
    assert imported.profile["spec"]["kernels"]["env"] == {"ONLY_DECODE": "1"}
    [main] = imported.profile["spec"]["placement"]["podOverrides"]["prefill"]["spec"]["containers"]
    assert main["env"] == [{"name": "ONLY_PREFILL", "value": "2"}, {"name": "ONLY_DECODE", "$patch": "delete"}]
    trip = round_trip(dgd, imported)
    status = {(i.component, i.item): i.status for i in trip.items}
    assert status[("prefill", "env ONLY_PREFILL")] == "carried" and ("prefill", "env ONLY_DECODE") not in status


def test_redirections_and_tee_are_parsed_away_and_kept_beside_the_command() -> None:
    script = parse_script("exec >/var/log/all.log 2>&1\npython3 -m dynamo.vllm --model m --block-size 128 2>&1 "
                          "| tee /tmp/vllm.log\nA=x\ncmd 2> \"/l/${A}\" <in &> both >>app", {})
    assert script.commands == (("exec",), ("python3", "-m", "dynamo.vllm", "--model", "m", "--block-size", "128"),
                               ("tee", "/tmp/vllm.log"), ("A=x",), ("cmd",))
    assert script.redirects == (("> /var/log/all.log", "2>&1"), ("2>&1",), (), (), ("2> /l/x", "< in", "&> both",
                                                                                  ">> app"))
    assert script.piped == (False, True, False, False, False)
    # Digits alone before `>` are a file descriptor (POSIX io_number), inside a word they are the word's;
    # `&&` and `&` stay separators.
    both = parse_script("run --x 12>y --z a12>w && b &", {})
    assert both.commands == (("run", "--x", "--z", "a12"), ("b",)) and both.redirects[0] == ("12> y", "> w")
    for bad, message in (("python3 -m dynamo.vllm >", "names no target"), ("cat <<EOF\nx\nEOF", "here-documents"),
                         ("python3 -m dynamo.vllm > $(date).log", "command substitution")):
        with pytest.raises(ShellError, match=message):
            parse_script(bad, {})


def test_a_worker_whose_output_is_teed_to_a_log_imports_with_the_log_named() -> None:
    src = UPSTREAM / "ai-dynamo-1.6.1_dynamo_planner_tests_manual_perf_test_configs_disagg_8b_tp2.yaml"
    [dgd] = read_dgds(src)
    decode = next(c for c in dgd.components if c.name == "decode")
    assert decode.entry is not None and decode.entry.output == ("2>&1", "| tee /tmp/vllm.log")
    assert decode.entry.argv[-2:] == ("--disaggregation-mode", "decode") and decode.entry.shell == ()
    profile, notes = _notes(src, platform="h200")
    assert profile["spec"]["placement"]["pools"]["decode"]["tensorParallel"] == 2  # type: ignore[index]
    for worker in ("decode", "prefill"):
        assert notes[(worker, "launch script output")].startswith("`2>&1 | tee /tmp/vllm.log`: the argv is the same")
