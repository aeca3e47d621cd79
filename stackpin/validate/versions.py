"""Version pins that must agree, and env vars the pinned engine ignores (docs/facts.md#version-pins, #engine-env-vars).

Every engine's pins and environment are reached through its backend (stackpin.backends): the Dynamo extra
it follows, the section of its releases' own pins, its env registry, removals and the variables render sets."""

from __future__ import annotations

from collections.abc import Iterator

from stackpin.backends import engine_of
from stackpin.backends.pins import dynamo_pins, release_pins
from stackpin.catalog.version import parse_version
from stackpin.rules import Context, Hit, Severity, rule

_V = ("spec", "versions")


@rule("SP161", Severity.warning, "Dynamo release unknown to the catalog")
def unknown_dynamo(ctx: Context) -> Iterator[Hit]:
    dynamo = ctx.profile.spec.versions.dynamo
    if dynamo not in ctx.catalog.versions.dynamo:
        label = engine_of(ctx.profile).label
        yield Hit(_V + ("dynamo",), f"Dynamo {dynamo} is not in the catalog; its {label}/NIXL pins cannot be checked",
                  f"known: {', '.join(ctx.catalog.versions.dynamo)}")


def _pin_rule(ctx: Context, field: str, want: str | None, by: str) -> Iterator[Hit]:
    have = getattr(ctx.profile.spec.versions, field)
    if want is not None and have != want:
        yield Hit(_V + (field,), f"{field} {have} does not match {want}, the version {by} pins",
                  f"set versions.{field}: {want}")


def _dynamo_pins(ctx: Context) -> tuple[str | None, str | None]:
    """The engine release and NIXL that the pinned Dynamo's extra for the stack's engine pins."""
    return dynamo_pins(engine_of(ctx.profile), ctx.catalog.versions.dynamo.get(ctx.profile.spec.versions.dynamo))


@rule("SP162", Severity.error, "the engine is not the version Dynamo pins")
def engine_pin(ctx: Context) -> Iterator[Hit]:
    yield from _pin_rule(ctx, ctx.profile.spec.engine.value, _dynamo_pins(ctx)[0],
                         f"Dynamo {ctx.profile.spec.versions.dynamo}")


@rule("SP163", Severity.error, "NIXL is not the version Dynamo pins")
def nixl_pin(ctx: Context) -> Iterator[Hit]:
    yield from _pin_rule(ctx, "nixl", _dynamo_pins(ctx)[1], f"Dynamo {ctx.profile.spec.versions.dynamo}")


@rule("SP164", Severity.error, "FlashInfer is not the version the engine pins")
def flashinfer_pin(ctx: Context) -> Iterator[Hit]:
    engine = engine_of(ctx.profile)
    pin = release_pins(engine, ctx.catalog.versions).get(ctx.profile.spec.engine_version)
    yield from _pin_rule(ctx, "flashinfer", pin.flashinfer if pin else None,
                         f"{engine.label} {ctx.profile.spec.engine_version}")


def _tag_names(tag: str, version: str) -> bool:
    """Does an image tag (`1.6.1`, `1.6.1-cuda13`) name this release? Compared as versions: a prefix
    test would take `1.6.10` or `1.6.1rc1` for 1.6.1."""
    try:
        return parse_version(tag.split("-", 1)[0]) == parse_version(version)
    except ValueError:
        return False


@rule("SP165", Severity.warning, "runtime image tag differs from the Dynamo version")
def image_tag_version(ctx: Context) -> Iterator[Hit]:
    image = ctx.profile.spec.versions.runtime_image
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else None
    dynamo = ctx.profile.spec.versions.dynamo
    if tag is not None and not _tag_names(tag, dynamo):
        yield Hit(_V + ("runtimeImage",), f"image tag {tag!r} does not name Dynamo {dynamo}; the image's "
                  "engine may not be the pinned one", f"use the {dynamo} runtime image")


@rule("SP171", Severity.error, "engine env var the pinned engine does not read")
def removed_env(ctx: Context) -> Iterator[Hit]:
    engine, version = engine_of(ctx.profile), ctx.profile.spec.engine_version
    removed = getattr(ctx.catalog.versions, engine.removed_env) if engine.removed_env else {}
    prefix, listed_in = engine.env_registry or (None, None)
    catalog = ctx.engine_catalog
    for name in ctx.profile.spec.kernels.env:
        gone = removed.get(name)
        if gone is not None and parse_version(version) >= gone.removed_in:
            yield Hit(("spec", "kernels", "env", name), f"{engine.label} {version} no longer reads {name} (gone by "
                      f"{gone.removed_in}); it is silently ignored", f"use {gone.use}")
        elif (gone is None and catalog is not None and prefix is not None and name.startswith(prefix)
              and name not in catalog.env_vars):
            yield Hit(("spec", "kernels", "env", name), f"{engine.label} {version} does not read {name} (not in "
                      f"{listed_in}); it is silently ignored", "check the name against the pinned release")


@rule("SP166", Severity.error, "the pinned engine cannot run the model")
def model_architecture(ctx: Context) -> Iterator[Hit]:
    catalog = ctx.engine_catalog
    if ctx.model is None or catalog is None or not catalog.model_architectures:
        return  # no catalog, or one that does not list the release's model registry (SGLang's)
    if ctx.model.architecture not in catalog.model_architectures.get("supported", ()):
        engine = engine_of(ctx.profile)
        yield Hit(_V + (engine.name,), f"{engine.label} {catalog.version} has no {ctx.model.architecture}: it "
                  f"cannot load {ctx.profile.spec.model.id}", f"pin a {engine.label} release that supports the model")


@rule("SP167", Severity.warning, "no flag catalog for the pinned engine")
def no_flag_catalog(ctx: Context) -> Iterator[Hit]:
    if ctx.engine_catalog is None:
        engine, version = engine_of(ctx.profile), ctx.profile.spec.engine_version
        yield Hit(_V + (engine.name,), f"stackpin has no flag catalog for {engine.label} {version}: "
                  "backends, speculative methods, env vars and engine flags go unchecked",
                  "add it to a catalog on STACKPIN_CATALOG_PATH or spec.catalogPath: "
                  f"stackpin engines add {engine.distribution}=={version}")


@rule("SP172", Severity.warning, "env var that stackpin sets itself")
def managed_env(ctx: Context) -> Iterator[Hit]:
    managed = engine_of(ctx.profile).managed_env
    for name in ctx.profile.spec.kernels.env:
        if name in managed:
            yield Hit(("spec", "kernels", "env", name), f"{name} is set by stackpin from {managed[name]}; a manual "
                      "value fights the pinned autotune cache", f"remove it and use spec.{managed[name]}")
