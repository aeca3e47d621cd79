"""Registry credentials as docker, crane and skopeo find them, against real registries on loopback
(tests/registry.py): credential helpers that are real executables on PATH speaking docker's protocol,
credHelpers over credsStore, identity tokens through the token service's OAuth2 grant, podman's
auth.json, Basic auth (htpasswd), and the one-line error of an unreachable registry."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from devkit.process import free_port
from stackpin.cli.main import main
from stackpin.errors import RegistryUnreachable, ResolveError
from stackpin.lock.oci.client import RegistryClient
from stackpin.lock.oci.credentials import RegistryCredentials, auth_files
from stackpin.lock.oci.reference import ImageRef
from stackpin.lock.ocilayout import LayoutWriter, push_layout_to_registry
from stackpin.lock.resolvers import RegistrySource, write_hf_cache_ref
from tests.registry import AuthRegistry, BasicRegistry
from tests.test_lock import COMMIT, IMAGE, MODEL, write_profile
from tests.test_oci import push_image

ROOT = Path(__file__).resolve().parent.parent

# A helper: the real protocol on stdin and stdout. It logs its argv and stdin (one JSON line per run)
# to $HELPER_LOG, then does what $HELPER_MODE_<NAME> says.
HELPER = """\
import json, os, sys, time
name = os.path.basename(sys.argv[0]).removeprefix("docker-credential-").replace("-", "_").upper()
server = sys.stdin.read()
with open(os.environ["HELPER_LOG"], "a") as log:
    log.write(json.dumps({"helper": name, "argv": sys.argv[1:], "stdin": server}) + "\\n")
mode = os.environ.get("HELPER_MODE_" + name, "ok")
sys.stderr.write("helper stderr: secret-in-stderr\\n")
if mode == "ok":
    user, secret = os.environ["HELPER_USER"], os.environ["HELPER_SECRET"]
    print(json.dumps({"ServerURL": server, "Username": user, "Secret": secret}))
elif mode == "token":
    print(json.dumps({"ServerURL": server, "Username": "<token>", "Secret": os.environ["HELPER_SECRET"]}))
elif mode == "missing":
    print("credentials not found in native keychain")
    sys.exit(1)
elif mode == "fail":
    print("secret-in-stdout")
    sys.exit(3)
elif mode == "garbage":
    print("this is not JSON")
elif mode == "huge":
    sys.stdout.write("x" * (8 << 20))
elif mode == "hang":
    import subprocess
    with open(os.environ["HELPER_LOG"] + ".helper-pid", "w") as f:
        f.write(str(os.getpid()))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(os.environ["HELPER_LOG"] + ".pid", "w") as f:
        f.write(str(child.pid))
    time.sleep(120)
"""


@pytest.fixture
def helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A bin directory on PATH holding docker-credential-{alpha,beta,gamma}; yields the log they write."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("alpha", "beta", "gamma"):
        path = bin_dir / f"docker-credential-{name}"
        path.write_text(f"#!{sys.executable} -S\n{HELPER}")
        path.chmod(0o755)
    log = tmp_path / "helper.log"
    log.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HELPER_LOG", str(log))
    for var in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "DOCKER_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    yield log


def runs(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def write_json(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def private_image(auth_registry: AuthRegistry, tmp_path: Path) -> tuple[str, str]:
    """(reference, digest) of an image pushed to the token registry with inline credentials."""
    config = auth_registry.docker_config(write_json(tmp_path / "push/x.json", {}).parent)
    ref = f"{auth_registry.host}/private/app{uuid.uuid4().hex[:6]}:1"
    with RegistryClient(backoff=0.01, docker_config=config) as client:
        digest, _ = push_image(client, ref, ["linux/amd64"])
    return ref, digest


# --- credential helpers ----------------------------------------------------------------------------


def test_helper_protocol_server_url_on_stdin(helpers: Path, auth_registry: AuthRegistry, private_image: tuple[str, str],
                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ref, digest = private_image
    monkeypatch.setenv("HELPER_USER", auth_registry.username)
    monkeypatch.setenv("HELPER_SECRET", auth_registry.password)
    config = write_json(tmp_path / "docker/config.json", {"credHelpers": {auth_registry.host: "alpha"}})
    with RegistryClient(backoff=0.01, docker_config=config) as client:
        assert runs(helpers) == [], "no helper runs before a registry asks"
        assert client.resolve(ref).digest == digest
        client.resolve(ref)
    assert runs(helpers) == [{"helper": "ALPHA", "argv": ["get"], "stdin": auth_registry.host}], \
        "one run per registry, `get` with the server URL on stdin"


def test_cred_helpers_win_over_creds_store_which_wins_over_inline(
        helpers: Path, auth_registry: AuthRegistry, basic_registry: BasicRegistry, private_image: tuple[str, str],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ref, digest = private_image
    monkeypatch.setenv("HELPER_USER", auth_registry.username)
    monkeypatch.setenv("HELPER_SECRET", auth_registry.password)
    monkeypatch.setenv("HELPER_MODE_ALPHA", "fail")  # the default store: must not be asked for this registry
    config = write_json(tmp_path / "docker/config.json", {
        "credsStore": "alpha",
        "credHelpers": {f"https://{auth_registry.host}/v1/": "beta"},  # URL keys name the registry too
        "auths": {auth_registry.host: {"auth": basic(auth_registry.username, "wrong")}},
    })
    with RegistryClient(backoff=0.01, docker_config=config) as client:
        assert client.resolve(ref).digest == digest
    assert [r["helper"] for r in runs(helpers)] == ["BETA"]
    # Another registry has no credHelpers entry: credsStore answers for it, and the inline entry beside it
    # is not used (docker's configfile.GetAuthConfig: a helper, when configured, answers alone).
    monkeypatch.setenv("HELPER_MODE_ALPHA", "ok")
    monkeypatch.setenv("HELPER_USER", basic_registry.username)
    monkeypatch.setenv("HELPER_SECRET", basic_registry.password)
    doc = json.loads(config.read_text())
    doc["auths"][basic_registry.host] = {"auth": basic(basic_registry.username, "wrong")}
    write_json(config, doc)
    with RegistryClient(backoff=0.01, docker_config=config) as client:
        push_image(client, f"{basic_registry.host}/stack/stored:1", ["linux/amd64"])
    assert runs(helpers)[-1] == {"helper": "ALPHA", "argv": ["get"], "stdin": basic_registry.host}


@pytest.mark.usefixtures("helpers")
def test_helper_identity_token_uses_the_oauth2_refresh_grant(
        auth_registry: AuthRegistry, private_image: tuple[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ref, digest = private_image
    monkeypatch.setenv("HELPER_MODE_GAMMA", "token")  # Username "<token>": Secret is an identity token
    monkeypatch.setenv("HELPER_SECRET", auth_registry.identity_token)
    config = write_json(tmp_path / "docker/config.json", {"credsStore": "gamma"})
    before = len(auth_registry.oauth_requests)
    with RegistryClient(backoff=0.01, docker_config=config) as client:
        assert client.resolve(ref).digest == digest
    [form] = auth_registry.oauth_requests[before:]
    assert form == {"grant_type": "refresh_token", "refresh_token": auth_registry.identity_token,
                    "client_id": "stackpin", "service": "stackpin-test-registry",
                    "scope": f"repository:{ImageRef.parse(ref).repository}:pull"}


def test_helper_with_nothing_passes_to_the_next_file(helpers: Path, auth_registry: AuthRegistry,
                                                     private_image: tuple[str, str], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    ref, digest = private_image
    monkeypatch.setenv("HELPER_MODE_ALPHA", "missing")  # docker's "credentials not found" answer
    runtime = tmp_path / "run"
    write_json(runtime / "containers/auth.json", {"credHelpers": {auth_registry.host: "alpha"}})
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    docker = auth_registry.docker_config(write_json(tmp_path / "d/x", {}).parent)
    monkeypatch.setenv("DOCKER_CONFIG", str(docker.parent))
    with RegistryClient(backoff=0.01) as client:
        assert client.resolve(ref).digest == digest
    assert [r["helper"] for r in runs(helpers)] == ["ALPHA"]


@pytest.mark.usefixtures("helpers")
@pytest.mark.parametrize(("mode", "message"), [
    ("fail", r"credential helper docker-credential-alpha \(credHelpers in .*config.json\) failed \(exit status 3\) "
             r"for registry 127\.0\.0\.1:\d+ \(hint: log in again, or run `echo 127\.0\.0\.1:\d+ \| "
             r"docker-credential-alpha get` to see what it says\)"),
    ("garbage", r'docker-credential-alpha .* answered something that is not \{"ServerURL", "Username", "Secret"\} '
                r"JSON for registry"),
    ("huge", r"docker-credential-alpha .* answered more than 65536 bytes for registry"),
])
def test_helper_failures_are_one_line_without_its_output(
        auth_registry: AuthRegistry, private_image: tuple[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, mode: str, message: str) -> None:
    ref, _ = private_image
    monkeypatch.setenv("HELPER_MODE_ALPHA", mode)
    config = write_json(tmp_path / "docker/config.json", {"credHelpers": {auth_registry.host: "alpha"}})
    started = time.monotonic()
    with RegistryClient(backoff=0.01, docker_config=config) as client, pytest.raises(ResolveError) as caught:
        client.resolve(ref)
    assert time.monotonic() - started < 10
    [line] = caught.value.lines()
    assert re.search(message, line), line
    assert "secret-in" not in line and "this is not JSON" not in line


def test_helper_that_hangs_is_killed_with_what_it_started(helpers: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HELPER_MODE_ALPHA", "hang")
    config = write_json(tmp_path / "config.json", {"credsStore": "alpha"})
    creds = RegistryCredentials(auth_files(config), helper_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(ResolveError, match=r"docker-credential-alpha \(credsStore in .*\) did not answer within 1s "
                                           r"for registry quay.io$") as caught:
        creds.lookup("quay.io")
    assert caught.value.hint == ("it may be waiting for a login or a prompt; run `echo quay.io | "
                                 "docker-credential-alpha get` to see what it says")
    assert time.monotonic() - started < 5
    grandchild = int(Path(f"{helpers}.pid").read_text())
    for _ in range(100):  # killed with its group; init reaps it
        if not Path(f"/proc/{grandchild}").exists() or "Z" in _state(grandchild):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the helper's child {grandchild} outlived the deadline")
    # The failure is remembered: a second resolve of the registry does not start the helper again.
    with pytest.raises(ResolveError, match="did not answer"):
        creds.lookup("quay.io")
    assert len(runs(helpers)) == 1


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_helper_not_on_path_and_docker_hub_server_url(helpers: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    config = write_json(tmp_path / "config.json", {"credHelpers": {"nvcr.io": "no-such-helper"},
                                                   "credsStore": "alpha"})
    creds = RegistryCredentials(auth_files(config))
    with pytest.raises(ResolveError) as caught:
        creds.lookup("nvcr.io")
    assert caught.value.lines() == [
        f"credential helper docker-credential-no-such-helper (credHelpers in {config}) is not on PATH for registry "
        f"nvcr.io (hint: install docker-credential-no-such-helper, or remove its credHelpers in {config})"]
    monkeypatch.setenv("HELPER_USER", "hub-user")
    monkeypatch.setenv("HELPER_SECRET", "hub-pass")
    found = creds.lookup("docker.io", "library/nginx")
    assert found is not None and (found.username, found.password) == ("hub-user", "hub-pass")
    assert runs(helpers)[-1]["stdin"] == "https://index.docker.io/v1/", "Docker Hub under docker's key"
    write_json(config, {"credsStore": "../../bin/sh"})
    with pytest.raises(ResolveError, match=r"credsStore: '../../bin/sh' is not a helper name"):
        RegistryCredentials(auth_files(config)).lookup("nvcr.io")


# --- files: auth.json, $REGISTRY_AUTH_FILE, identitytoken, Basic -----------------------------------


def test_search_order(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"HOME": str(home), "XDG_RUNTIME_DIR": "/run/user/7", "DOCKER_CONFIG": "/etc/dock"}
    assert auth_files(env=env) == (Path("/run/user/7/containers/auth.json"),
                                   home / ".config/containers/auth.json", Path("/etc/dock/config.json"))
    assert auth_files(env={"HOME": str(home), "XDG_CONFIG_HOME": "/cfg"})[1:] == (
        Path("/cfg/containers/auth.json"), home / ".docker/config.json")
    assert auth_files(env={**env, "REGISTRY_AUTH_FILE": "/a.json"}) == (Path("/a.json"),), "skopeo reads it alone"
    assert auth_files("/x/config.json", env={**env, "REGISTRY_AUTH_FILE": "/a.json"}) == (Path("/x/config.json"),)


@pytest.mark.usefixtures("helpers")
def test_registry_auth_file_alone(auth_registry: AuthRegistry, private_image: tuple[str, str],
                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ref, digest = private_image
    authfile = write_json(tmp_path / "auth.json", {"auths": {auth_registry.host: {
        "auth": basic(auth_registry.username, auth_registry.password)}}})
    # docker's config beside it holds wrong credentials: with $REGISTRY_AUTH_FILE set it is not read.
    monkeypatch.setenv("DOCKER_CONFIG", str(write_json(tmp_path / "docker/config.json", {"auths": {
        auth_registry.host: {"auth": basic(auth_registry.username, "wrong")}}}).parent))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(authfile))
    with RegistryClient(backoff=0.01) as client:
        assert client.resolve(ref).digest == digest
    monkeypatch.delenv("REGISTRY_AUTH_FILE")
    with RegistryClient(backoff=0.01) as client, \
            pytest.raises(ResolveError, match=f"check credentials in {tmp_path}/docker/config.json$"):
        client.resolve(ref)


@pytest.mark.usefixtures("helpers")
def test_auth_json_before_docker_config_and_namespaces(auth_registry: AuthRegistry,
                                                       private_image: tuple[str, str], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ref, digest = private_image
    right = {"auth": basic(auth_registry.username, auth_registry.password)}
    wrong = {"auth": basic(auth_registry.username, "wrong")}
    config_home = tmp_path / "cfg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))  # no auth.json there: skipped
    # podman's namespaced keys: the longest match wins over the registry-wide entry.
    write_json(config_home / "containers/auth.json", {"auths": {f"{auth_registry.host}/private": right,
                                                                auth_registry.host: wrong}})
    monkeypatch.setenv("DOCKER_CONFIG", str(write_json(tmp_path / "docker/config.json",
                                                       {"auths": {auth_registry.host: wrong}}).parent))
    with RegistryClient(backoff=0.01) as client:
        assert client.resolve(ref).digest == digest
    write_json(config_home / "containers/auth.json", {"auths": {f"{auth_registry.host}/other": right,
                                                                auth_registry.host: wrong}})
    with RegistryClient(backoff=0.01) as client, \
            pytest.raises(ResolveError, match=f"check credentials in {config_home}/containers/auth.json"):
        client.resolve(ref)


def test_inline_identity_token_and_a_token_service_without_oauth2(
        auth_registry: AuthRegistry, private_image: tuple[str, str], tmp_path: Path) -> None:
    ref, digest = private_image
    config = write_json(tmp_path / "config.json", {"auths": {auth_registry.host: {
        "auth": basic("00000000-0000-0000-0000-000000000000", ""), "identitytoken": auth_registry.identity_token}}})
    before = len(auth_registry.oauth_requests)
    with RegistryClient(backoff=0.01, docker_config=config) as client:
        assert client.resolve(ref).digest == digest
    assert auth_registry.oauth_requests[before]["refresh_token"] == auth_registry.identity_token
    stale = write_json(tmp_path / "stale.json", {"auths": {auth_registry.host: {"identitytoken": "expired"}}})
    with RegistryClient(backoff=0.01, docker_config=stale) as client, \
            pytest.raises(ResolveError, match=f"not authorized .* check credentials in {stale}"):
        client.resolve(ref)
    # A token service with no OAuth2 endpoint answers the POST 404: the spec's GET follows, as crane does.
    auth_registry.oauth = False
    try:
        gets = len(auth_registry.token_requests)
        with RegistryClient(backoff=0.01, docker_config=config) as client, \
                pytest.raises(ResolveError, match="not authorized"):
            client.resolve(ref)
        assert len(auth_registry.token_requests) > gets
    finally:
        auth_registry.oauth = True


def test_basic_auth_registry(basic_registry: BasicRegistry, tmp_path: Path) -> None:
    ref = f"{basic_registry.host}/stack/basic{uuid.uuid4().hex[:6]}:1"
    authfile = write_json(tmp_path / "auth.json", {"auths": {basic_registry.host: {
        "username": basic_registry.username, "password": basic_registry.password}}})
    with RegistryClient(backoff=0.01, docker_config=authfile) as client:
        digest, _ = push_image(client, ref, ["linux/arm64"])
        assert client.resolve(ref).digest == digest
    with RegistryClient(backoff=0.01, docker_config=tmp_path / "none.json") as client:
        with pytest.raises(ResolveError) as caught:
            client.resolve(ref)
    assert caught.value.lines() == [
        f"not authorized to access stack/{ref.split('/stack/')[1].split(':')[0]} on registry {basic_registry.host}: "
        f"check credentials in {tmp_path}/none.json (hint: log in with `docker login {basic_registry.host}` or "
        f"`skopeo login {basic_registry.host}`)"]


def test_malformed_files_name_the_file_and_field(tmp_path: Path) -> None:
    for doc, field in [({"auths": {"nvcr.io": {"auth": basic("nocolon", "")[:-4]}}}, "auths.nvcr.io.auth"),
                       ({"auths": {"nvcr.io": "x"}}, "auths.nvcr.io is not an object"),
                       ({"credHelpers": ["alpha"]}, "must be objects")]:
        path = write_json(tmp_path / "c.json", doc)
        with pytest.raises(ResolveError, match=f"registry credentials {path}: .*{field}"):
            RegistryCredentials(auth_files(path)).lookup("quay.io")
    (tmp_path / "c.json").write_text("{")
    with pytest.raises(ResolveError, match="are not valid JSON"):
        RegistryCredentials(auth_files(tmp_path / "c.json")).lookup("quay.io")


def test_a_credentials_file_that_is_no_file_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO would block the read until a writer comes, /dev/zero never end, a huge file fill memory."""
    fifo, huge = tmp_path / "fifo.json", tmp_path / "huge.json"
    os.mkfifo(fifo)
    huge.write_bytes(b" " * (2 << 20))
    for path, why in ((fifo, "not a regular file"), (Path("/dev/zero"), "not a regular file"),
                      (huge, "larger than")):
        with pytest.raises(ResolveError, match=f"cannot read registry credentials {path}: {why}"):
            RegistryCredentials(auth_files(path)).lookup("quay.io")


# --- the lock, end to end ---------------------------------------------------------------------------


def _lock_project(tmp_path: Path, auth_registry: AuthRegistry) -> tuple[Path, str]:
    """A profile whose image resolves through a token-auth mirror on loopback; returns (profile, mirror)."""
    prefix = f"{auth_registry.host}/site{uuid.uuid4().hex[:6]}"
    write_profile(tmp_path / "profiles", extra=f"  mirrors:\n    nvcr.io: {prefix}\n")
    LayoutWriter(tmp_path / "oci").add_image(IMAGE, [("linux", "arm64")])
    write_hf_cache_ref(tmp_path / "hf", MODEL, "main", COMMIT)
    with RegistryClient(docker_config=auth_registry.docker_config(write_json(tmp_path / "push/x", {}).parent)) as c:
        push_layout_to_registry(tmp_path / "oci", c, {"nvcr.io": prefix})
    return tmp_path / "profiles/lock-test.yaml", prefix


def test_stackpin_lock_through_a_credential_helper(helpers: Path, auth_registry: AuthRegistry, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    profile, prefix = _lock_project(tmp_path, auth_registry)
    monkeypatch.setenv("HELPER_USER", auth_registry.username)
    monkeypatch.setenv("HELPER_SECRET", auth_registry.password)
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(write_json(tmp_path / "auth.json", {"credsStore": "beta"})))
    result = CliRunner().invoke(main, ["lock", "--lockdir", str(tmp_path / "lockfiles"), "--hf-cache",
                                       str(tmp_path / "hf"), str(profile)])
    assert result.exit_code == 0, result.output
    assert runs(helpers) == [{"helper": "BETA", "argv": ["get"], "stdin": auth_registry.host}]
    assert f"resolvedVia: mirror {prefix}" in (tmp_path / "lockfiles/lock-test.lock.yaml").read_text()
    # --docker-config still names the one file read.
    lockdir = tmp_path / "again"
    result = CliRunner().invoke(main, ["lock", "--lockdir", str(lockdir), "--hf-cache", str(tmp_path / "hf"),
                                       "--docker-config", str(auth_registry.docker_config(tmp_path / "push")),
                                       str(profile)])
    assert result.exit_code == 0, result.output
    assert len(runs(helpers)) == 1


def test_a_helper_dies_with_a_killed_stackpin(helpers: Path, auth_registry: AuthRegistry, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """kill -9 of `stackpin lock` while a helper it started hangs: the helper, in a session of its own (so that
    its group can be killed on a deadline), goes too (Linux's PR_SET_PDEATHSIG, stackpin/children.py)."""
    profile, _ = _lock_project(tmp_path, auth_registry)
    monkeypatch.setenv("HELPER_MODE_BETA", "hang")
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(write_json(tmp_path / "auth.json", {"credsStore": "beta"})))
    proc = subprocess.Popen([sys.executable, "-m", "stackpin", "lock", "--lockdir", str(tmp_path / "lockfiles"),
                             "--hf-cache", str(tmp_path / "hf"), str(profile)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid_file, child_file = Path(f"{helpers}.helper-pid"), Path(f"{helpers}.pid")  # the helper's, its child's
    try:
        deadline = time.monotonic() + 60
        while not (child_file.exists() and child_file.read_text()) and time.monotonic() < deadline:
            assert proc.poll() is None, "stackpin lock ended before its helper ran"
            time.sleep(0.05)
        helper = int(pid_file.read_text())
        assert _state(helper) != "Z", "the helper is running"
    finally:
        proc.kill()
        proc.wait()
    for _ in range(200):  # the kernel kills it; init reaps it
        if _state(helper) == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the credential helper {helper} outlived the stackpin that started it")
    # What the helper started and left is out of reach once it is gone (said in docs/lockfiles.md): the test's own.
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(child_file.read_text()), signal.SIGKILL)


@pytest.mark.usefixtures("helpers")
def test_lock_source_resolves_with_helper(auth_registry: AuthRegistry, private_image: tuple[str, str],
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ref, digest = private_image
    monkeypatch.setenv("HELPER_USER", auth_registry.username)
    monkeypatch.setenv("HELPER_SECRET", auth_registry.password)
    config = write_json(tmp_path / "config.json", {"credHelpers": {auth_registry.host: "gamma"}})
    [resolved] = RegistrySource(docker_config=str(config)).resolve_many([ImageRef.parse(ref)])
    assert resolved.digest == digest


# --- unreachable registries -------------------------------------------------------------------------


def _lock(tmp_path: Path, *args: str) -> tuple[int, str]:
    write_profile(tmp_path / "profiles")
    write_hf_cache_ref(tmp_path / "hf", MODEL, "main", COMMIT)
    result = CliRunner().invoke(main, ["lock", "--lockdir", str(tmp_path / "lockfiles"), "--hf-cache",
                                       str(tmp_path / "hf"), *args, str(tmp_path / "profiles/lock-test.yaml")])
    return result.exit_code, result.output


def test_unreachable_registry_names_it_the_reference_and_the_ways_around(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests ask no DNS server: the resolver's own error (what glibc raises for an unknown name) stands in
    # for it, and travels through httpx as a real lookup failure does.
    real = socket.getaddrinfo

    def no_such_name(host: object, *args: object, **kwargs: object) -> object:
        if host == "nvcr.io":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    code, output = _lock(tmp_path)
    assert code == 2 and "Traceback" not in output
    assert output == (
        f"error: cannot reach registry nvcr.io: name not resolved; needed for {IMAGE} (hint: try --offline to use "
        f"the pins already in {tmp_path}/lockfiles/, --mirror nvcr.io=HOST[:PORT][/PREFIX] to resolve through a "
        "mirror this machine reaches, or --oci-layout DIR to resolve from a copied OCI layout; behind a proxy, set "
        "HTTPS_PROXY)\n")
    assert not (tmp_path / "lockfiles").exists()


def test_unreachable_mirror_names_the_reference_asked(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there: connection refused
    code, output = _lock(tmp_path, "--mirror", f"nvcr.io=127.0.0.1:{port}/site")
    assert code == 2 and output.count("\n") == 1
    assert output.startswith(f"error: cannot reach registry 127.0.0.1:{port}: connection refused; needed for "
                             f"{IMAGE} via mirror 127.0.0.1:{port} (hint: try --offline")
    with RegistryClient(retries=0, docker_config=tmp_path / "none.json") as client:
        with pytest.raises(RegistryUnreachable) as caught:
            client.pull_blob((f"127.0.0.1:{port}", "a/b"), "sha256:" + "0" * 64)
    assert caught.value.registry == f"127.0.0.1:{port}"
    assert caught.value.message.endswith(f"needed for 127.0.0.1:{port}/a/b")
