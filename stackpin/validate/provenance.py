"""Floating references and memory-dependent defaults: what makes a stack not reproducible."""

from __future__ import annotations

import re
from collections.abc import Iterator

from stackpin.rules import Context, Hit, Severity, pools, rule

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def image_is_pinned(image: str) -> bool:
    return re.search(r"@sha256:[0-9a-f]{64}$", image) is not None


@rule("SP181", Severity.warning, "floating image tag")
def floating_image(ctx: Context) -> Iterator[Hit]:
    image = ctx.profile.spec.versions.runtime_image
    if not image_is_pinned(image):
        yield Hit(("spec", "versions", "runtimeImage"), f"{image} is a tag a registry can re-push; it is an error "
                  "once locked", "stackpin lock resolves it to a digest")


@rule("SP182", Severity.error, "image without a version")
def latest_image(ctx: Context) -> Iterator[Hit]:
    image = ctx.profile.spec.versions.runtime_image
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    if not image_is_pinned(image) and (":" not in last or last.endswith(":latest")):
        yield Hit(("spec", "versions", "runtimeImage"), f"{image} names no version (latest or no tag)",
                  "name the release tag, for example vllm-runtime:<dynamo version>")


@rule("SP183", Severity.warning, "model revision is a branch or tag")
def model_revision(ctx: Context) -> Iterator[Hit]:
    revision = ctx.profile.spec.model.revision
    if not _COMMIT.match(revision):
        yield Hit(("spec", "model", "revision"), f"revision {revision!r} can move; the weights served may change",
                  "stackpin lock records the commit; or pin a 40-hex commit here")


def _unpinned(ctx: Context, field: str, derived: str) -> Iterator[Hit]:
    for role, path, pool in pools(ctx):
        if getattr(pool.spec, field) is None:
            yaml_key = "".join(w.capitalize() if i else w for i, w in enumerate(field.split("_")))
            yield Hit(path, f"{role} {yaml_key} is unset: vLLM picks it from GPU memory, and {derived} derive from it",
                      f"pin {yaml_key}")


@rule("SP191", Severity.warning, "max-num-seqs left to the GPU-memory default")
def seqs_unpinned(ctx: Context) -> Iterator[Hit]:
    yield from _unpinned(ctx, "max_num_seqs", "CUDA graph capture sizes")


@rule("SP192", Severity.warning, "max-num-batched-tokens left to the GPU-memory default")
def batched_unpinned(ctx: Context) -> Iterator[Hit]:
    yield from _unpinned(ctx, "max_num_batched_tokens", "the autotune shapes and capture sizes")


@rule("SP193", Severity.error, "max-num-batched-tokens below max-num-seqs")
def batched_below_seqs(ctx: Context) -> Iterator[Hit]:
    for role, path, shape in pools(ctx):
        pool = shape.spec
        if pool.max_num_seqs and pool.max_num_batched_tokens and pool.max_num_batched_tokens < pool.max_num_seqs:
            yield Hit(path + ("maxNumBatchedTokens",), f"{role} maxNumBatchedTokens={pool.max_num_batched_tokens} is "
                      f"below maxNumSeqs={pool.max_num_seqs}; vLLM refuses to start (one token per running sequence)",
                      "raise maxNumBatchedTokens or lower maxNumSeqs")


@rule("SP184", Severity.warning, "no model store: every pod downloads the weights")
def no_model_store(ctx: Context) -> Iterator[Hit]:
    if ctx.profile.spec.model_store is None:
        size = f" (~{ctx.model.checkpoint_gib:g} GiB)" if ctx.model else ""
        yield Hit(("spec",), f"spec.modelStore is unset: every worker pod downloads the checkpoint{size} from the "
                  "Hub at each start, inside its start-up budget", "pre-stage the pinned revision on a PVC and set "
                  "spec.modelStore.pvc")


@rule("SP185", Severity.warning, "runtime attestation turned off")
def attestation_off(ctx: Context) -> Iterator[Hit]:
    if not ctx.profile.spec.attestation:
        yield Hit(("spec", "attestation"), "workers start without checking that the runtime image's engines, the "
                  "mounted autotune cache and the GPU are the locked ones; a mismatch shows only as a slower or "
                  "failing engine", "remove spec.attestation: false")
