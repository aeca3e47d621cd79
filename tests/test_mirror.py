"""stackpin mirror: what locks pin, copied to an OCI layout and to a registry (tests/registry.py's real CNCF
distribution), then locked and rendered against the copy with the same stackDigest and the same bytes. skopeo
(Debian's, scripts/install-test-services.sh) reads every copy as an independent OCI reader."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from stackpin.cli.main import main
from stackpin.demo.mirror import build_demo_mirror
from stackpin.errors import IntegrityError, ResolveError, StackpinError
from stackpin.lock import localcopy
from stackpin.lock.lockfile import StackLock, read_lock
from stackpin.lock.mirror import LayoutSource, lock_pins, mirror_locks, parse_destination
from stackpin.lock.oci.client import RegistryClient
from stackpin.lock.ocilayout import REF_NAME, LayoutResolver, push_layout_to_registry
from stackpin.lock.resolvers import STAND_IN_ANNOTATION, write_hf_cache_ref
from stackpin.lock.run import run_lock
from tests.registry import RunningRegistry

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("gb300-tuned", "gb300-launch")  # the tuned one pins an autotune cache as well as its image
SKOPEO_TIMEOUT = 60


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """Shipped profiles, the demo's stand-in mirror (an OCI layout and a Hugging Face cache) as the origin,
    and the profiles locked against it into lockfiles/."""
    shutil.copytree(ROOT / "profiles/deepseek-v4.1-flash", tmp_path / "profiles")
    from stackpin.profile.loader import load_profile

    build_demo_mirror(tmp_path / "origin", [load_profile(p).profile for p in profiles(tmp_path)])
    run_lock(profiles(tmp_path), tmp_path / "lockfiles", oci_layout=str(tmp_path / "origin/oci"),
             hf_cache=str(tmp_path / "origin/hf"))
    return tmp_path


def profiles(project: Path) -> list[Path]:
    return [project / "profiles" / f"{name}.yaml" for name in NAMES]


def locks(project: Path, lockdir: str = "lockfiles") -> list[StackLock]:
    return [read_lock(project / lockdir / f"{name}.lock.yaml") for name in NAMES]


def rendered(project: Path, lockdir: str) -> str:
    result = CliRunner().invoke(main, ["render", "--stdout", *(str(project / lockdir / f"{n}.lock.yaml")
                                                                for n in NAMES)])
    assert result.exit_code == 0, result.output
    return result.output


def assert_same_stack(project: Path, lockdir: str) -> None:
    """The locks made against the copy name the same stacks as the origin's, and render the same bytes."""
    for origin, copy in zip(locks(project), locks(project, lockdir), strict=True):
        assert copy.stack_digest == origin.stack_digest
        assert copy.resolved.stand_in and origin.resolved.stand_in  # stand-ins stay marked as such
        assert copy.resolved.images["runtime"].resolved_via != origin.resolved.images["runtime"].resolved_via
    assert rendered(project, lockdir) == rendered(project, "lockfiles")


def blob_count(layout: Path) -> int:
    return sum(1 for p in (layout / "blobs/sha256").iterdir() if not p.name.startswith("."))


def skopeo(*args: str) -> subprocess.CompletedProcess[bytes]:
    binary = shutil.which("skopeo")
    if binary is None:
        pytest.fail("skopeo is not installed: scripts/install-test-services.sh installs it", pytrace=False)
    return subprocess.run([binary, "--insecure-policy", *args], capture_output=True, timeout=SKOPEO_TIMEOUT,
                          check=False)


def skopeo_reads_every_pin(copy: str, pins_of: list[StackLock], tmp: Path, tls: list[str] | None = None) -> None:
    """skopeo finds each pinned name at the digest the lock says, and copies every platform of it (checking
    every blob against its descriptor) into a layout of its own."""
    for pin in lock_pins(pins_of):
        name = f"{copy}{pin.ref}" if copy.startswith("oci:") else f"docker://{copy}/{pin.ref.repository}:{pin.ref.tag}"
        raw = skopeo("inspect", *(tls or []), "--raw", name)
        assert raw.returncode == 0, raw.stderr.decode()
        assert "sha256:" + hashlib.sha256(raw.stdout).hexdigest() == pin.digest
        out = tmp / f"skopeo-{uuid.uuid4().hex[:8]}"
        copied = skopeo("copy", *(["--src-tls-verify=false"] if tls else []), "--all", "--preserve-digests",
                        name, f"oci:{out}:x")
        assert copied.returncode == 0, copied.stderr.decode()
        assert LayoutResolver(out).resolve("x").digest == pin.digest


# -- to an OCI layout --


def test_mirror_to_layout_then_lock_and_render_the_same(project: Path) -> None:
    site = project / "site"
    report = mirror_locks(locks(project), f"oci:{site}/oci", from_oci_layout=project / "origin/oci",
                          hf_cache=project / "origin/hf", hf_to=site / "hf")
    # Both stacks' runtime images and the tuned stack's autotune cache, every platform of each.
    assert sorted(i.reference for i in report.images) == sorted(
        {lock.resolved.images["runtime"].reference for lock in locks(project)}
        | {locks(project)[0].resolved.autotune_cache.reference})  # type: ignore[union-attr]
    assert report.lock_flags == [f"--oci-layout {site}/oci", f"--hf-cache {site}/hf"]
    names = {m["annotations"][REF_NAME] for m in json.loads((site / "oci/index.json").read_text())["manifests"]}
    assert names == {i.reference for i in report.images}
    assert all(i.blobs_copied and not i.blobs_present for i in report.images)
    # The stand-in notes are in the copied manifests, unchanged.
    runtime = locks(project)[0].resolved.images["runtime"]
    assert LayoutResolver(site / "oci").resolve(runtime.reference).annotations[STAND_IN_ANNOTATION] == "true"
    run_lock(profiles(project), project / "site-locks", oci_layout=str(site / "oci"), hf_cache=str(site / "hf"))
    assert_same_stack(project, "site-locks")
    skopeo_reads_every_pin(f"oci:{site}/oci:", locks(project), project)

    again = mirror_locks(locks(project), f"oci:{site}/oci", from_oci_layout=project / "origin/oci")
    assert all(not i.blobs_copied and i.blobs_present and not i.bytes_copied for i in again.images)


def test_cli_to_layout_from_a_registry(project: Path, registry: RunningRegistry) -> None:
    prefix = f"{registry.host}/o{uuid.uuid4().hex[:8]}"
    with RegistryClient() as client:
        push_layout_to_registry(project / "origin/oci", client, {"nvcr.io": prefix})
    lockfiles = [str(project / "lockfiles" / f"{n}.lock.yaml") for n in NAMES]
    result = CliRunner().invoke(main, ["mirror", *lockfiles, "--mirror", f"nvcr.io={prefix}",
                                       "--to", str(project / "site"), "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["destination"] == f"oci-layout {project / 'site'}"
    assert report["lockFlags"] == [f"--oci-layout {project / 'site'}"]
    run_lock(profiles(project), project / "site-locks", oci_layout=str(project / "site"),
             hf_cache=str(project / "origin/hf"))
    assert_same_stack(project, "site-locks")


# -- to a registry --


def test_mirror_to_registry_prefix_then_lock_with_mirror(project: Path, registry: RunningRegistry,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("stackpin.lock.oci.client.BLOB_CHUNK", 4096)  # the larger layers in several PATCHes
    send, patches = RegistryClient._request, []

    def request(self: RegistryClient, method: str, *args: object, **kwargs: object) -> object:
        patches.extend([kwargs["headers"]["Content-Range"]] if method == "PATCH" else [])  # type: ignore[index]
        return send(self, method, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(RegistryClient, "_request", request)
    site = f"{registry.host}/site{uuid.uuid4().hex[:8]}"
    report = mirror_locks(locks(project), site, from_oci_layout=project / "origin/oci")
    assert "4096-8191" in patches and len(patches) > sum(i.blobs_copied for i in report.images)
    assert report.lock_flags == [f"--mirror nvcr.io={site}"]
    runtime = locks(project)[0].resolved.images["runtime"]
    assert f"{site}/nvidia/ai-dynamo/vllm-runtime:1.6.1@{runtime.digest}" in {i.to for i in report.images}
    run_lock(profiles(project), project / "site-locks", mirrors={"nvcr.io": site},
             hf_cache=str(project / "origin/hf"))
    assert_same_stack(project, "site-locks")
    skopeo_reads_every_pin(site, locks(project), project, ["--tls-verify=false"])


def spy(monkeypatch: pytest.MonkeyPatch, method: str) -> list[object]:
    """The answers RegistryClient.<method> gave."""
    real, answers = getattr(RegistryClient, method), []

    def wrapped(self: RegistryClient, *args: object, **kwargs: object) -> object:
        answers.append(real(self, *args, **kwargs))
        return answers[-1]

    monkeypatch.setattr(RegistryClient, method, wrapped)
    return answers


def test_registry_to_registry_mounts_within_one_and_streams_across(project: Path, registry: RunningRegistry,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    origin = f"{registry.host}/o{uuid.uuid4().hex[:8]}"
    with RegistryClient() as client:
        push_layout_to_registry(project / "origin/oci", client, {"nvcr.io": origin})
    mounts, pulls, pushes = (spy(monkeypatch, m) for m in ("mount_blob", "pull_blob_to", "push_blob_from"))
    # The same registry: blobs are mounted from the origin's repositories, no bytes sent.
    same = f"{registry.host}/m{uuid.uuid4().hex[:8]}"
    mounted = mirror_locks(locks(project), same, mirrors={"nvcr.io": origin})
    blobs = sum(i.blobs_copied for i in mounted.images)
    assert blobs and mounts == [True] * blobs and not pulls and not pushes
    # Named another way (localhost, not 127.0.0.1), it is another registry to the client: each blob is
    # pulled (streamed into a file, checked) and pushed in chunks.
    port = registry.host.rsplit(":", 1)[1]
    other = f"localhost:{port}/s{uuid.uuid4().hex[:8]}"
    streamed = mirror_locks(locks(project), other, mirrors={"nvcr.io": origin})
    assert [i.blobs_copied for i in streamed.images] == [i.blobs_copied for i in mounted.images]
    assert len(mounts) == blobs and len(pulls) == blobs and pushes == [True] * blobs
    for site in (same, other):
        lockdir = f"locks-{uuid.uuid4().hex[:6]}"
        run_lock(profiles(project), project / lockdir, mirrors={"nvcr.io": site}, hf_cache=str(project / "origin/hf"))
        assert_same_stack(project, lockdir)


# -- interrupted and resumed --


def test_a_failed_fetch_loses_nothing_and_a_rerun_finishes(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = project / "site"
    pull = LayoutSource.pull
    calls = []

    def fail_third(self: LayoutSource, ref, digest, size, dest, on_bytes) -> None:  # type: ignore[no-untyped-def]
        calls.append(digest)
        if len(calls) == 3:
            dest.write_bytes(b"half a blob")  # as a transfer cut off midway leaves it
            raise ResolveError(f"blob {digest}: connection reset")
        pull(self, ref, digest, size, dest, on_bytes)

    monkeypatch.setattr(LayoutSource, "pull", fail_third)
    with pytest.raises(ResolveError, match="connection reset"):
        mirror_locks(locks(project), f"oci:{site}", from_oci_layout=project / "origin/oci")
    assert blob_count(site) == 2  # what was copied stays; the cut-off blob is only a .part file
    assert [p.name for p in (site / "blobs/sha256").iterdir() if p.name.startswith(".")] == [
        f".{calls[2].removeprefix('sha256:')}.part"]
    monkeypatch.setattr(LayoutSource, "pull", pull)
    report = mirror_locks(locks(project), f"oci:{site}", from_oci_layout=project / "origin/oci")
    assert sum(i.blobs_present for i in report.images) == 2
    assert not [p for p in (site / "blobs/sha256").iterdir() if p.name.startswith(".")]
    run_lock(profiles(project), project / "site-locks", oci_layout=str(site), hf_cache=str(project / "origin/hf"))
    assert_same_stack(project, "site-locks")


KILLER = """
import os, signal, sys
from pathlib import Path
from stackpin.lock import localcopy
from stackpin.cli.main import main
copy, calls = localcopy.copy_verified, []
def copy_then_die(source, dest, name, size, what, on_bytes=None):
    calls.append(name)
    if len(calls) == int(os.environ["KILL_AT"]):
        localcopy.part_of(dest).write_bytes(source.read_bytes()[: size // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    copy(source, dest, name, size, what, on_bytes)
localcopy.copy_verified = copy_then_die
import stackpin.lock.mirror as m
m.copy_verified = copy_then_die
sys.argv = ["stackpin", *sys.argv[1:]]
main()
"""


def test_killed_with_sigkill_then_rerun(project: Path) -> None:
    site = project / "site"
    args = ["mirror", *(str(project / "lockfiles" / f"{n}.lock.yaml") for n in NAMES),
            "--from-oci-layout", str(project / "origin/oci"), "--to", f"oci:{site}"]
    env = {**os.environ, "KILL_AT": "5", "PYTHONPATH": str(ROOT)}
    killed = subprocess.run([sys.executable, "-c", KILLER, *args], env=env, capture_output=True, timeout=120,
                            check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    assert blob_count(site) >= 4
    names_before = json.loads((site / "index.json").read_text())["manifests"] if (site / "index.json").exists() else []
    assert len(names_before) < 3  # not every tree was named: the run stopped inside one
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "already there" in result.output
    run_lock(profiles(project), project / "site-locks", oci_layout=str(site), hf_cache=str(project / "origin/hf"))
    assert_same_stack(project, "site-locks")
    skopeo_reads_every_pin(f"oci:{site}:", locks(project), project)


# -- refused --


def test_tampered_layer_at_a_layout_source_is_refused(project: Path) -> None:
    runtime = LayoutResolver(project / "origin/oci").resolve(locks(project)[0].resolved.images["runtime"].reference)
    manifest = json.loads(LayoutResolver(project / "origin/oci").read_blob(runtime.platforms["linux/arm64"]))
    layer = manifest["layers"][0]["digest"]
    path = project / "origin/oci/blobs/sha256" / layer.removeprefix("sha256:")
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=f"blob {layer}.*content has digest"):
        mirror_locks(locks(project), f"oci:{project}/site", from_oci_layout=project / "origin/oci")
    assert not (project / f"site/blobs/sha256/{layer.removeprefix('sha256:')}").exists()
    assert not [p for p in (project / "site/blobs/sha256").iterdir() if p.name.startswith(".")]


def test_a_fifo_in_place_of_a_layer_is_refused_not_waited_on(project: Path) -> None:
    runtime = LayoutResolver(project / "origin/oci").resolve(locks(project)[0].resolved.images["runtime"].reference)
    manifest = json.loads(LayoutResolver(project / "origin/oci").read_blob(runtime.platforms["linux/arm64"]))
    layer = manifest["layers"][0]["digest"]
    path = project / "origin/oci/blobs/sha256" / layer.removeprefix("sha256:")
    path.unlink()
    os.mkfifo(path)  # opened for a plain read, it blocks until a writer comes: for ever
    # The layout reader finds no blob file there (a FIFO is not one); the copy would refuse it in any case.
    with pytest.raises(ResolveError, match=f"blob {layer} .*(is missing|is not a regular file)"):
        mirror_locks(locks(project), f"oci:{project}/site", from_oci_layout=project / "origin/oci")
    assert not (project / f"site/blobs/sha256/{layer.removeprefix('sha256:')}").exists()


def test_tampered_layer_in_a_source_registry_is_refused(project: Path, registry: RunningRegistry) -> None:
    origin = f"{registry.host}/t{uuid.uuid4().hex[:8]}"
    with RegistryClient() as client:
        push_layout_to_registry(project / "origin/oci", client, {"nvcr.io": origin})
    # A layer no other test's image shares (the stand-in names its image and platform).
    runtime = LayoutResolver(project / "origin/oci").resolve(locks(project)[1].resolved.images["runtime"].reference)
    manifest = json.loads(LayoutResolver(project / "origin/oci").read_blob(runtime.platforms["linux/amd64"]))
    layer = manifest["layers"][0]["digest"]
    stored = registry.blob_path(layer)
    before = stored.read_bytes()
    stored.write_bytes(before.replace(b"stand-in", b"stand-ex"))
    try:
        result = CliRunner().invoke(main, ["mirror", str(project / "lockfiles/gb300-launch.lock.yaml"),
                                           "--mirror", f"nvcr.io={origin}", "--to", f"oci:{project}/site"])
    finally:
        stored.write_bytes(before)
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and f"blob {layer}" in result.output and "expected" in result.output
    assert not (project / f"site/blobs/sha256/{layer.removeprefix('sha256:')}").exists()


def test_bad_input_is_one_line_and_exit_2(project: Path) -> None:
    lock = str(project / "lockfiles/gb300-tuned.lock.yaml")
    runner = CliRunner()
    cases = {
        "nope.lock.yaml: no such file": ["mirror", "nope.lock.yaml", "--to", "oci:x"],
        "not an OCI image layout": ["mirror", lock, "--from-oci-layout", str(project / "profiles"), "--to", "oci:x"],
        "the destination (--to) must be reachable": ["mirror", lock, "--from-oci-layout", str(project / "origin/oci"),
                                                     "--to", "127.0.0.1:9/site"],
        "neither empty nor an OCI image layout": ["mirror", lock, "--from-oci-layout", str(project / "origin/oci"),
                                                  "--to", str(project / "profiles")],
        "--hf-cache and --hf-to go together": ["mirror", lock, "--hf-cache", str(project / "origin/hf"),
                                               "--to", "oci:x"],
        "registry 127.0.0.1:8: connection refused; needed for 127.0.0.1:8/origin/nvidia/ai-dynamo/": [
            "mirror", lock, "--mirror", "nvcr.io=127.0.0.1:8/origin", "--to", f"oci:{project}/nothing"],
        "read the origin through a mirror this machine reaches": [
            "mirror", lock, "--mirror", "nvcr.io=127.0.0.1:8/origin", "--to", f"oci:{project}/nothing"],
    }
    for expected, args in cases.items():
        result = runner.invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        assert expected in result.output and result.output.count("\n") == 1, result.output
    assert not (project / "nothing").exists()  # a source that fails leaves no destination behind
    assert sorted(p.name for p in (project / "profiles").iterdir()) == sorted(
        p.name for p in (ROOT / "profiles/deepseek-v4.1-flash").iterdir())  # nothing written into it


def test_one_tag_pinned_twice_is_refused(project: Path) -> None:
    [tuned, launch] = locks(project)
    # The tuned stack's runtime digest under the launch stack's tag: two digests for one name.
    moved = msgspec.structs.replace(tuned.resolved.images["runtime"],
                                    reference=launch.resolved.images["runtime"].reference)
    clash = msgspec.structs.replace(tuned, resolved=msgspec.structs.replace(tuned.resolved, images={"runtime": moved}))
    with pytest.raises(StackpinError, match="one destination tag cannot hold both"):
        lock_pins([clash, launch])


def test_destinations() -> None:
    assert parse_destination("oci:site") == ("layout", "site")
    assert parse_destination("./registry.local") == ("layout", "./registry.local")
    assert parse_destination("mirror") == ("layout", "mirror")
    assert parse_destination("registry.site:5000/nvcr") == ("registry", "registry.site:5000/nvcr")
    assert parse_destination("localhost:5000") == ("registry", "localhost:5000")
    with pytest.raises(StackpinError, match="without a scheme"):
        parse_destination("https://registry.site/x")


# -- the model --


def write_snapshot(cache: Path, model_id: str, commit: str, files: dict[str, bytes], lfs: set[str]) -> None:
    """A Hugging Face cache as huggingface_hub writes one: blobs named by sha256 (Git LFS files) or Git blob id."""
    repo = cache / f"models--{model_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        etag = (hashlib.sha256(data).hexdigest() if name in lfs
                else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())
        (repo / "blobs" / etag).write_bytes(data)
        link = repo / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(repo / "blobs" / etag, link.parent))
    write_hf_cache_ref(cache, model_id, "main", commit)


def test_model_snapshot_copied_and_checked(project: Path) -> None:
    [tuned, _] = locks(project)
    model = tuned.resolved.model
    source = project / "hf-real"
    files = {"config.json": b'{"architectures": ["X"]}\n', "weights/model-00001.safetensors": os.urandom(70_000)}
    write_snapshot(source, model.id, model.revision, files, lfs={"weights/model-00001.safetensors"})
    report = mirror_locks([tuned], f"oci:{project}/site", from_oci_layout=project / "origin/oci",
                          hf_cache=source, hf_to=project / "hf-site")
    [copied] = report.models
    assert (copied.files, copied.blobs_copied, copied.unverified, copied.stand_in) == (2, 2, 0, False)
    snapshot = project / f"hf-site/models--{model.id.replace('/', '--')}/snapshots/{model.revision}"
    assert {str(p.relative_to(snapshot)): p.read_bytes() for p in snapshot.rglob("*") if p.is_file()} == files
    assert all(p.is_symlink() for p in snapshot.rglob("*") if not p.is_dir())
    run_lock(profiles(project)[:1], project / "site-locks", oci_layout=str(project / "site"),
             hf_cache=str(project / "hf-site"))
    assert read_lock(project / "site-locks/gb300-tuned.lock.yaml").stack_digest == tuned.stack_digest

    again = mirror_locks([tuned], f"oci:{project}/site", from_oci_layout=project / "origin/oci",
                         hf_cache=source, hf_to=project / "hf-site")
    assert (again.models[0].blobs_copied, again.models[0].blobs_present) == (0, 2)
    # A blob whose bytes are not its name is refused, and not copied.
    blob = next((source / f"models--{model.id.replace('/', '--')}/blobs").iterdir())
    blob.write_bytes(blob.read_bytes() + b"x")
    with pytest.raises(IntegrityError, match=f"blob {blob.name}"):
        mirror_locks([tuned], f"oci:{project}/site", from_oci_layout=project / "origin/oci",
                     hf_cache=source, hf_to=project / "hf-other")
    assert not (project / f"hf-other/models--{model.id.replace('/', '--')}/blobs/{blob.name}").exists()


def test_no_snapshot_of_a_real_model_is_refused(project: Path) -> None:
    [tuned, _] = locks(project)
    source = project / "hf-empty"
    write_hf_cache_ref(source, tuned.resolved.model.id, "main", tuned.resolved.model.revision)
    with pytest.raises(ResolveError, match="has no snapshot"):
        mirror_locks([tuned], f"oci:{project}/site", from_oci_layout=project / "origin/oci",
                     hf_cache=source, hf_to=project / "hf-site")


def test_parts_are_swept_and_present_needs_the_size(tmp_path: Path) -> None:
    (tmp_path / ".abc.part").write_bytes(b"x")
    (tmp_path / "abc").write_bytes(b"xyz")
    assert localcopy.sweep_parts(tmp_path) == 1
    assert localcopy.present(tmp_path / "abc", 3) and not localcopy.present(tmp_path / "abc", 4)
