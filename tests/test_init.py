"""`stackpin init`: a starter profile, the bases it extends and the JSON Schema from the packaged examples,
written where a user outside the repository works; it validates, locks (online from a mirror, then
offline from its pins) and renders there. It never replaces a file, and the built wheel carries all of it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from click.shell_completion import ShellComplete
from click.testing import CliRunner, Result
from packaging.version import Version

from stackpin.cli.main import main
from stackpin.examples.packaged import SCHEMA_FILE, example_names
from stackpin.profile.loader import load_profile
from tests.lockkit import fill_mirror

ROOT = Path(__file__).resolve().parent.parent
MODELINE = "# yaml-language-server: $schema=stackprofile.schema.json"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def away(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory outside the repository, as a user who installed stackpin has."""
    home = tmp_path / "work"
    home.mkdir()
    monkeypatch.chdir(home)
    return home


def listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_default_writes_the_tuned_gb300_stack_and_the_schema_and_it_validates(away: Path) -> None:
    done = invoke("init")
    assert done.exit_code == 0, done.output
    assert sorted(p.name for p in away.iterdir()) == ["gb300-tuned.yaml", SCHEMA_FILE]
    lines = (away / "gb300-tuned.yaml").read_text(encoding="utf-8").splitlines()
    assert lines[0] == MODELINE and "stackpin init" in lines[1] and "gb300-tuned" in lines[1]
    assert json.loads((away / SCHEMA_FILE).read_text()) == json.loads(invoke("schema").stdout)
    assert "wrote gb300-tuned.yaml" in done.stdout and "next: stackpin validate ." in done.stdout
    checked = invoke("validate", ".")
    assert checked.exit_code == 0, checked.output
    assert "gb300-tuned" in checked.stdout


@pytest.mark.parametrize("example", example_names())
def test_every_example_validates_where_it_is_written(away: Path, example: str) -> None:
    done = invoke("init", "stack", "--from", example, "--name", "mine")
    assert done.exit_code == 0, done.output
    loaded = load_profile(away / "stack" / "mine.yaml")
    assert loaded.profile.name == "mine"
    # Its bases are beside it as _NAME.yaml and nothing it reads lies outside the directory.
    assert all(source.resolve().parent == (away / "stack").resolve() for source in loaded.sources)
    assert sorted(s.name for s in loaded.sources[1:]) == sorted(p.name for p in (away / "stack").glob("_*.yaml"))
    for written in (away / "stack").glob("*.yaml"):
        assert written.read_text(encoding="utf-8").startswith(MODELINE + "\n"), written.name
    checked = invoke("validate", "stack")
    assert checked.exit_code == 0, checked.output


def test_a_starter_locks_offline_from_its_pins_and_renders(away: Path) -> None:
    done = invoke("init", "stacks", "--from", "gb200-tuned", "--name", "rack7")
    assert done.exit_code == 0, done.output
    assert sorted(p.name for p in (away / "stacks").iterdir()) == ["_gb300-tuned.yaml", "rack7.yaml", SCHEMA_FILE]
    fill_mirror(away / "mirror", [load_profile(away / "stacks" / "rack7.yaml")])
    locked = invoke("lock", "stacks", "--oci-layout", "mirror/oci", "--hf-cache", "mirror/hf", "-o", "json")
    assert locked.exit_code == 0, locked.output
    [entry] = json.loads(locked.stdout)["locked"]  # the starter alone: its base is read through extends:
    assert entry["name"] == "rack7" and entry["lockfile"] == "lockfiles/rack7.lock.yaml"
    shutil.rmtree(away / "mirror")  # offline: nothing but the pins the lockfile holds
    again = invoke("lock", "stacks", "--offline", "-o", "json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["locked"] == [entry]
    assert invoke("lock", "--check", "stacks").exit_code == 0
    rendered = invoke("render", "--lockdir", "lockfiles", "--output-dir", "manifests")
    assert rendered.exit_code == 0, rendered.output
    assert (away / "manifests" / "rack7").is_dir()
    checked = invoke("validate", "--manifests", "manifests")
    assert checked.exit_code == 0, checked.output


@pytest.mark.parametrize("taken", ["rack7.yaml", "_gb300-tuned.yaml", SCHEMA_FILE])
def test_an_existing_file_is_refused_and_nothing_is_written(away: Path, taken: str) -> None:
    (away / "stacks").mkdir()
    (away / "stacks" / taken).write_text("mine\n")
    before = listing(away / "stacks")
    done = invoke("init", "stacks", "--from", "gb200-tuned", "--name", "rack7")
    assert done.exit_code == 2
    assert done.stderr.splitlines() == [f"error: stacks/{taken}: exists; stackpin init never replaces a file "
                                        "(move it away or init another directory); nothing written"]
    assert listing(away / "stacks") == before


def test_a_link_is_an_existing_file_even_dangling(away: Path) -> None:
    (away / "gb300-tuned.yaml").symlink_to(away / "nowhere.yaml")
    done = invoke("init")
    assert done.exit_code == 2 and "gb300-tuned.yaml: exists" in done.stderr
    assert sorted(p.name for p in away.iterdir()) == ["gb300-tuned.yaml"] and not (away / "nowhere.yaml").exists()


def test_a_second_starter_keeps_the_bases_and_schema_it_shares(away: Path) -> None:
    assert invoke("init", "stacks", "--from", "gb200-tuned").exit_code == 0
    base = away / "stacks" / "_gb300-tuned.yaml"
    inode = base.stat().st_ino
    done = invoke("init", "stacks", "--from", "vera-rubin-tuned", "-o", "json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"example": "vera-rubin-tuned", "name": "vera-rubin-tuned", "files": [
        {"path": "stacks/vera-rubin-tuned.yaml", "role": "profile", "action": "wrote"},
        {"path": "stacks/_gb300-tuned.yaml", "role": "base", "action": "kept"},
        {"path": f"stacks/{SCHEMA_FILE}", "role": "schema", "action": "kept"}]}
    assert base.stat().st_ino == inode  # kept, not rewritten
    assert invoke("validate", "stacks").exit_code == 0
    # The same starter again is refused: init never replaces a profile, even with its own text.
    again = invoke("init", "stacks", "--from", "gb200-tuned")
    assert again.exit_code == 2 and "stacks/gb200-tuned.yaml: exists" in again.stderr


def test_a_failed_write_takes_back_what_it_wrote(away: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stackpin.examples.starter as starter

    real = starter.create_exclusive

    def full_disk(path: Path, data: str | bytes) -> None:
        if path.name == SCHEMA_FILE:
            raise OSError(28, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(starter, "create_exclusive", full_disk)
    done = invoke("init", "stacks", "--from", "gb200-tuned")
    assert done.exit_code == 2
    assert done.stderr.splitlines() == [f"error: stacks/{SCHEMA_FILE}: No space left on device"]
    assert not (away / "stacks").exists()  # the directory init created goes too


@pytest.mark.parametrize(("args", "message"), [
    (("init", "--from", "gb301-tuned"), "no example profile 'gb301-tuned' (one of: b200-disagg, "),
    (("init", "--name", "Rack_7"), "'Rack_7' is not a stack name"),
    (("init", "--name", "a" * 41), "40 characters at most"),
    (("init", "--list", "--from", "gb300-tuned"), "--list takes no DIR, --from or --name"),
    (("init", "missing/stacks"), "missing/stacks: cannot create: missing is not a directory"),
    (("init", "file.yaml"), "file.yaml: is not a directory"),
])
def test_bad_input_is_one_line_and_exit_2_writing_nothing(away: Path, args: tuple[str, ...], message: str) -> None:
    (away / "file.yaml").write_text("x: 1\n")
    done = invoke(*args)
    assert done.exit_code == 2
    assert message in done.stderr and "Traceback" not in done.output
    assert sorted(p.name for p in away.iterdir()) == ["file.yaml"]


@pytest.mark.parametrize("name", ["yes", "123", "1e3", "null"])
def test_a_name_yaml_1_1_would_read_as_another_type_is_quoted(away: Path, name: str) -> None:
    assert invoke("init", "--name", name).exit_code == 0
    text = (away / f"{name}.yaml").read_text(encoding="utf-8")
    assert f'  name: "{name}"\n' in text
    assert yaml.safe_load(text)["metadata"]["name"] == name
    assert load_profile(away / f"{name}.yaml").profile.name == name


def test_list_names_every_example_once_with_a_line_each() -> None:
    done = invoke("init", "--list")
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == example_names()
    assert [line.split()[1] for line in lines if "(default)" in line] == ["(default)"]
    tuned = next(line for line in lines if line.startswith("gb300-tuned "))
    assert "gb300-nvl72, 72 GPUs, colocated: worker 18x TP4 EP4; Dynamo 1.6.1, vLLM 0.31.0" in tuned
    as_json = json.loads(invoke("init", "--list", "-o", "json").stdout)
    assert [e["name"] for e in as_json] == example_names()
    assert [e["name"] for e in as_json if e["default"]] == ["gb300-tuned"]
    by_name = {e["name"]: e for e in as_json}
    assert by_name["vera-rubin-disagg-wide-ep"]["extends"] == ["gb300-disagg-wide-ep", "gb300-tuned"]
    assert "vera-rubin-nvl72" in by_name["vera-rubin-disagg-wide-ep"]["description"]


def test_shell_completion_offers_the_examples() -> None:
    complete = ShellComplete(main, {}, "stackpin", "_STACKPIN_COMPLETE")
    offered = [item.value for item in complete.get_completions(["init", "--from"], "gb3")]
    assert offered == ["gb300-disagg-wide-ep", "gb300-launch", "gb300-tuned"]


# --- the built wheel -----------------------------------------------------------------------------

# pyproject.toml's SPDX `license` string needs setuptools 77 (the test extra installs it); the wheel is
# built with the environment's own setuptools, no network (--no-build-isolation).
SETUPTOOLS = Version(version("setuptools"))
needs_setuptools = pytest.mark.skipif(
    SETUPTOOLS < Version("77") and not os.environ.get("CI"),
    reason=f"setuptools {SETUPTOOLS} cannot build this pyproject.toml (77+): pip install -e '.[test]'")


@needs_setuptools
def test_the_built_wheel_carries_the_examples_and_init_runs_from_it(tmp_path: Path) -> None:
    # Built from a copy of what the wheel is made of, so that the build's own build/ and *.egg-info
    # never land in the checkout other tests read.
    source = tmp_path / "source"
    shutil.copytree(ROOT / "stackpin", source / "stackpin", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "NOTICE"):
        shutil.copy2(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "dist").glob("stackpin-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"stackpin/examples/{p.relative_to(ROOT).as_posix()}"
               for p in [*(ROOT / "profiles").rglob("*.yaml"), ROOT / "schema" / "stackprofile.schema.json"]}
    assert shipped <= names, sorted(shipped - names)
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)

    def stackpin(*args: str) -> subprocess.CompletedProcess[str]:
        # -P and PYTHONPATH the unpacked wheel alone: neither the checkout nor the working directory is read.
        code = ("import stackpin, sys; from pathlib import Path\n"
                f"assert Path(stackpin.__file__).is_relative_to({str(site)!r}), stackpin.__file__\n"
                "from stackpin.cli.main import main; main(prog_name='stackpin')")
        env = {**os.environ, "PYTHONPATH": str(site)}
        return subprocess.run([sys.executable, "-P", "-c", code, *args], cwd=user, env=env, capture_output=True,
                              text=True, timeout=120)

    user = tmp_path / "user"
    user.mkdir()
    done = stackpin("init", "stacks", "--from", "vera-rubin-disagg-wide-ep")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (user / "stacks").iterdir()) == [
        "_gb300-disagg-wide-ep.yaml", "_gb300-tuned.yaml", SCHEMA_FILE, "vera-rubin-disagg-wide-ep.yaml"]
    checked = stackpin("validate", "stacks")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "vera-rubin-disagg-wide-ep" in checked.stdout
