"""stackpin.ocilayout: writing layouts, resolving from them, and copying them into a real registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stackpin.errors import IntegrityError, ResolveError
from stackpin.lock.oci.client import RegistryClient
from stackpin.lock.oci.media import OCI_INDEX, OCI_MANIFEST
from stackpin.lock.oci.reference import ImageRef
from stackpin.lock.ocilayout import REF_NAME, LayoutResolver, LayoutWriter, push_layout_to_registry
from tests.registry import RunningRegistry

VLLM = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"
ROUTER = "nvcr.io/nvidia/ai-dynamo/router:1.6.1"


def write_stack(path: Path) -> LayoutWriter:
    writer = LayoutWriter(path)
    writer.add_image(VLLM, [("linux", "arm64"), ("linux", "amd64")], {"org.opencontainers.image.version": "1.6.1"})
    writer.add_image(ROUTER, ["linux/arm64/v8"])
    writer.add_artifact(
        "ghcr.io/stackpin/deepseek-flash-config:v4.1",
        [(b'{"tp": 8}', "application/json", {"org.opencontainers.image.title": "engine.json"})],
        "application/vnd.stackpin.engine-config.v1+json",
        {"org.opencontainers.image.source": "stackpin"},
    )
    return writer


def test_resolve_multi_arch_index(tmp_path: Path) -> None:
    write_stack(tmp_path / "layout")
    got = LayoutResolver(tmp_path / "layout").resolve(VLLM)
    assert got.media_type == OCI_INDEX and set(got.platforms) == {"linux/arm64", "linux/amd64"}
    assert got.source == f"oci-layout {tmp_path / 'layout'}" and str(got.ref) == VLLM
    assert got.annotations == {"org.opencontainers.image.version": "1.6.1"}
    # The platform digests are real manifests in the layout.
    for digest in got.platforms.values():
        assert LayoutResolver(tmp_path / "layout").resolve(f"nvcr.io/nvidia/ai-dynamo/vllm-runtime@{digest}").platforms


def test_writer_returns_what_the_resolver_finds(tmp_path: Path) -> None:
    writer = LayoutWriter(tmp_path)
    written = writer.add_image(ROUTER, ["linux/arm64/v8"], {"a": "b"})
    got = LayoutResolver(tmp_path).resolve(ImageRef.parse(ROUTER))
    assert got == written
    assert got.media_type == OCI_MANIFEST and got.platforms == {"linux/arm64/v8": got.digest}


def test_artifact(tmp_path: Path) -> None:
    write_stack(tmp_path)
    got = LayoutResolver(tmp_path).resolve("ghcr.io/stackpin/deepseek-flash-config:v4.1")
    assert got.platforms == {} and got.annotations == {"org.opencontainers.image.source": "stackpin"}
    manifest = json.loads(LayoutResolver(tmp_path).read_blob(got.digest))
    assert manifest["artifactType"] == "application/vnd.stackpin.engine-config.v1+json"


def test_writes_are_deterministic_and_sorted(tmp_path: Path) -> None:
    write_stack(tmp_path / "a")
    write_stack(tmp_path / "b")
    a, b = ((tmp_path / d / "index.json").read_bytes() for d in "ab")
    assert a == b
    names = [m["annotations"][REF_NAME] for m in json.loads(a)["manifests"]]
    assert names == sorted(names) == sorted([VLLM, ROUTER, "ghcr.io/stackpin/deepseek-flash-config:v4.1"])
    assert sorted(p.name for p in (tmp_path / "a/blobs/sha256").iterdir()) == sorted(
        p.name for p in (tmp_path / "b/blobs/sha256").iterdir()
    )


def test_re_adding_a_name_replaces_it(tmp_path: Path) -> None:
    writer = LayoutWriter(tmp_path)
    first = writer.add_image(ROUTER, ["linux/arm64"])
    second = LayoutWriter(tmp_path).add_image(ROUTER, ["linux/amd64"])
    assert first.digest != second.digest
    assert len(LayoutResolver(tmp_path).entries()) == 1
    assert LayoutResolver(tmp_path).resolve(ROUTER).digest == second.digest


def test_bare_tag_annotation_is_accepted(tmp_path: Path) -> None:
    digest = LayoutWriter(tmp_path).add_image(ROUTER, ["linux/arm64"]).digest
    index = json.loads((tmp_path / "index.json").read_text())
    index["manifests"][0]["annotations"][REF_NAME] = "1.6.1"  # as skopeo/oras write it
    (tmp_path / "index.json").write_text(json.dumps(index))
    assert LayoutResolver(tmp_path).resolve("example.com/any/repo:1.6.1").digest == digest


def test_unknown_tag(tmp_path: Path) -> None:
    write_stack(tmp_path)
    with pytest.raises(ResolveError, match="tag 9.9 not found in oci-layout"):
        LayoutResolver(tmp_path).resolve("nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.9")


def test_tampered_blobs(tmp_path: Path) -> None:
    writer = LayoutWriter(tmp_path)
    got = writer.add_image(ROUTER, ["linux/arm64"])
    manifest = json.loads(LayoutResolver(tmp_path).read_blob(got.digest))
    config = tmp_path / "blobs/sha256" / manifest["config"]["digest"].removeprefix("sha256:")
    config.write_bytes(config.read_bytes().replace(b"arm64", b"amd64"))
    with pytest.raises(IntegrityError, match=f"blob {manifest['config']['digest']} in oci-layout"):
        LayoutResolver(tmp_path).resolve(ROUTER)
    top = tmp_path / "blobs/sha256" / got.digest.removeprefix("sha256:")
    top.write_bytes(top.read_bytes() + b" ")
    with pytest.raises(IntegrityError, match="bytes, descriptor says"):
        LayoutResolver(tmp_path).resolve(ROUTER)


def test_missing_blob_and_not_a_layout(tmp_path: Path) -> None:
    got = LayoutWriter(tmp_path / "l").add_image(ROUTER, ["linux/arm64"])
    (tmp_path / "l/blobs/sha256" / got.digest.removeprefix("sha256:")).unlink()
    with pytest.raises(ResolveError, match="is missing"):
        LayoutResolver(tmp_path / "l").resolve(ROUTER)
    with pytest.raises(ResolveError, match="not an OCI image layout"):
        LayoutResolver(tmp_path).resolve(ROUTER)


def test_writer_rejects_bad_input(tmp_path: Path) -> None:
    writer = LayoutWriter(tmp_path)
    with pytest.raises(ResolveError, match="os/arch"):
        writer.add_image(ROUTER, ["linux"])
    with pytest.raises(ResolveError, match="each once"):
        writer.add_image(ROUTER, ["linux/arm64", ("linux", "arm64")])


def test_push_layout_to_registry(tmp_path: Path, registry: RunningRegistry) -> None:
    write_stack(tmp_path)
    mirrors = {"nvcr.io": f"{registry.host}/layout/nvcr", "ghcr.io": f"{registry.host}/layout/ghcr"}
    with RegistryClient(backoff=0.01, docker_config=tmp_path / "none.json") as client:
        pushed = push_layout_to_registry(tmp_path, client, mirrors)
        local = [LayoutResolver(tmp_path).resolve(r.ref) for r in pushed]
        assert [(r.digest, r.platforms, r.annotations) for r in pushed] == [
            (r.digest, r.platforms, r.annotations) for r in local
        ]
        assert {r.source for r in pushed} == {f"mirror {m}" for m in mirrors.values()}
        _, blobs = client.pull_artifact(f"{registry.host}/layout/ghcr/stackpin/deepseek-flash-config:v4.1")
        assert blobs == [b'{"tp": 8}']
        with pytest.raises(ResolveError, match="no mirror configured for registry ghcr.io"):
            push_layout_to_registry(tmp_path, client, {"nvcr.io": f"{registry.host}/x"})
