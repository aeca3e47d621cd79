"""stackpin.lock.oci against a real distribution registry (tests/registry.py) and real loopback sockets."""

from __future__ import annotations

import base64
import http.client
import json
import random
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devkit.process import free_port
from stackpin.errors import IntegrityError, ResolveError
from stackpin.jsonio import canonical_json
from stackpin.lock.oci.client import RegistryClient
from stackpin.lock.oci.media import (
    DOCKER_CONFIG,
    DOCKER_LIST,
    DOCKER_MANIFEST,
    OCI_CONFIG,
    OCI_INDEX,
    OCI_LAYER_TAR,
    OCI_MANIFEST,
    sha256_digest,
)
from stackpin.lock.oci.reference import ImageRef, apply_mirror
from tests.registry import AuthRegistry, RunningRegistry

HEX = "0123456789abcdef" * 4
DIGEST = f"sha256:{HEX}"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[RegistryClient]:
    # A config path that does not exist: never read the developer's own ~/.docker/config.json.
    with RegistryClient(retries=2, backoff=0.01, docker_config=tmp_path / "none.json") as c:
        yield c


def push_image(
    client: RegistryClient,
    ref: str,
    platforms: list[str],
    *,
    docker: bool = False,
    annotations: dict[str, str] | None = None,
) -> tuple[str, dict[str, str]]:
    """Push a tiny image through the registry API; returns (top digest, platform -> digest)."""
    target = ImageRef.parse(ref)
    manifest_type, config_type = (DOCKER_MANIFEST, DOCKER_CONFIG) if docker else (OCI_MANIFEST, OCI_CONFIG)
    children: list[tuple[bytes, dict[str, str]]] = []
    for plat in platforms:
        os_name, arch, *variant = plat.split("/")
        layer = f"layer of {ref} for {plat}".encode()
        config = {"os": os_name, "architecture": arch, "rootfs": {"type": "layers", "diff_ids": []}}
        if variant:
            config["variant"] = variant[0]
        config_bytes = canonical_json(config)
        client.push_blob(target, layer)
        client.push_blob((target.registry, target.repository), config_bytes)
        manifest = {
            "schemaVersion": 2,
            "mediaType": manifest_type,
            "config": {"mediaType": config_type, "digest": sha256_digest(config_bytes), "size": len(config_bytes)},
            "layers": [{"mediaType": OCI_LAYER_TAR, "digest": sha256_digest(layer), "size": len(layer)}],
        }
        if len(platforms) == 1 and annotations:
            manifest["annotations"] = annotations
        plat_fields = {"os": os_name, "architecture": arch, **({"variant": variant[0]} if variant else {})}
        children.append((canonical_json(manifest), plat_fields))
    if len(children) == 1:
        digest = client.push_manifest(target, children[0][0], manifest_type)
        return digest, {platforms[0]: digest}
    entries = []
    for data, plat_fields in children:
        digest = client.push_manifest(
            ImageRef(target.registry, target.repository, None, sha256_digest(data)), data, manifest_type
        )
        entries.append({"mediaType": manifest_type, "digest": digest, "size": len(data), "platform": plat_fields})
    index = {"schemaVersion": 2, "mediaType": DOCKER_LIST if docker else OCI_INDEX, "manifests": entries}
    if annotations:
        index["annotations"] = annotations
    digest = client.push_manifest(target, canonical_json(index), index["mediaType"])
    return digest, {p: e["digest"] for p, e in zip(platforms, entries, strict=True)}


class Proxy:
    """A loopback HTTP proxy in front of a registry: answers `fail_status` to the first `fail`
    requests, can demand Basic credentials, and records every request line it sees."""

    def __init__(self, upstream: str, fail: int = 0, fail_status: int = 503, basic: str | None = None):
        self.upstream, self.fail, self.fail_status, self.basic = upstream, fail, fail_status, basic
        self.seen: list[str] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def handle_one(self) -> None:
                with proxy._lock:
                    proxy.seen.append(f"{self.command} {self.path}")
                    failing = proxy.fail > 0
                    proxy.fail -= failing
                if failing:
                    return self._reply(proxy.fail_status, {}, b"busy")
                headers = {k: v for k, v in self.headers.items() if k.lower() != "authorization"}
                if proxy.basic and self.headers.get("Authorization") != proxy.basic:
                    return self._reply(401, {"WWW-Authenticate": 'Basic realm="proxy"'}, b"")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(proxy.upstream, timeout=5)
                conn.request(self.command, self.path, body or None, headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                keep = {k: v for k, v in resp.getheaders() if k.lower() not in ("connection", "transfer-encoding")}
                self._reply(resp.status, keep, data)

            def _reply(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = handle_one

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy_factory(registry: RunningRegistry) -> Iterator:
    proxies: list[Proxy] = []

    def make(**kwargs: object) -> Proxy:
        proxies.append(Proxy(registry.host, **kwargs))  # type: ignore[arg-type]
        return proxies[-1]

    yield make
    for p in proxies:
        p.close()


# --- references ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("nginx", "docker.io/library/nginx:latest"),
        ("nginx:1.27", "docker.io/library/nginx:1.27"),
        ("bitnami/redis", "docker.io/bitnami/redis:latest"),
        ("index.docker.io/library/nginx:1", "docker.io/library/nginx:1"),
        ("docker.io/nginx", "docker.io/library/nginx:latest"),
        ("localhost/app", "localhost/app:latest"),
        ("localhost:5000/a/b:c", "localhost:5000/a/b:c"),
        ("127.0.0.1:5000/mirror/nvcr/x:1.6.1", "127.0.0.1:5000/mirror/nvcr/x:1.6.1"),
        ("[::1]:5000/x", "[::1]:5000/x:latest"),
        ("Registry/x", "Registry/x:latest"),
        ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1", "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"),
        (f"ghcr.io/a/b@{DIGEST}", f"ghcr.io/a/b@{DIGEST}"),
        (f"ghcr.io/a/b:v1@{DIGEST}", f"ghcr.io/a/b:v1@{DIGEST}"),
        ("a.b/c__d/e-f--g.h:T_1.x-y", "a.b/c__d/e-f--g.h:T_1.x-y"),
    ],
)
def test_parse_follows_docker_rules(text: str, canonical: str) -> None:
    assert str(ImageRef.parse(text)) == canonical


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        (" nginx", "whitespace"),
        ("nginx:", "tag ''"),
        ("nginx:-x", "tag '-x'"),
        ("nginx@sha256:abc", "invalid digest 'sha256:abc'"),
        (f"nginx@md5:{HEX}", "invalid digest"),
        (f"nginx@sha256:{HEX.upper()}", "lowercase hex"),
        ("nvcr.io/NVIDIA/x", "component 'NVIDIA'"),
        ("a//b", "component ''"),
        ("host_x.io/a", "registry 'host_x.io'"),
    ],
)
def test_parse_rejects_with_a_clear_message(text: str, fragment: str) -> None:
    with pytest.raises(ResolveError, match="invalid") as err:
        ImageRef.parse(text)
    assert fragment in str(err.value)


_component = st.from_regex(r"[a-z0-9]{1,5}(?:[._-][a-z0-9]{1,5}){0,2}", fullmatch=True)


@given(
    registry=st.sampled_from(["docker.io", "nvcr.io", "127.0.0.1:5000", "localhost", "reg.example.com:443"]),
    path=st.lists(_component, min_size=2, max_size=4),
    tag=st.none() | st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True),
    digest=st.none() | st.text("0123456789abcdef", min_size=64, max_size=64).map("sha256:".__add__),
)
def test_canonical_form_round_trips(registry: str, path: list[str], tag: str | None, digest: str | None) -> None:
    ref = ImageRef(registry, "/".join(path), tag if tag or digest else "latest", digest)
    assert ImageRef.parse(str(ref)) == ref


def test_pin_helpers() -> None:
    ref = ImageRef.parse("nvcr.io/nvidia/x:1.0")
    assert not ref.pinned and ref.reference == "1.0" and ref.name == "nvcr.io/nvidia/x"
    pinned = ref.with_digest(DIGEST)
    assert pinned.pinned and pinned.reference == DIGEST and str(pinned) == f"nvcr.io/nvidia/x:1.0@{DIGEST}"
    with pytest.raises(ResolveError, match="invalid digest"):
        ref.with_digest("sha256:nope")


def test_apply_mirror() -> None:
    ref = ImageRef.parse("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1")
    mirrored = apply_mirror(ref, {"nvcr.io": "127.0.0.1:5000/mirror/nvcr"})
    assert str(mirrored) == "127.0.0.1:5000/mirror/nvcr/nvidia/ai-dynamo/vllm-runtime:1.6.1"
    assert apply_mirror(ref, {"docker.io": "mirror.local"}) is ref
    hub = apply_mirror(ImageRef.parse("nginx"), {"index.docker.io": "mirror.local:5000/"})
    assert str(hub) == "mirror.local:5000/library/nginx:latest"
    with pytest.raises(ResolveError, match="invalid mirror 'https://m.io'"):
        apply_mirror(ref, {"nvcr.io": "https://m.io"})


def test_importing_does_not_load_httpx() -> None:
    code = "import sys, stackpin.lock.oci, stackpin.lock.ocilayout; print('httpx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- resolving against the real registry --------------------------------------------------------


def test_resolve_multi_arch_index(client: RegistryClient, registry: RunningRegistry) -> None:
    ref = f"{registry.host}/stack/multi:1.0"
    digest, platforms = push_image(client, ref, ["linux/arm64", "linux/amd64"], annotations={"org.example": "x"})
    got = client.resolve(ref)
    assert got.digest == digest and got.media_type == OCI_INDEX
    assert got.platforms == platforms and set(got.platforms) == {"linux/arm64", "linux/amd64"}
    assert got.annotations == {"org.example": "x"}
    assert got.source == f"registry {registry.host}" and str(got.ref) == ref
    assert got.size > 0 and str(got.pinned_ref) == f"{ref}@{digest}"
    # A pinned reference resolves to the same thing.
    assert client.resolve(f"{registry.host}/stack/multi@{digest}").digest == digest


def test_resolve_docker_manifest_list_with_variant(client: RegistryClient, registry: RunningRegistry) -> None:
    ref = f"{registry.host}/stack/dockerlist:2"
    digest, platforms = push_image(client, ref, ["linux/arm/v7", "linux/amd64"], docker=True)
    got = client.resolve(ref)
    assert (got.digest, got.media_type, got.platforms) == (digest, DOCKER_LIST, platforms)
    assert "linux/arm/v7" in got.platforms


def test_single_platform_image_reads_config(client: RegistryClient, registry: RunningRegistry) -> None:
    ref = f"{registry.host}/stack/single:1"
    digest, _ = push_image(client, ref, ["linux/arm64"], annotations={"a": "b"})
    got = client.resolve(ref)
    assert got.media_type == OCI_MANIFEST
    assert got.platforms == {"linux/arm64": digest} and got.annotations == {"a": "b"}


def test_artifact_round_trip(client: RegistryClient, registry: RunningRegistry) -> None:
    ref = f"{registry.host}/stack/weights-manifest:v1"
    layers = [
        (b'{"model": "deepseek"}', "application/json", {"org.opencontainers.image.title": "a.json"}),
        (b"\x00\x01binary", "application/octet-stream", None),
    ]
    pushed = client.push_artifact(
        ref, layers, "application/vnd.stackpin.test.v1", {"org.opencontainers.image.version": "v1"}
    )
    got = client.resolve(ref)
    assert got.digest == pushed.digest and got.platforms == {} and pushed.platforms == {}
    assert got.annotations == {"org.opencontainers.image.version": "v1"} == pushed.annotations
    manifest, blobs = client.pull_artifact(ref)
    assert manifest["artifactType"] == "application/vnd.stackpin.test.v1"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    assert manifest["layers"][0]["annotations"] == {"org.opencontainers.image.title": "a.json"}
    assert blobs == [layers[0][0], layers[1][0]]


def test_push_blob_skips_existing(proxy_factory, client: RegistryClient) -> None:
    proxy = proxy_factory()
    data = b"pushed twice"
    assert client.push_blob((proxy.host, "stack/blobs"), data) == sha256_digest(data)
    first = len(proxy.seen)
    client.push_blob((proxy.host, "stack/blobs"), data)
    assert [line.split()[0] for line in proxy.seen[first:]] == ["HEAD"]
    assert client.pull_blob((proxy.host, "stack/blobs"), sha256_digest(data)) == data


def test_unknown_tag_and_repository(client: RegistryClient, registry: RunningRegistry) -> None:
    push_image(client, f"{registry.host}/stack/known:1", ["linux/amd64"])
    with pytest.raises(ResolveError, match=rf"tag nope not found in registry {registry.host}"):
        client.resolve(f"{registry.host}/stack/known:nope")
    with pytest.raises(ResolveError, match=r"tag 1 not found in registry .* \(repository stack/absent\)"):
        client.resolve(f"{registry.host}/stack/absent:1")
    with pytest.raises(ResolveError, match=f"digest {DIGEST} not found"):
        client.resolve(f"{registry.host}/stack/known@{DIGEST}")


def test_registry_down(client: RegistryClient) -> None:
    host = f"127.0.0.1:{free_port()}"
    with pytest.raises(ResolveError, match=f"cannot reach registry {host}: connection refused"):
        client.resolve(f"{host}/stack/x:1")


def test_timeout(tmp_path: Path) -> None:
    # A listening socket that never accepts: connects succeed, answers never come.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        host = f"127.0.0.1:{sock.getsockname()[1]}"
        with RegistryClient(timeout=0.2, retries=0, docker_config=tmp_path / "none.json") as c:
            with pytest.raises(ResolveError, match=f"registry {host} did not answer within 0.2s"):
                c.resolve(f"{host}/stack/x:1")


def test_mirrors(client: RegistryClient, registry: RunningRegistry) -> None:
    mirror = f"{registry.host}/mirror/nvcr"
    digest, platforms = push_image(
        client, f"{mirror}/nvidia/ai-dynamo/vllm-runtime:1.6.1", ["linux/arm64", "linux/amd64"]
    )
    got = client.resolve("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1", mirrors={"nvcr.io": mirror})
    assert str(got.ref) == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"
    assert (got.digest, got.platforms, got.source) == (digest, platforms, f"mirror {mirror}")
    with pytest.raises(ResolveError, match="tag 9.9 not found .*mirror of nvcr.io"):
        client.resolve("nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.9", mirrors={"nvcr.io": mirror})


def test_resolve_many_keeps_order(client: RegistryClient, registry: RunningRegistry) -> None:
    repo = ImageRef.parse(f"{registry.host}/stack/many")
    layer, config = b"shared layer", canonical_json({"os": "linux", "architecture": "arm64"})
    client.push_blob(repo, layer)
    client.push_blob(repo, config)
    expected = {}
    for i in range(50):
        manifest = canonical_json({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": sha256_digest(config), "size": len(config)},
            "layers": [{"mediaType": OCI_LAYER_TAR, "digest": sha256_digest(layer), "size": len(layer)}],
            "annotations": {"i": str(i)},
        })  # fmt: skip
        expected[f"{repo.name}:t{i}"] = client.push_manifest(f"{repo.name}:t{i}", manifest, OCI_MANIFEST)
    refs = list(expected) + [f"{repo.name}:t7"]
    random.Random(4).shuffle(refs)
    results = client.resolve_many(refs, max_workers=16)
    assert [str(r.ref) for r in results] == refs
    assert [r.digest for r in results] == [expected[r] for r in refs]
    assert all(r.platforms == {"linux/arm64": r.digest} for r in results)
    with pytest.raises(ResolveError, match="tag missing not found"):
        client.resolve_many(refs[:10] + [f"{repo.name}:missing"] + refs[10:])
    assert client.resolve_many([]) == []


# --- integrity ------------------------------------------------------------------------------------


def test_tampered_blob_fails_pull(client: RegistryClient, registry: RunningRegistry) -> None:
    ref = f"{registry.host}/stack/tampered:1"
    layer = b"tamper-me: original weights"
    client.push_artifact(ref, [(layer, "application/octet-stream", None)], "application/vnd.stackpin.t")
    registry.blob_path(sha256_digest(layer)).write_bytes(b"tamper-me: modified weights")
    with pytest.raises(IntegrityError, match=f"blob {sha256_digest(layer)}.*expected"):
        client.pull_artifact(ref)


def test_tampered_manifest_fails_resolve(client: RegistryClient, registry: RunningRegistry) -> None:
    ref = f"{registry.host}/stack/tampered-manifest:1"
    digest, _ = push_image(client, ref, ["linux/amd64"], annotations={"note": "aaaa"})
    path = registry.blob_path(digest)
    path.write_bytes(path.read_bytes().replace(b'"aaaa"', b'"bbbb"'))
    with pytest.raises(IntegrityError, match=f"has digest sha256:[0-9a-f]{{64}}, not .*{digest}"):
        client.resolve(ref)


# --- retries ---------------------------------------------------------------------------------------


def test_retries_5xx_then_succeeds(proxy_factory, client: RegistryClient, registry: RunningRegistry) -> None:
    digest, _ = push_image(client, f"{registry.host}/stack/flaky:1", ["linux/amd64"])
    proxy = proxy_factory(fail=2)
    assert client.resolve(f"{proxy.host}/stack/flaky:1").digest == digest
    # two 503s, then GET manifest, GET config
    assert [line.split()[0] for line in proxy.seen] == ["GET", "GET", "GET", "GET"]


def test_5xx_gives_up_after_bounded_retries(proxy_factory, client: RegistryClient) -> None:
    proxy = proxy_factory(fail=100, fail_status=502)
    with pytest.raises(ResolveError, match=f"registry {proxy.host} answered HTTP 502 .* after 3 attempts"):
        client.resolve(f"{proxy.host}/stack/flaky:1")
    assert len(proxy.seen) == 3


def test_4xx_is_not_retried(proxy_factory, client: RegistryClient) -> None:
    proxy = proxy_factory(fail=100, fail_status=400)
    with pytest.raises(ResolveError, match="refused to pull .*HTTP 400"):
        client.resolve(f"{proxy.host}/stack/flaky:1")
    assert len(proxy.seen) == 1


# --- authentication ------------------------------------------------------------------------------


def _push_to_auth_registry(auth_registry: AuthRegistry, tmp_path: Path) -> tuple[str, str]:
    config = auth_registry.docker_config(tmp_path)
    with RegistryClient(backoff=0.01, docker_config=config) as authed:
        ref = f"{auth_registry.host}/private/app:1"
        digest, _ = push_image(authed, ref, ["linux/arm64", "linux/amd64"])
    return ref, digest


def test_bearer_token_flow_with_docker_config(auth_registry: AuthRegistry, tmp_path: Path) -> None:
    ref, digest = _push_to_auth_registry(auth_registry, tmp_path)
    for inline in (True, False):
        config = auth_registry.docker_config(tmp_path, inline_auth=inline)
        with RegistryClient(backoff=0.01, docker_config=config) as c:
            assert c.resolve(ref).digest == digest
            before = len(auth_registry.token_requests)
            assert c.resolve(ref).platforms.keys() == {"linux/arm64", "linux/amd64"}
            assert len(auth_registry.token_requests) == before, "token is cached per (registry, scope)"
    assert "repository:private/app:pull" in auth_registry.token_requests


def test_not_authorized_without_or_with_wrong_credentials(auth_registry: AuthRegistry, tmp_path: Path) -> None:
    ref, _ = _push_to_auth_registry(auth_registry, tmp_path)
    missing = tmp_path / "absent" / "config.json"
    with RegistryClient(backoff=0.01, docker_config=missing) as c:
        with pytest.raises(ResolveError, match=f"not authorized .*check credentials in {missing}"):
            c.resolve(ref)
    wrong = tmp_path / "wrong.json"
    bad = base64.b64encode(f"{auth_registry.username}:nope".encode()).decode()
    wrong.write_text(json.dumps({"auths": {f"http://{auth_registry.host}/v2/": {"auth": bad}}}))
    with RegistryClient(backoff=0.01, docker_config=wrong) as c:
        with pytest.raises(ResolveError, match=f"not authorized .*check credentials in {wrong}"):
            c.resolve(ref)


def test_basic_challenge(proxy_factory, client: RegistryClient, registry: RunningRegistry, tmp_path: Path) -> None:
    digest, _ = push_image(client, f"{registry.host}/stack/basic:1", ["linux/amd64"])
    proxy = proxy_factory(basic="Basic " + base64.b64encode(b"u:p").decode())
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {proxy.host: {"username": "u", "password": "p"}}}))
    with RegistryClient(backoff=0.01, docker_config=config) as c:
        assert c.resolve(f"{proxy.host}/stack/basic:1").digest == digest
    with pytest.raises(ResolveError, match="not authorized"):
        client.resolve(f"{proxy.host}/stack/basic:1")


def test_malformed_docker_config(tmp_path: Path, registry: RunningRegistry) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"auths": {"x": {"auth": "%%%"}}}')
    proxy = Proxy(registry.host, basic="Basic eDp5")
    try:
        with RegistryClient(backoff=0.01, docker_config=config) as c:
            with pytest.raises(ResolveError, match="auths.x.auth is not base64"):
                c.resolve(f"{proxy.host}/stack/x:1")
    finally:
        proxy.close()


def test_plain_http_only_where_configured(registry: RunningRegistry, tmp_path: Path) -> None:
    # Forcing HTTPS against the plain-HTTP registry fails the TLS handshake: reported, not raised raw.
    with RegistryClient(retries=0, plain_http=set(), docker_config=tmp_path / "none.json") as c:
        with pytest.raises(ResolveError, match=f"cannot reach registry {registry.host}"):
            c.resolve(f"{registry.host}/stack/x:1")
    with RegistryClient(retries=0, plain_http={"127.0.0.1"}, docker_config=tmp_path / "none.json") as c:
        with pytest.raises(ResolveError, match="tag 1 not found"):
            c.resolve(f"{registry.host}/stack/x:1")


def test_default_docker_config_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    with RegistryClient() as c:
        assert c.docker_config == tmp_path / "config.json"
    monkeypatch.delenv("DOCKER_CONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    with RegistryClient() as c:
        assert c.docker_config == tmp_path / ".docker" / "config.json"
