"""The stack's shape (stackpin/profile/topology.py): its numbers for the shipped stacks, that every
stage reads the same ones, and that no other module computes them again."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import msgspec
import pytest

from stackpin.catalog import load_catalog
from stackpin.lock.lockfile import StackLock
from stackpin.profile.model import StackProfile
from stackpin.profile.topology import topology_of
from stackpin.render.build import RenderError, build_objects
from stackpin.render.capture import capture_objects
from stackpin.validate.placement import speculative_mismatch
from stackpin.validate.summary import summarize
from tests.helpers import apply, base_doc, load_doc
from tests.lockkit import shipped_locks

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "stackpin"
TOPOLOGY = PACKAGE / "profile" / "topology.py"


def _shape(name: str):
    return topology_of(shipped_locks()[name].stack_profile)


# --- the shipped stacks -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["gb300-disagg-wide-ep", "vera-rubin-disagg-wide-ep"])
def test_wide_ep_decode_spans_four_trays(name: str) -> None:
    topology = _shape(name)
    assert topology.roles == ("prefill", "decode") and topology.missing == () and topology.ignored == ()
    prefill, decode = topology.pools
    # Decode: TP2 x DP8 with expert parallelism = EP16 over 16 GPUs, four 4-GPU trays, a pod per tray.
    assert (decode.role, decode.replicas, decode.tensor_parallel, decode.data_parallel) == ("decode", 4, 2, 8)
    assert decode.expert_parallel_size == 16 and decode.gpus_per_replica == 16
    assert decode.nodes_per_replica == decode.nodes_needed == 4 and decode.gpus_per_pod == 4
    assert decode.spans_nodes and decode.dp_per_pod == 2 and decode.tp_nodes == 1
    assert decode.layout_problem() is None
    # Prefill: TP4 EP4 fits one tray.
    assert (prefill.tensor_parallel, prefill.expert_parallel_size, prefill.gpus_per_replica) == (4, 4, 4)
    assert prefill.nodes_per_replica == 1 and prefill.gpus_per_pod == 4 and not prefill.spans_nodes
    assert topology.spans_nodes
    assert topology.gpus == 2 * 4 + 4 * 16 == 72 == topology.gpus_available


def test_colocated_and_node_stacks() -> None:
    tuned = _shape("gb300-tuned")
    assert tuned.roles == ("worker",) and tuned.decode_role == "worker"
    [worker] = tuned.pools
    assert (worker.replicas, worker.tensor_parallel, worker.expert_parallel_size, worker.gpus_per_pod) == (18, 4, 4, 4)
    assert not tuned.spans_nodes and tuned.gpus == 72
    node = topology_of(StackProfile.from_data(base_doc("a100-8x-selfhost")))
    [a100] = node.pools
    assert (a100.tensor_parallel, a100.expert_parallel_size, a100.gpus_per_node, a100.gpus_per_pod) == (8, 1, 8, 8)
    assert a100.nodes_per_replica == 1 and node.gpus_available == 8
    launch = _shape("gb300-launch")
    assert [(p.role, p.replicas, p.nodes_per_replica) for p in launch.pools] == [("prefill", 4, 1), ("decode", 14, 1)]
    assert launch.decode_role == "decode" and not launch.spans_nodes


@pytest.mark.parametrize("name", sorted(shipped_locks()))
def test_every_stage_reads_the_same_shape(name: str) -> None:
    lock = shipped_locks()[name]
    topology = topology_of(lock.stack_profile)
    # validate's summary table
    summary = summarize(lock.stack_profile)
    assert [(p.role, p.gpus, p.nodes_per_replica, p.expert_parallel_size) for p in summary.pools] == [
        (p.role, p.gpus, p.nodes_per_replica, p.expert_parallel_size) for p in topology.pools]
    assert (summary.gpus_used, summary.gpus_available) == (topology.gpus, topology.gpus_available)
    # render: one component per active role, a pod's GPUs and the node count per replica
    dgd = build_objects(lock)[0]
    workers = {c["name"]: c for c in dgd["spec"]["components"] if c["name"] != "frontend"}
    assert list(workers) == list(topology.roles)
    for pool in topology.pools:
        comp = workers[pool.role]
        resources = comp["podTemplate"]["spec"]["containers"][0]["resources"]
        assert resources["limits"] == {"nvidia.com/gpu": str(pool.gpus_per_pod)}
        host = load_catalog().engine.worker_host_per_gpu  # CPU and memory requested per GPU, never limited
        gpus = pool.gpus_per_pod
        assert resources["requests"] == {"nvidia.com/gpu": str(gpus), "cpu": str(host.cpu * gpus),
                                         "memory": f"{host.memory_gib * gpus}Gi"}
        assert comp.get("multinode", {"nodeCount": 1})["nodeCount"] == pool.nodes_per_replica
    # A ComputeDomain where NVLink crosses the trays a stack uses: a replica spanning nodes, or prefill and
    # decode on different trays moving KV over MNNVL.
    crosses = topology.spans_nodes or topology.mode == "disaggregated"
    multinode_nvlink = load_catalog().platforms[lock.stack_profile.spec.target.platform].multinode_nvlink
    assert any(o["kind"] == "ComputeDomain" for o in build_objects(lock)) == (crosses and multinode_nvlink)
    # capture: one Job per pool, indexed over the replica's nodes
    jobs = {o["metadata"]["name"].rsplit("-", 1)[1]: o for o in capture_objects(lock) if o["kind"] == "Job"}
    for pool in topology.pools:
        spec = jobs[pool.role]["spec"]
        assert spec.get("completions", 1) == pool.nodes_per_replica
        env = {e["name"]: e["value"] for e in spec["template"]["spec"]["containers"][0]["env"]}
        assert env["STACKPIN_NODES"] == str(pool.nodes_per_replica)
        assert env.get("STACKPIN_DP_LOCAL") == (str(pool.dp_per_pod) if pool.spans_nodes else None)


# --- invalid profiles still have a shape (the rules report what is wrong) -----------------------------

W = "spec.placement.pools.worker"


def test_a_replica_that_cannot_be_laid_out_still_has_a_topology(tmp_path: Path) -> None:
    # 6 GPUs on 4-GPU trays: two nodes that it does not fill (SP125), and pods of 3 GPUs.
    loaded = load_doc(tmp_path, apply(base_doc(), {f"{W}.tensorParallel": 2, f"{W}.dataParallel": 3}))
    [pool] = topology_of(loaded.profile).pools
    assert (pool.gpus_per_replica, pool.nodes_needed, pool.gpus_per_pod, pool.fills_nodes) == (6, 2, 3, False)
    # nodesPerReplica that does not divide the replica (SP124): render refuses with the layout problem.
    loaded = load_doc(tmp_path, apply(base_doc(), {f"{W}.nodesPerReplica": 3}))
    [pool] = topology_of(loaded.profile).pools
    assert (pool.nodes_needed, pool.nodes_per_replica) == (1, 3)
    assert pool.layout_problem() == "4 GPUs per replica do not split evenly over 3 nodes"


def test_missing_and_ignored_pools(tmp_path: Path) -> None:
    doc = base_doc("gb300-disagg-wide-ep")
    loaded = load_doc(tmp_path, apply(doc, {"spec.placement.pools.decode": None, W: {"replicas": 1}}))
    topology = topology_of(loaded.profile, load_catalog())
    assert topology.roles == ("prefill", "decode") and [p.role for p in topology.pools] == ["prefill"]
    assert topology.missing == ("decode",) and topology.ignored == ("worker",)


# --- render refuses what validation refuses, through the same code ----------------------------------

def _edited(name: str, changes: dict[str, Any]) -> StackLock:
    """A shipped lock with its profile edited past validation (as a hand-edited lock would be)."""
    data = shipped_locks()[name].to_data()
    data["profile"] = apply(data["profile"], changes)
    return msgspec.convert(data, StackLock)


def test_render_refuses_a_replica_no_pod_spec_can_express() -> None:
    lock = _edited("gb300-tuned", {f"{W}.nodesPerReplica": 3})
    with pytest.raises(RenderError, match="4 GPUs per replica do not split evenly over 3 nodes"):
        build_objects(lock)


def test_render_refuses_speculative_mismatch_with_the_rule_sp154_uses() -> None:
    lock = _edited("gb300-disagg-wide-ep", {"spec.placement.pools.decode.speculative": {"method": None}})
    profile = lock.stack_profile
    assert speculative_mismatch(profile, topology_of(profile))
    # Worded as `stackpin validate` words SP154: the same code, field and message.
    with pytest.raises(RenderError, match=r"error SP154 spec\.placement\.pools\.decode\.speculative: prefill and "
                       "decode pools run different speculative settings"):
        build_objects(lock)


# --- nobody else computes the shape -------------------------------------------------------------------

# Which parallel dimensions a size carries: the EP size is TP x DP already.
PARALLEL = {"tensor_parallel": {"tp"}, "data_parallel": {"dp"}, "pipeline_parallel": {"pp"},
            "expert_parallel_size": {"tp", "dp"}}
ROLE_ATTRS = {"worker", "prefill", "decode"}


def _names(node: ast.AST) -> set[str]:
    """Every attribute and variable name an expression mentions."""
    return {n.attr if isinstance(n, ast.Attribute) else n.id
            for n in ast.walk(node) if isinstance(n, ast.Attribute | ast.Name)}


def _factors(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]


def shape_computations(source: str) -> list[str]:
    """Where a module derives what topology.py owns: arithmetic or comparisons with a node's GPU count
    (also through a local alias), a product of TP and DP sizes (GPUs per replica, EP size) or of TP and
    PP sizes (the model-parallel world), a pool
    picked by role off a placement, or the TP size read back out of an argv."""
    tree = ast.parse(source)
    per_node = {"gpus_per_node"}
    parallel = {name: set(kinds) for name, kinds in PARALLEL.items()}

    def kinds(node: ast.AST) -> set[str]:
        return {k for name in _names(node) for k in parallel.get(name, ())}

    # Aliases carry the meaning: `per_node = platform.gpus_per_node`, `tp, dp = pool.tensor_parallel, ...`.
    for _ in range(2):  # twice: an alias of an alias
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                targets = [t for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name)]
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value] * len(targets)
                for target, value in zip(targets, values, strict=False):
                    if _names(value) & per_node:
                        per_node.add(target.id)
                    if kinds(value):
                        parallel.setdefault(target.id, set()).update(kinds(value))
    found = []
    for node in ast.walk(tree):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.BinOp | ast.Compare | ast.AugAssign) and _names(node) & per_node:
            found.append(f"{where}: arithmetic with a node's GPU count")
        factors = set().union(*(kinds(f) for f in _factors(node))) if isinstance(node, ast.BinOp) \
            and isinstance(node.op, ast.Mult) else set()
        if {"tp", "dp"} <= factors:
            found.append(f"{where}: a product of TP and DP sizes")
        elif {"tp", "pp"} <= factors:
            found.append(f"{where}: a product of TP and PP sizes")
        if isinstance(node, ast.Attribute) and node.attr in ROLE_ATTRS and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "pools":
            found.append(f"{where}: a pool picked by role")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                and node.args and isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "pools":
            found.append(f"{where}: a pool picked by role")
        if isinstance(node, ast.Attribute) and node.attr == "active_pools":
            found.append(f"{where}: active roles derived outside the topology")
        if isinstance(node, ast.Constant) and node.value == "--tensor-parallel-size":
            found.append(f"{where}: the TP size as an argv string")
    return found


# Modules that may: the topology itself, the catalog (a rack's size is GPUs per node x nodes),
# args.py, which writes the TP size into the engine argv, profile/engine_args.py, which names that
# flag as one stackpin renders (so that engineArgs cannot set it), and imports/profile.py, args.py's
# inverse: it reads the TP size from someone else's argv and sizes the target (racks) a DGD needs.
# validate/site.py compares the GPUs per node a site measured with the catalog's figure (SP263): no shape
# is derived from either.
ALLOWED = {TOPOLOGY, PACKAGE / "catalog" / "__init__.py", PACKAGE / "render" / "args.py",
           PACKAGE / "profile" / "engine_args.py", PACKAGE / "imports" / "profile.py",
           PACKAGE / "validate" / "site.py",
           # Each engine spells the pool's sizes in its own argv (SGLang's DP attention runs in one TP group).
           PACKAGE / "backends" / "vllm.py", PACKAGE / "backends" / "sglang.py"}


def test_no_module_outside_topology_computes_the_shape() -> None:
    found = [f"{path.relative_to(ROOT)} {hit}" for path in sorted(PACKAGE.rglob("*.py")) if path not in ALLOWED
             for hit in shape_computations(path.read_text(encoding="utf-8"))]
    assert not found, "compute these in stackpin/profile/topology.py and read them from there:\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    # The computations this check replaced, as they were written before topology.py.
    "nodes = -(-pool.gpus_per_replica // platform.gpus_per_node)",
    "nodes = requested or math.ceil(gpus_per_replica / platform.gpus_per_node)",
    "per_node = ctx.platform.gpus_per_node\nif pool.gpus_per_replica > per_node and pool.gpus_per_replica % per_node:"
    "\n    pass",
    "def nodes_needed(gpus: int, gpus_per_node: int) -> int:\n    return -(-gpus // gpus_per_node)",
    "gpus = self.tensor_parallel * self.data_parallel * self.pipeline_parallel",
    "ep = self.tensor_parallel * self.data_parallel if self.expert_parallel else 1",
    "tp, dp = pool.tensor_parallel, pool.data_parallel\ngpus = tp * dp",
    "world = pool.tensor_parallel * pool.pipeline_parallel\ngpus = world * pool.data_parallel",
    "world = pool.tensor_parallel * pool.pipeline_parallel",
    "tp, pp = pool.tensor_parallel, pool.pipeline_parallel\nworld = tp * pp",
    "gpus_per_engine=topo.tensor_parallel * topo.pipeline_parallel",
    "shards = pool.expert_parallel_size * pool.pipeline_parallel",
    "pools = profile.spec.placement.active_pools()",
    "if getattr(placement.pools, role) is None:\n    pass",
    "decode = profile.spec.placement.pools.decode",
    "tp = int(comp.args[comp.args.index('--tensor-parallel-size') + 1])",
])
def test_the_check_catches_a_reintroduced_computation(source: str) -> None:
    assert shape_computations(source)


def test_the_check_lets_the_shape_be_read() -> None:
    assert shape_computations(TOPOLOGY.read_text(encoding="utf-8"))  # it does compute there
    assert not shape_computations(
        "per_node = ctx.topology.gpus_per_node\nmsg = f'{pool.nodes_needed} node(s) of {per_node} GPUs'\n"
        "world = model_parallel_of(pool)\nslots = pool.max_num_seqs * pool.data_parallel")
