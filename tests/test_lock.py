"""stackpin lock against a real local registry, an OCI layout and a loopback Hub endpoint."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from stackpin.cli.main import main
from stackpin.errors import IntegrityError, ResolveError, StackpinError
from stackpin.lock.lockfile import StackMismatch, read_lock, sha256, stack_digest
from stackpin.lock.oci.client import RegistryClient
from stackpin.lock.ocilayout import LayoutWriter, push_layout_to_registry
from stackpin.lock.resolvers import STAND_IN_ANNOTATION, write_hf_cache_ref
from stackpin.lock.run import run_lock

ROOT = Path(__file__).resolve().parent.parent
TUNED = ROOT / "profiles/deepseek-v4.1-flash/gb300-tuned.yaml"
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"
MODEL = "deepseek-ai/DeepSeek-V4.1-Flash"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


AUTOTUNE_OFF = '    mode: "off"\n    cache: null\n'


def write_profile(directory: Path, name: str = "lock-test", image: str = IMAGE, extra: str = "",
                  autotune: str = AUTOTUNE_OFF) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    # The base beside it: `extends:` reads only inside the profile's tree (and the working directory).
    (directory / "base-tuned.yaml").write_bytes(Path(TUNED).read_bytes())
    path = directory / f"{name}.yaml"
    path.write_text(f"""apiVersion: stackpin.dev/v1
kind: StackProfile
extends: base-tuned.yaml
metadata:
  name: {name}
spec:
  versions:
    runtimeImage: {image}
  autotune:
{autotune}{extra}""")
    return path


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A project dir with a profile, an OCI layout holding the image, and an HF cache."""
    write_profile(tmp_path / "profiles")
    LayoutWriter(tmp_path / "oci").add_image(IMAGE, [("linux", "arm64"), ("linux", "amd64")])
    write_hf_cache_ref(tmp_path / "hf", MODEL, "main", COMMIT)
    return tmp_path


def lock_layout(project: Path, **kwargs: object) -> list:
    return run_lock([project / "profiles/lock-test.yaml"], project / "lockfiles", oci_layout=str(project / "oci"),
                    hf_cache=str(project / "hf"), **kwargs)


def test_lock_pins_image_model_and_names_the_stack(project: Path) -> None:
    [(path, lock)] = lock_layout(project)
    assert path == project / "lockfiles/lock-test.lock.yaml"
    image = lock.resolved.images["runtime"]
    assert image.reference == IMAGE
    assert image.pinned == f"nvcr.io/nvidia/ai-dynamo/vllm-runtime@{image.digest}"
    assert image.platform == "linux/arm64" and image.platform_digest.startswith("sha256:")
    assert image.resolved_via == "oci-layout oci"  # relative to the project root (the lockdir's parent)
    assert lock.resolved.model.revision == COMMIT and lock.resolved.model.requested == "main"
    assert lock.resolved.engines.vllm == "0.31.0"
    assert lock.stack_digest == stack_digest(lock.profile, lock.resolved)
    assert read_lock(path) == lock
    assert lock.metadata.profile == "profiles/lock-test.yaml"
    # The effective profile stands alone: extends merged, defaults filled.
    assert "extends" not in lock.profile and lock.profile["spec"]["kvCache"]["prefixCaching"] is True


def test_same_inputs_same_bytes(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [(path, _)] = lock_layout(project)
    first = path.read_bytes()
    path.unlink()
    lock_layout(project)
    assert path.read_bytes() == first
    # Another working directory, paths spelled relative to it: the same bytes.
    path.unlink()
    monkeypatch.chdir(project / "profiles")
    run_lock([Path("lock-test.yaml")], Path("../lockfiles"), oci_layout="../oci", hf_cache="../hf")
    assert path.read_bytes() == first
    assert b"/tmp" not in first.split(b"resolvedVia")[0]  # no host paths outside provenance fields


def test_digest_ignores_where_it_was_resolved(project: Path, registry) -> None:
    [(_, via_layout)] = lock_layout(project)
    prefix = f"{registry.host}/m{uuid.uuid4().hex[:8]}"
    with RegistryClient() as client:
        push_layout_to_registry(project / "oci", client, {"nvcr.io": prefix})
    [(_, via_mirror)] = run_lock([project / "profiles/lock-test.yaml"], project / "lockfiles",
                                 mirrors={"nvcr.io": prefix}, hf_cache=str(project / "hf"))
    assert via_mirror.resolved.images["runtime"].resolved_via == f"mirror {prefix}"
    assert via_mirror.stack_digest == via_layout.stack_digest


def test_amd64_only_image_fails_for_arm64_rack(project: Path) -> None:
    LayoutWriter(project / "oci").add_image("nvcr.io/x/amd-only:1.6.1", [("linux", "amd64")])
    write_profile(project / "profiles", image="nvcr.io/x/amd-only:1.6.1")
    with pytest.raises(StackMismatch, match="no linux/arm64 image"):
        lock_layout(project)
    assert not (project / "lockfiles").exists()


def test_check_missing_current_stale(project: Path) -> None:
    runner = CliRunner()
    args = ["lock", "--check", "--lockdir", str(project / "lockfiles"), str(project / "profiles/lock-test.yaml")]
    missing = runner.invoke(main, args)
    assert missing.exit_code == 1 and "missing" in missing.output
    lock_layout(project)
    assert runner.invoke(main, args).exit_code == 0
    write_profile(project / "profiles", extra="  service:\n    agents: 7\n")
    stale = runner.invoke(main, args)
    assert stale.exit_code == 1 and "stale" in stale.output and "lock-test.yaml" in stale.output


def _assert_untouched(project: Path, before: bytes, exc: type[Exception], **kwargs: object) -> None:
    with pytest.raises(exc):
        run_lock([project / "profiles/lock-test.yaml"], project / "lockfiles", hf_cache=str(project / "hf"),
                 **kwargs)
    assert (project / "lockfiles/lock-test.lock.yaml").read_bytes() == before
    assert [p.name for p in (project / "lockfiles").iterdir()] == ["lock-test.lock.yaml"]


def test_failures_leave_the_old_lockfile(project: Path, registry) -> None:
    [(path, _)] = lock_layout(project)
    before = path.read_bytes()
    # A profile edit that needs resolving, then each failure in turn.
    write_profile(project / "profiles", image="nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.9.9")
    prefix = f"{registry.host}/f{uuid.uuid4().hex[:8]}"
    with RegistryClient() as client:
        push_layout_to_registry(project / "oci", client, {"nvcr.io": prefix})
    _assert_untouched(project, before, ResolveError, mirrors={"nvcr.io": prefix})  # unknown tag
    _assert_untouched(project, before, ResolveError, mirrors={"nvcr.io": "127.0.0.1:9/none"})  # registry down


def test_tampered_manifest_in_registry(project: Path, registry) -> None:
    [(path, lock)] = lock_layout(project)
    before = path.read_bytes()
    prefix = f"{registry.host}/t{uuid.uuid4().hex[:8]}"
    with RegistryClient() as client:
        push_layout_to_registry(project / "oci", client, {"nvcr.io": prefix})
    blob = registry.blob_path(lock.resolved.images["runtime"].digest)
    blob.write_bytes(blob.read_bytes().replace(b"arm64", b"arm65"))
    _assert_untouched(project, before, IntegrityError, mirrors={"nvcr.io": prefix})


def test_offline_reuses_pins_and_fails_on_floating(project: Path) -> None:
    with pytest.raises(StackpinError, match="--offline: image .* still floats"):
        lock_layout(project, offline=True)
    [(_, online)] = lock_layout(project)
    # Offline needs no source at all once everything is pinned.
    [(_, offline)] = run_lock([project / "profiles/lock-test.yaml"], project / "lockfiles", offline=True)
    assert offline == online
    write_profile(project / "profiles", image="nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.0")
    with pytest.raises(StackpinError, match="vllm-runtime:1.6.0 still floats"):
        run_lock([project / "profiles/lock-test.yaml"], project / "lockfiles", offline=True)


def test_profile_with_errors_is_not_locked(project: Path) -> None:
    write_profile(project / "profiles", extra="  speculative:\n    method: mtp\n")
    with pytest.raises(StackMismatch, match="SP112"):
        lock_layout(project)
    assert not (project / "lockfiles").exists()


def test_stand_in_pins_are_marked(project: Path) -> None:
    LayoutWriter(project / "oci").add_image(IMAGE, [("linux", "arm64")], {STAND_IN_ANNOTATION: "true"})
    (project / "hf/STACKPIN_STAND_IN").write_text("demo\n")
    [(path, lock)] = lock_layout(project)
    assert lock.resolved.stand_in and lock.resolved.images["runtime"].stand_in and lock.resolved.model.stand_in
    assert "STAND-IN PINS" in path.read_text()


def _artifact(project: Path, flashinfer: str, device: str) -> str:
    ref = "nvcr.io/nvidia/ai-dynamo/autotune-cache:test"
    LayoutWriter(project / "oci").add_artifact(ref, [(b"cache", "application/octet-stream", None)],
                                               "application/vnd.stackpin.autotune-cache.v1",
                                               {"dev.stackpin.autotune.flashinfer": flashinfer,
                                                "dev.stackpin.autotune.device": device})
    write_profile(project / "profiles", autotune=f"    mode: replay\n    cache: {ref}\n")
    return ref


def test_autotune_cache_pinned_with_its_metadata(project: Path) -> None:
    ref = _artifact(project, "0.7.0.post1", "NVIDIA GB300")
    [(_, lock)] = lock_layout(project)
    cache = lock.resolved.autotune_cache
    assert cache is not None and cache.reference == ref and cache.pinned.endswith(cache.digest)
    assert cache.annotations == {"flashinfer": "0.7.0.post1", "device": "NVIDIA GB300"}


def test_autotune_cache_for_another_engine_is_refused(project: Path) -> None:
    _artifact(project, "0.6.16.post3", "NVIDIA GB300")
    with pytest.raises(StackMismatch, match="flashinfer '0.6.16.post3'.*vLLM would ignore it"):
        lock_layout(project)


class _Hub(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == f"/api/models/{MODEL}/revision/main":
            body, status = json.dumps({"id": MODEL, "sha": COMMIT}).encode(), 200
        else:
            body, status = b'{"error": "Revision Not Found"}', 404
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture()
def hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_model_revision_from_hub_endpoint(project: Path, hub: str) -> None:
    [(_, lock)] = run_lock([project / "profiles/lock-test.yaml"], project / "lockfiles",
                           oci_layout=str(project / "oci"), hf_endpoint=hub)
    assert lock.resolved.model.revision == COMMIT and lock.resolved.model.resolved_via == f"hub {hub}"
    write_profile(project / "profiles", extra="  model:\n    revision: no-such-branch\n")
    with pytest.raises(ResolveError, match="has no revision 'no-such-branch'"):
        run_lock([project / "profiles/lock-test.yaml"], project / "lockfiles", oci_layout=str(project / "oci"),
                 hf_endpoint=hub)


def test_cli_errors_are_one_line_exit_2(project: Path) -> None:
    result = CliRunner().invoke(main, ["lock", "--lockdir", str(project / "lockfiles"), "--mirror",
                                       "nvcr.io=127.0.0.1:9/none", "--hf-cache", str(project / "hf"),
                                       str(project / "profiles/lock-test.yaml")])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "cannot reach registry 127.0.0.1:9" in result.output
    assert "Traceback" not in result.output


def test_profile_digest_is_over_the_effective_profile(project: Path) -> None:
    [(_, lock)] = lock_layout(project)
    assert lock.metadata.profile_digest == sha256(lock.profile)


def test_lock_through_a_token_registry_and_profile_mirrors(project: Path, auth_registry, tmp_path: Path) -> None:
    """The site mirror demands Bearer tokens; credentials come from a docker config.json, the mirror
    from the profile's spec.mirrors."""
    prefix = f"{auth_registry.host}/site{uuid.uuid4().hex[:6]}"
    (tmp_path / "docker").mkdir()
    config = auth_registry.docker_config(tmp_path / "docker")
    with RegistryClient(docker_config=config) as client:
        push_layout_to_registry(project / "oci", client, {"nvcr.io": prefix})
    write_profile(project / "profiles", extra=f"  mirrors:\n    nvcr.io: {prefix}\n")
    with pytest.raises(ResolveError, match="not authorized"):
        run_lock([project / "profiles/lock-test.yaml"], project / "lockfiles", hf_cache=str(project / "hf"),
                 docker_config=str(tmp_path / "no-such-config.json"))
    [(_, lock)] = run_lock([project / "profiles/lock-test.yaml"], project / "lockfiles",
                           hf_cache=str(project / "hf"), docker_config=str(config))
    assert lock.resolved.images["runtime"].resolved_via == f"mirror {prefix}"
    assert lock.resolved.images["runtime"].pinned.startswith("nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:")


def test_unwritable_lockfile_is_one_line(project: Path) -> None:
    (project / "lockfiles/lock-test.lock.yaml").mkdir(parents=True)  # a directory where the file goes
    result = CliRunner().invoke(main, ["lock", "--lockdir", str(project / "lockfiles"), "--oci-layout",
                                       str(project / "oci"), "--hf-cache", str(project / "hf"),
                                       str(project / "profiles/lock-test.yaml")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot write" in errors[0]
    assert [p.name for p in (project / "lockfiles").iterdir()] == ["lock-test.lock.yaml"]  # no temp files


def test_a_tampered_lockfile_is_replaced_by_a_fresh_lock_but_not_trusted_offline(project: Path) -> None:
    [(path, lock)] = lock_layout(project)
    path.write_text(path.read_text().replace(lock.resolved.images["runtime"].digest, "sha256:" + "0" * 64))
    with pytest.raises(StackpinError, match="does not match the lockfile's content"):
        run_lock([project / "profiles/lock-test.yaml"], project / "lockfiles", offline=True)
    notes: list[str] = []
    [(_, fresh)] = lock_layout(project, on_note=notes.append)
    assert fresh == lock and "not a valid lockfile" in notes[0]
    assert read_lock(path) == lock


def test_two_profiles_may_not_share_a_lockfile(project: Path) -> None:
    lock_layout(project)
    other = project / "elsewhere"
    write_profile(other)  # another file, the same metadata.name
    with pytest.raises(StackpinError, match="is the lock of profiles/lock-test.yaml, not of elsewhere/lock-test.yaml"):
        run_lock([other / "lock-test.yaml"], project / "lockfiles", oci_layout=str(project / "oci"),
                 hf_cache=str(project / "hf"))
    result = CliRunner().invoke(main, ["validate", str(project / "profiles/lock-test.yaml"),
                                       str(other / "lock-test.yaml")])
    assert result.exit_code == 2 and "metadata.name: 'lock-test' is also the name of" in result.output


def test_check_reports_an_invalid_lockfile_and_goes_on(project: Path) -> None:
    write_profile(project / "profiles", name="second")
    lock_layout(project)
    run_lock([project / "profiles/second.yaml"], project / "lockfiles", oci_layout=str(project / "oci"),
             hf_cache=str(project / "hf"))
    (project / "lockfiles/lock-test.lock.yaml").write_text("a: [\n")
    result = CliRunner().invoke(main, ["lock", "--check", "--lockdir", str(project / "lockfiles"),
                                       str(project / "profiles")])
    assert result.exit_code == 1
    assert "invalid  " in result.output and "current  " in result.output and "second.lock.yaml" in result.output


BROKEN_LOCKS = {  # an edit of the shipped gb300-tuned lock -> the problems read_lock names, in file order
    "a pin's flag of another type": (("    standIn: true", '    standIn: "yes"'), [
        "125:5: resolved.autotuneCache.standIn: must be true or false, got a string",
        "139:7: resolved.images.runtime.standIn: must be true or false, got a string",
        "145:5: resolved.model.standIn: must be true or false, got a string"]),
    "a misspelt section": (("  model:\n    id:", "  modle:\n    id:"), [
        "114:1: resolved.model: required field is missing",
        "140:3: resolved.modle: unknown field (did you mean 'model'?)"]),
    "a digest that is a number": (("stackDigest: sha256:", "stackDigest: 12 #"), [
        "146:1: stackDigest: must be a string, got an integer"]),
    "an invalid embedded profile": (("      blockSize: 128", "      blockSize: big"), [
        "48:7: profile.spec.kvCache.blockSize: must be an integer or null, got a string"]),
    "an edited profile": (("      blockSize: 128", "      blockSize: 64"), [
        "146:1: stackDigest: does not match the lockfile's content (edited by hand?); run stackpin lock"]),
}


@pytest.mark.parametrize("case", sorted(BROKEN_LOCKS))
def test_a_broken_lockfile_names_each_problem_at_its_line(tmp_path: Path, case: str) -> None:
    (old, new), expected = BROKEN_LOCKS[case]
    text = (ROOT / "lockfiles/gb300-tuned.lock.yaml").read_text()
    assert old in text
    path = tmp_path / "gb300-tuned.lock.yaml"
    path.write_text(text.replace(old, new))
    with pytest.raises(StackpinError) as caught:
        read_lock(path)
    assert caught.value.exit_code == 2
    assert caught.value.lines() == [f"{path}:{line}" for line in expected]
