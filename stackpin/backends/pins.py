"""An engine's version pins (stackpin follows Dynamo's): the engine release and NIXL that Dynamo's extra for the
engine pins, and what that engine release pins itself (FlashInfer, torch, ...), from versions.yaml or from a
release's Requires-Dist. Every engine's are read the same way, through its `dynamo_extra` and `distribution`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stackpin.catalog import NIXL
from stackpin.engines.package import normalize
from stackpin.engines.pins import exact

if TYPE_CHECKING:
    from stackpin.backends.base import ServingEngine
    from stackpin.catalog import DynamoPin, Versions


def project(engine: ServingEngine) -> str:
    """The engine's project on a package index (its distribution name, normalized)."""
    return normalize(engine.distribution)


def dynamo_pins(engine: ServingEngine, pin: DynamoPin | None) -> tuple[str | None, str | None]:
    """The engine release and NIXL a Dynamo release's extra for `engine` pins, as versions.yaml records them;
    (None, None) without an entry, None for one the entry lacks (a site file written before stackpin
    recorded that extra)."""
    return pin.engine(engine.dynamo_extra) if pin is not None else (None, None)


def required_dynamo_pins(engine: ServingEngine, requires: tuple[str, ...]) -> tuple[str | None, str | None]:
    """The engine release and NIXL a Dynamo release's extra for `engine` pins exactly, from its Requires-Dist
    (`ai-dynamo[vllm]`: vllm[flashinfer]==X, nixl[cu13]==Y); None for one it pins no exact version of."""
    return exact(requires, project(engine), engine.dynamo_extra), exact(requires, NIXL, engine.dynamo_extra)


def dynamo_fields(engine: ServingEngine) -> tuple[str, str]:
    """The fields of a versions.yaml Dynamo entry that hold the engine release and NIXL its extra for `engine` pins."""
    from stackpin.catalog import DynamoPin

    return engine.dynamo_extra, DynamoPin.extras()[engine.dynamo_extra]


def release_pins(engine: ServingEngine, versions: Versions) -> dict[str, Any]:
    """What each release of `engine` pins itself (FlashInfer, torch, ...), by version: versions.yaml's section
    named after Dynamo's extra for it."""
    return versions.releases(engine.dynamo_extra)


def dynamo_shipping(engine: ServingEngine, release: str, versions: Versions) -> tuple[str, str | None] | None:
    """The newest Dynamo release the catalog knows whose extra for `engine` pins `release`, and that extra's
    NIXL; None when none does."""
    from stackpin.catalog.version import parse_version

    found = [(parse_version(v), v, nixl) for v, pin in versions.dynamo.items()
             for runs, nixl in [dynamo_pins(engine, pin)] if runs == release]
    if not found:
        return None
    _, version, nixl = max(found, key=lambda f: f[0])
    return version, nixl
