"""DynamoGraphDeployments written by others, read into typed, immutable components.

Both CRD versions: v1alpha1 (`spec.services`, `extraPodSpec.mainContainer`, `resources.limits.gpu`) and
v1beta1 (`spec.components`, `podTemplate`, container resources). For each component: its type, replicas,
multi-node shape, image, the Dynamo entry point with its argv (found inside a launch script when there is
one: stackpin/imports/shell.py), env (ConfigMap references resolved from the same input), requests, limits,
claims, shared memory, node selector and tolerations. What the reader cannot resolve stays visible
(`EnvVar.value` None with its source; `Entry` None with a note) so callers can report it.

Reading files (bounds, kustomize directories) is `stackpin/imports/source.py`; this module works on
already-parsed objects and raises `DgdError` (one line) on a field of the wrong shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stackpin.errors import StackpinError, clip
from stackpin.imports.shell import Script, ShellError, parse_script
from stackpin.jsonio import canonical_json

DGD_KIND = "DynamoGraphDeployment"
GPU = "nvidia.com/gpu"
# v1alpha1's resource names (ResourceItem: cpu, memory, gpu, gpuType, custom) as Kubernetes spells them.
_V1ALPHA1_RESOURCE = {"cpu": "cpu", "memory": "memory", "gpu": GPU}
_SHELLS = {"sh", "bash", "dash", "ash", "zsh"}
_PYTHON = re.compile(r"python[0-9.]*")
_KUBELET_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class DgdError(StackpinError):
    """A DGD field of a shape stackpin cannot read (exit 2, one line naming the component and field)."""


@dataclass(frozen=True)
class Entry:
    """The Dynamo process a container starts: `python3 -m <module> <argv...>`."""

    module: str  # dynamo.vllm | dynamo.frontend | dynamo.planner | ...
    argv: tuple[str, ...]
    shell: tuple[str, ...] = ()  # the launch script's other commands, as text ("ulimit -l unlimited")
    unresolved: tuple[str, ...] = ()  # variables the script reads that nothing in the input sets
    output: tuple[str, ...] = ()  # the engine command's redirections and pipes ("2>&1", "| tee /tmp/vllm.log")


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str | None  # None: from a Secret or a reference outside the input
    source: str | None = None  # "configMapKeyRef NAME/KEY", "secretKeyRef NAME/KEY", "fieldRef PATH"
    value_from: str | None = None  # canonical JSON of its valueFrom, as written (to carry it verbatim)


@dataclass(frozen=True)
class Component:
    name: str
    type: str  # frontend | worker | prefill | decode | planner | ... (subComponentType over componentType)
    replicas: int
    node_count: int  # nodes one replica spans (multinode.nodeCount), 1 when not multi-node
    image: str | None
    entry: Entry | None
    env: tuple[EnvVar, ...]
    env_from: tuple[str, ...]  # "secret NAME" / "configMap NAME"
    requests: tuple[tuple[str, str], ...]
    limits: tuple[tuple[str, str], ...]
    claims: tuple[str, ...]  # container resources.claims names
    resource_claims: tuple[tuple[str, str], ...]  # pod resourceClaims: name -> template
    shared_memory: str | None
    pvc_mounts: tuple[tuple[str, str], ...]  # (claim name, mount path)
    node_selector: tuple[tuple[str, str], ...]  # nodeSelector plus single-valued required node affinity
    tolerations: tuple[str, ...]  # canonical JSON of each toleration
    notes: tuple[str, ...] = ()
    # the main container's mounts: (mountPath, canonical JSON of what is mounted there: the pod volume's source,
    # or {"pvc": NAME} for v1alpha1's spec.pvcs mounts), /dev/shm included
    mounts: tuple[tuple[str, str], ...] = ()
    # the same mounts as written, to carry them: (mountPath, canonical JSON {"mount": ..., "volume": ...}); the
    # volume is None for a mount of a volume the pod does not declare (v1alpha1's spec.pvcs mounts are not here)
    volumes: tuple[tuple[str, str], ...] = ()

    @property
    def gpus(self) -> int:
        value = dict(self.limits).get(GPU) or dict(self.requests).get(GPU) or "0"
        return int(value) if value.isdigit() else 0

    def env_values(self) -> dict[str, str]:
        return {e.name: e.value for e in self.env if e.value is not None}


@dataclass(frozen=True)
class Dgd:
    name: str
    api_version: str
    source: str  # the file it came from, as given
    components: tuple[Component, ...]
    compute_domains: tuple[str, ...] = ()  # ComputeDomains in the same input (their channel templates)
    backend_framework: str | None = None  # spec.backendFramework as written (vllm, sglang, trtllm), if any


# --- field access: every wrong shape is one line naming where ------------------------------------

def _map(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DgdError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> Sequence[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DgdError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _text(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise DgdError(f"{where}: expected a string, got {type(value).__name__}")
    return str(value)


def _count(value: Any, where: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**31 - 1:
        raise DgdError(f"{where}: expected a count, got {clip(value, 40)}")
    return value


def _strings(value: Any, where: str) -> list[str]:
    return [_text(v, f"{where}[{i}]") for i, v in enumerate(_list(value, where))]


# --- env and command -----------------------------------------------------------------------------

def kubelet_expand(text: str, env: Mapping[str, str]) -> str:
    """What the kubelet does to a container's command, args and env values: `$(NAME)` of a variable defined
    (earlier) in the container becomes its value, `$$` becomes `$`, anything else stays as written."""
    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)
    return _KUBELET_VAR.sub(sub, text)


def _env(items: Sequence[Any], where: str, config_maps: Mapping[str, Mapping[str, str]]) -> list[EnvVar]:
    out: list[EnvVar] = []
    known: dict[str, str] = {}
    for i, raw in enumerate(items):
        item = _map(raw, f"{where}[{i}]")
        name = _text(item.get("name"), f"{where}[{i}].name")
        if "value" in item or "valueFrom" not in item:
            text = kubelet_expand(_text(item.get("value", ""), f"{where}[{i}].value"), known)
            out.append(EnvVar(name, text))
            known[name] = text
            continue
        ref = _map(item.get("valueFrom"), f"{where}[{i}].valueFrom")
        cm = _map(ref.get("configMapKeyRef"), f"{where}[{i}].valueFrom.configMapKeyRef")
        if cm:
            cm_name = _text(cm.get("name"), f"{where}[{i}].valueFrom.configMapKeyRef.name")
            key = _text(cm.get("key"), f"{where}[{i}].valueFrom.configMapKeyRef.key")
            data = config_maps.get(cm_name, {})
            value = data.get(key)  # exact, a YAML block's final newline included, as the kubelet passes it
            out.append(EnvVar(name, value, f"configMapKeyRef {cm_name}/{key}", canonical_json(ref).decode("utf-8")))
            if value is not None:
                known[name] = value
            continue
        kind = next(iter(ref), "valueFrom")
        detail = _map(ref.get(kind), f"{where}[{i}].valueFrom.{kind}") if isinstance(ref.get(kind), Mapping) else {}
        label = "/".join(str(detail[k]) for k in ("name", "key", "fieldPath", "resource") if k in detail)
        out.append(EnvVar(name, None, f"{kind} {label}".strip(), canonical_json(ref).decode("utf-8")))
    return out


def _entry(command: list[str], args: list[str], env: Mapping[str, str], where: str) -> tuple[Entry | None, str | None]:
    """The Dynamo entry point a container runs, or None with why."""
    words = [kubelet_expand(w, env) for w in command + args]
    if not words:
        return None, "no command: the image's default (for a frontend, the operator starts dynamo.frontend)"
    if words[0].rsplit("/", 1)[-1] in _SHELLS:
        script_at = next((i + 1 for i, w in enumerate(words[1:], 1) if w.startswith("-") and "c" in w[1:]
                          and not w.startswith("--")), None)
        if script_at is None or script_at >= len(words):
            return None, f"{where}: a shell without -c SCRIPT"
        try:
            script = parse_script(words[script_at], env)
        except ShellError as exc:
            raise DgdError(f"{where}: launch script: {exc}") from None
        found = None
        at = -1
        for i, cmd in enumerate(script.commands):
            module_argv = _module_call(list(cmd))
            if module_argv and found is None and module_argv[0].startswith("dynamo."):
                found, at = module_argv, i
        if found is None:
            return None, f"{where}: the launch script runs no `python3 -m dynamo.*`"
        # Where the engine's input and output go (redirections, a pipe into `tee FILE`): never its argv.
        output = list(script.redirects[at])
        taken = {at}
        if at > 0 and script.piped[at - 1]:
            taken.add(at - 1)
            output.insert(0, f"{_command_text(script, at - 1)} |")
        if script.piped[at] and at + 1 < len(script.commands):
            taken.add(at + 1)
            output.append(f"| {_command_text(script, at + 1)}")
        others = [_command_text(script, i) for i in range(len(script.commands)) if i not in taken]
        return Entry(found[0], tuple(found[1]), tuple(others), script.unresolved, tuple(output)), None
    module_argv = _module_call(words)
    if module_argv is None or not module_argv[0].startswith("dynamo."):
        return None, f"{where}: runs {clip(' '.join(words[:3]), 60)!r}, not `python3 -m dynamo.*`"
    return Entry(module_argv[0], tuple(module_argv[1])), None


def _command_text(script: Script, index: int) -> str:
    return " ".join((*script.commands[index], *script.redirects[index]))


def _module_call(words: list[str]) -> tuple[str, list[str]] | None:
    """(module, argv) of `[exec] [env] [A=B...] python3 -m MODULE ARGV...`, else None."""
    while words and (words[0] in ("exec", "env") or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0], re.DOTALL)):
        words = words[1:]
    if len(words) >= 3 and _PYTHON.fullmatch(words[0].rsplit("/", 1)[-1]) and words[1] == "-m":
        return words[2], words[3:]
    return None


# --- one component ---------------------------------------------------------------------------------

def _resources(raw: Mapping[str, Any], where: str, v1alpha1: bool) -> tuple[dict[str, str], dict[str, str], list[str]]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    for part, out in (("requests", requests), ("limits", limits)):
        for key, value in _map(raw.get(part), f"{where}.{part}").items():
            if v1alpha1 and key == "custom":
                out.update({k: _text(v, f"{where}.{part}.custom.{k}")
                            for k, v in _map(value, f"{where}.{part}.custom").items()})
            elif v1alpha1 and key == "gpuType":
                continue
            else:
                out[_V1ALPHA1_RESOURCE.get(key, key) if v1alpha1 else key] = _text(value, f"{where}.{part}.{key}")
    claims = [_text(_map(c, f"{where}.claims[{i}]").get("name"), f"{where}.claims[{i}].name")
              for i, c in enumerate(_list(raw.get("claims"), f"{where}.claims"))]
    return requests, limits, claims


def _node_selector(pod: Mapping[str, Any], where: str) -> dict[str, str]:
    out = {str(k): _text(v, f"{where}.nodeSelector.{k}") for k, v in _map(pod.get("nodeSelector"),
                                                                           f"{where}.nodeSelector").items()}
    affinity = _map(_map(pod.get("affinity"), f"{where}.affinity").get("nodeAffinity"), f"{where}.nodeAffinity")
    required = _map(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), f"{where}.nodeAffinity.required")
    terms = _list(required.get("nodeSelectorTerms"), f"{where}.nodeAffinity.nodeSelectorTerms")
    if len(terms) == 1:  # one term: its single-valued `In` expressions are node labels every pod needs
        for j, expr in enumerate(_list(_map(terms[0], where).get("matchExpressions"), f"{where}.matchExpressions")):
            e = _map(expr, f"{where}.matchExpressions[{j}]")
            values = _list(e.get("values"), f"{where}.matchExpressions[{j}].values")
            if e.get("operator") == "In" and len(values) == 1:
                out[_text(e.get("key"), f"{where}.matchExpressions[{j}].key")] = _text(values[0], where)
    return out


def _shared_memory_volume(pod: Mapping[str, Any], container: Mapping[str, Any], where: str) -> str | None:
    """A memory-backed emptyDir mounted at /dev/shm: the shared memory a v1beta1 recipe sizes by hand."""
    mounted = {_map(m, where).get("name") for m in _list(container.get("volumeMounts"), f"{where}.volumeMounts")
               if _map(m, where).get("mountPath") == "/dev/shm"}
    for vol in _list(pod.get("volumes"), f"{where}.volumes"):
        v = _map(vol, f"{where}.volumes")
        empty = _map(v.get("emptyDir"), f"{where}.volumes.emptyDir")
        if v.get("name") in mounted and empty.get("medium") == "Memory" and empty.get("sizeLimit") is not None:
            return _text(empty["sizeLimit"], f"{where}.volumes.emptyDir.sizeLimit")
    return None


def _mounts(pod: Mapping[str, Any], container: Mapping[str, Any],
            where: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(mountPath, what is mounted there) per mount of the container, and (mountPath, the mount and its volume
    as written)."""
    sources = {}
    declared = {}
    for i, vol in enumerate(_list(pod.get("volumes"), f"{where}.volumes")):
        v = _map(vol, f"{where}.volumes[{i}]")
        sources[v.get("name")] = canonical_json({k: x for k, x in v.items() if k != "name"}).decode("utf-8")
        declared[v.get("name")] = v
    out = []
    raw = []
    for i, m in enumerate(_list(container.get("volumeMounts"), f"{where}.volumeMounts")):
        mount = _map(m, f"{where}.volumeMounts[{i}]")
        path = _text(mount.get("mountPath"), f"{where}.volumeMounts[{i}].mountPath")
        extra = {k: v for k, v in mount.items() if k not in ("name", "mountPath")}
        source = sources.get(mount.get("name"), canonical_json({"undeclared": mount.get("name")}).decode("utf-8"))
        out.append((path, source if not extra else f"{source} {canonical_json(extra).decode('utf-8')}"))
        raw.append((path, canonical_json({"mount": mount, "volume": declared.get(mount.get("name"))}).decode("utf-8")))
    return out, raw


def _pvc_mounts(volumes: Mapping[str, str], container: Mapping[str, Any], where: str,
                mount_key: str = "mountPath") -> list[tuple[str, str]]:
    out = []
    for i, m in enumerate(_list(container.get("volumeMounts"), f"{where}.volumeMounts")):
        mount = _map(m, f"{where}.volumeMounts[{i}]")
        name = mount.get("name")
        if name in volumes and mount.get(mount_key) is not None:
            out.append((volumes[str(name)], _text(mount[mount_key], f"{where}.volumeMounts[{i}].{mount_key}")))
    return out


def _component(name: str, raw: Mapping[str, Any], v1alpha1: bool, where: str,
               config_maps: Mapping[str, Mapping[str, str]], pvcs: Sequence[str]) -> Component:
    notes: list[str] = []
    if v1alpha1:
        ctype = _text(raw.get("subComponentType") or raw.get("componentType") or "worker", f"{where}.componentType")
        pod = _map(raw.get("extraPodSpec"), f"{where}.extraPodSpec")
        container = _map(pod.get("mainContainer"), f"{where}.extraPodSpec.mainContainer")
        resources = _map(raw.get("resources"), f"{where}.resources")
        shared = _map(raw.get("sharedMemory"), f"{where}.sharedMemory")
        shared_memory = None if shared.get("disabled") else (
            _text(shared["size"], f"{where}.sharedMemory.size") if shared.get("size") is not None else None)
        env_items = [*_list(raw.get("envs"), f"{where}.envs"), *_list(container.get("env"), f"{where}.env")]
        secret = raw.get("envFromSecret")
        env_from = [f"secret {_text(secret, f'{where}.envFromSecret')}"] if secret else []
        # v1alpha1 mounts the DGD's spec.pvcs by name at volumeMounts[].mountPoint
        pvc_mounts = _pvc_mounts({p: p for p in pvcs}, raw, where, "mountPoint")
        mounts = [(_text(_map(m, where).get("mountPoint"), f"{where}.volumeMounts.mountPoint"),
                   canonical_json({"pvc": _map(m, where).get("name")}).decode("utf-8"))
                  for m in _list(raw.get("volumeMounts"), f"{where}.volumeMounts")]
    else:
        ctype = _text(raw.get("type") or raw.get("componentType") or "worker", f"{where}.type")
        pod = _map(_map(raw.get("podTemplate"), f"{where}.podTemplate").get("spec"), f"{where}.podTemplate.spec")
        containers = [_map(c, f"{where}.containers[{i}]")
                      for i, c in enumerate(_list(pod.get("containers"), f"{where}.containers"))]
        mains = [c for c in containers if c.get("name") == "main"] or containers[:1]
        container = mains[0] if mains else {}
        resources = _map(container.get("resources"), f"{where}.resources")
        shared_memory = (_text(raw["sharedMemorySize"], f"{where}.sharedMemorySize")
                         if raw.get("sharedMemorySize") is not None else None)
        env_items = list(_list(container.get("env"), f"{where}.env"))
        env_from = []
        volumes = {}
        for i, vol in enumerate(_list(pod.get("volumes"), f"{where}.volumes")):
            v = _map(vol, f"{where}.volumes[{i}]")
            claim = _map(v.get("persistentVolumeClaim"), f"{where}.volumes[{i}].persistentVolumeClaim")
            if claim.get("claimName") is not None:
                volumes[str(v.get("name"))] = _text(claim["claimName"], f"{where}.volumes[{i}].claimName")
        pvc_mounts = _pvc_mounts(volumes, container, where)
        mounts = []
    shared_memory = shared_memory or _shared_memory_volume(pod, container, where)
    found, written = _mounts(pod, container, where)
    mounts += found
    for i, ef in enumerate(_list(container.get("envFrom"), f"{where}.envFrom")):
        ref = _map(ef, f"{where}.envFrom[{i}]")
        for kind, label in (("secretRef", "secret"), ("configMapRef", "configMap")):
            if kind in ref:
                env_from.append(f"{label} {_text(_map(ref[kind], where).get('name'), f'{where}.envFrom[{i}].name')}")
    env = _env(env_items, f"{where}.env", config_maps)
    requests, limits, claims = _resources(resources, f"{where}.resources", v1alpha1)
    multinode = _map(raw.get("multinode"), f"{where}.multinode")
    entry, why = _entry(_strings(container.get("command"), f"{where}.command"),
                        _strings(container.get("args"), f"{where}.args"),
                        {e.name: e.value for e in env if e.value is not None}, where)
    if why:
        notes.append(why)
    resource_claims = []
    for i, rc in enumerate(_list(pod.get("resourceClaims"), f"{where}.resourceClaims")):
        item = _map(rc, f"{where}.resourceClaims[{i}]")
        resource_claims.append((_text(item.get("name"), f"{where}.resourceClaims[{i}].name"),
                                _text(item.get("resourceClaimTemplateName", ""), f"{where}.resourceClaims[{i}]")))
    tolerations = [canonical_json(_map(t, f"{where}.tolerations[{i}]")).decode("utf-8")
                   for i, t in enumerate(_list(pod.get("tolerations"), f"{where}.tolerations"))]
    image = container.get("image")
    return Component(
        name=name, type=ctype, replicas=_count(raw.get("replicas"), f"{where}.replicas", 1),
        node_count=max(1, _count(multinode.get("nodeCount"), f"{where}.multinode.nodeCount", 1)),
        image=_text(image, f"{where}.image") if image is not None else None, entry=entry, env=tuple(env),
        env_from=tuple(env_from), requests=tuple(sorted(requests.items())), limits=tuple(sorted(limits.items())),
        claims=tuple(claims), resource_claims=tuple(resource_claims), shared_memory=shared_memory,
        pvc_mounts=tuple(pvc_mounts), node_selector=tuple(sorted(_node_selector(pod, where).items())),
        tolerations=tuple(tolerations), notes=tuple(notes), mounts=tuple(sorted(mounts)),
        volumes=tuple(sorted(written)))


def dgd_from_object(obj: Mapping[str, Any], source: str, others: Sequence[Mapping[str, Any]] = ()) -> Dgd:
    """One DynamoGraphDeployment object; `others` are the objects beside it (ConfigMaps whose keys its env
    references, ComputeDomains)."""
    api = _text(obj.get("apiVersion", ""), "apiVersion")
    meta = _map(obj.get("metadata"), "metadata")
    name = _text(meta.get("name", ""), "metadata.name")
    spec = _map(obj.get("spec"), f"{name}: spec")
    config_maps: dict[str, dict[str, str]] = {}
    domains = []
    for other in others:
        other_meta = _map(other.get("metadata"), "metadata")
        if other.get("kind") == "ConfigMap":
            data = _map(other.get("data"), "ConfigMap data")
            config_maps[str(other_meta.get("name"))] = {str(k): _text(v, f"ConfigMap data.{k}")
                                                        for k, v in data.items()}
        elif other.get("kind") == "ComputeDomain":
            channel = _map(_map(_map(other.get("spec"), "spec").get("channel"), "channel").get("resourceClaimTemplate"),
                           "resourceClaimTemplate")
            domains.append(str(channel.get("name") or other_meta.get("name")))
    pvcs = [str(_map(p, f"{name}: spec.pvcs").get("name")) for p in _list(spec.get("pvcs"), f"{name}: spec.pvcs")]
    components: list[Component] = []
    if api.endswith("/v1alpha1"):
        for cname, raw in _map(spec.get("services"), f"{name}: spec.services").items():
            components.append(_component(str(cname), _map(raw, f"{name}: {cname}"), True, f"{name}: {cname}",
                                         config_maps, pvcs))
    elif api.endswith("/v1beta1"):
        for i, raw in enumerate(_list(spec.get("components"), f"{name}: spec.components")):
            item = _map(raw, f"{name}: spec.components[{i}]")
            cname = _text(item.get("name", f"[{i}]"), f"{name}: spec.components[{i}].name")
            components.append(_component(cname, item, False, f"{name}: {cname}", config_maps, pvcs))
    else:
        raise DgdError(f"{name}: apiVersion {clip(api, 60)!r} is not a DynamoGraphDeployment version stackpin reads "
                       "(nvidia.com/v1alpha1, nvidia.com/v1beta1)")
    framework = spec.get("backendFramework")
    return Dgd(name=name, api_version=api, source=source, components=tuple(components),
               compute_domains=tuple(domains),
               backend_framework=_text(framework, f"{name}: spec.backendFramework") if framework is not None else None)


def dgds_in(objects: Sequence[tuple[Mapping[str, Any], str]]) -> tuple[Dgd, ...]:
    """Every DynamoGraphDeployment among (object, source file) pairs, each with the other objects beside it."""
    plain = [o for o, _ in objects]
    return tuple(dgd_from_object(obj, source, plain) for obj, source in objects if obj.get("kind") == DGD_KIND)
