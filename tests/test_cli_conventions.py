"""Conventions users know from kubectl and helm: -o selects the format everywhere, --output-dir for
render's directory, --out for a single file, results on stdout and diagnostics on stderr, and bad
input named in one line per problem across every file given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from stackpin.cli.main import main
from tests.helpers import PROFILES_DIR, ROOT, apply, base_doc, write_profile
from tests.lockkit import lock_paths

TUNED = PROFILES_DIR / "gb300-tuned.yaml"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_render_output_selects_a_format_and_output_dir_the_directory(tmp_path: Path) -> None:
    lockdir = tmp_path / "lockfiles"
    lock_paths(lockdir, [TUNED])
    out = tmp_path / "manifests"
    result = invoke("render", "--lockdir", str(lockdir), "--output-dir", str(out), "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    [stack] = data["stacks"]
    assert stack["name"] == "gb300-tuned" and stack["files"] == sorted(p.name for p in (out / "gb300-tuned").iterdir())
    assert not (tmp_path / "json").exists() and not Path("json").exists()
    check = invoke("render", "--check", "--lockdir", str(lockdir), "--output-dir", str(out), "-o", "yaml")
    assert check.exit_code == 0, check.output
    assert yaml.safe_load(check.stdout) == {"outputDir": str(out), "current": True, "drift": []}


def test_render_dash_o_with_a_directory_is_a_usage_error_not_a_new_directory(tmp_path: Path) -> None:
    result = invoke("render", "--lockdir", str(tmp_path), "-o", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert "Invalid value for '-o' / '--output'" in result.stderr
    assert not (tmp_path / "out").exists()


def test_render_check_drift_is_json_on_stdout_and_exit_1(tmp_path: Path) -> None:
    lockdir = tmp_path / "lockfiles"
    lock_paths(lockdir, [TUNED])
    out = tmp_path / "manifests"
    assert invoke("render", "--lockdir", str(lockdir), "--output-dir", str(out)).exit_code == 0
    (out / "gb300-tuned" / "kustomization.yaml").unlink()
    result = invoke("render", "--check", "--lockdir", str(lockdir), "--output-dir", str(out), "-o", "json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["current"] is False
    assert data["drift"] == [{"path": str(out / "gb300-tuned" / "kustomization.yaml"), "status": "missing"}]
    assert "differ from a fresh render" in result.stderr


def test_lock_check_has_json_output(tmp_path: Path) -> None:
    lockdir = tmp_path / "lockfiles"
    result = invoke("lock", "--check", "--lockdir", str(lockdir), "-o", "json", str(TUNED))
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    lockfile = str(lockdir / "gb300-tuned.lock.yaml")
    assert data == {"current": False,
                    "lockfiles": [{"profile": str(TUNED), "lockfile": lockfile, "status": "missing", "detail": ""}]}
    lock_paths(lockdir, [TUNED])
    again = invoke("lock", "--check", "--lockdir", str(lockdir), "-o", "json", str(TUNED))
    assert again.exit_code == 0 and json.loads(again.stdout)["current"] is True


def test_validate_manifests_takes_several_paths(tmp_path: Path) -> None:
    a, b = ROOT / "manifests" / "gb300-tuned", ROOT / "manifests" / "gb300-disagg-wide-ep"
    result = invoke("validate", "--manifests", str(a), str(b))
    assert result.exit_code == 0, result.output
    broken = tmp_path / "broken.yaml"
    dgd = a / "dynamographdeployment-dsv41-flash.yaml"
    broken.write_text(dgd.read_text().replace("replicas: 18", "replicas: eighteen"))
    result = invoke("validate", "--manifests", str(a), str(broken), "-o", "json")
    assert result.exit_code == 1  # the second path is checked as manifests, not taken as a profile
    [error] = json.loads(result.stdout)["errors"]
    assert "broken.yaml" in json.dumps(error) and "replicas" in json.dumps(error)


def test_validate_given_a_lockfile_says_so() -> None:
    lockfile = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"
    result = invoke("validate", str(lockfile))
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "this is a lockfile (StackLock), not a profile" in lines[0]
    assert "stackpin lock --check" in lines[0] and lines[0].startswith(f"error: {lockfile}:")


def test_lock_reports_every_bad_file_not_only_the_first(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = write_profile(tmp_path / "a", apply(base_doc(), {"spec.placement.placement": "sideways"}))
    two = write_profile(tmp_path / "b", apply(base_doc(), {"spec.cudaGraphs.bogus": 1}))
    result = invoke("lock", "--lockdir", str(tmp_path / "lockfiles"), str(one), str(two))
    assert result.exit_code == 2
    assert any(str(one) in line for line in result.stderr.splitlines())
    assert any(str(two) in line and "unknown field" in line for line in result.stderr.splitlines())
    assert not (tmp_path / "lockfiles").exists()


def test_user_data_in_findings_is_text_not_markup(tmp_path: Path) -> None:
    """rich markup in a value or a path must print literally (it used to crash or vanish)."""
    folder = tmp_path / "odd[" / "]dir"  # a path that holds `[/]`
    folder.mkdir(parents=True)
    doc = apply(base_doc(), {"spec.kernels.attention": "[/]", "spec.kernels.moe": "[bold red]x"})
    path = write_profile(folder, doc)
    result = invoke("validate", str(path))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1
    assert "'[/]'" in result.stdout and "[bold red]x" in result.stdout
    assert "odd[/]dir" in result.stdout.replace("\n", "")


def test_color_follows_the_flag_and_no_color() -> None:
    """--color always|never|auto, and $NO_COLOR (https://no-color.org) switching auto off; piped output
    is plain unless colour is asked for."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    profile = str(root / "profiles" / "deepseek-v4.1-flash" / "gb300-tuned.yaml")

    def run(*flags: str, no_color: bool = False) -> str:
        env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
        if no_color:
            env["NO_COLOR"] = "1"
        done = subprocess.run([sys.executable, "-m", "stackpin", *flags, "validate", profile], cwd=root, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "\x1b[" in run("--color", "always")
    assert "\x1b[" not in run("--color", "never")
    assert "\x1b[" not in run()  # auto, and not a terminal
    assert "\x1b[" not in run("--color", "auto", no_color=True)
    assert "\x1b[" in run("--color", "always", no_color=True)  # asked for outright: the flag wins


def test_errors_under_o_json_are_json_on_stdout_too() -> None:
    from click.testing import CliRunner

    from stackpin.cli.main import main

    for fmt, load in (("json", json.loads), ("yaml", yaml.safe_load)):
        done = CliRunner().invoke(main, ["render", "no-such.lock.yaml", "-o", fmt])
        assert done.exit_code == 2
        assert load(done.stdout) == {"error": {"exitCode": 2, "problems": ["no-such.lock.yaml: no such file"]}}
        assert "error: no-such.lock.yaml: no such file" in done.stderr  # and the line for a person


def test_every_command_has_examples_that_use_its_own_options() -> None:
    import shlex

    import click

    from stackpin.cli.examples import EXAMPLES
    from stackpin.cli.main import all_commands, main

    def leaves(group: dict[str, click.Command], path: tuple[str, ...] = ()) -> dict[str, click.Command]:
        out: dict[str, click.Command] = {}
        for name, command in group.items():
            if isinstance(command, click.Group):
                out |= leaves(command.commands, (*path, name))
            else:
                out[" ".join((*path, name))] = command
        return out

    commands = leaves(all_commands())
    assert sorted(EXAMPLES) == sorted(commands)  # every command, and no example of a command that is gone
    for name, command in commands.items():
        options = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
        help_text = CliRunner().invoke(main, [*name.split(), "--help"]).output
        for example in EXAMPLES[name]:
            assert example in help_text, (name, example)
            words = shlex.split(example.split("|")[0].split("#")[0].split(">")[0])
            assert words[:1 + len(name.split())] == ["stackpin", *name.split()], example
            used = {w.split("=")[0] for w in words if w.startswith("-")}
            assert used <= options, (name, used - options)
            # An example runs as shown: it gives every option the command requires.
            required = {p.opts[0] for p in command.params if isinstance(p, click.Option) and p.required}
            assert all(set(p.opts) & used for p in command.params if isinstance(p, click.Option) and p.required), (
                name, example, required)


@pytest.mark.parametrize("args", [["history", "dsv41-flash"], ["validate", "profiles", "-o", "json"], ["rules"]])
def test_a_reader_that_goes_away_is_not_an_error(args: list[str]) -> None:
    """`stackpin ... | head`: when nobody reads stdout any more, the command stops quietly, as click stops
    every command (exit 1), never with `error: Broken pipe` (history said so) or a traceback."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "stackpin", *args], cwd=ROOT, stdout=write_end,
                            stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    os.close(read_end)  # the reader is gone before the command writes
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1 and stderr == ""


def test_out_dash_is_stdout_where_the_file_is_text_and_refused_where_it_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--out -` prints a text file (a trace, a report, rendered objects) on stdout, the command's report on
    stderr, as `tar -f -` would; where the file is no text for a pipe (a PNG, an archive, a bench result beside
    its tables) it is a usage error. Never a file called `-`."""
    monkeypatch.chdir(tmp_path)
    trace = invoke("trace", "gen", "--sessions", "2", "--seed", "1", "--out", "-")
    assert trace.exit_code == 0, trace.output
    invoke("trace", "gen", "--sessions", "2", "--seed", "1", "--out", "t.jsonl")
    assert trace.stdout == (tmp_path / "t.jsonl").read_text(encoding="utf-8")  # the file's bytes, nothing else
    assert trace.stderr.startswith("stdout: 2 sessions, ")
    as_json = invoke("trace", "gen", "--sessions", "2", "--seed", "1", "--out", "-", "-o", "json")
    assert as_json.stdout == trace.stdout and json.loads(as_json.stderr)["file"] == "-"
    job = invoke("bench", "job", "--lock", str(ROOT / "lockfiles" / "gb300-tuned.lock.yaml"), "--endpoint",
                 "http://frontend:8000", "--trace", "t.jsonl", "--pods", "2", "--image",
                 "registry.example.com/stackpin:0.1.0", "--out", "-")
    assert job.exit_code == 0, job.output
    assert yaml.safe_load_all(job.stdout) and "kind: Job" in job.stdout
    for args in (["bench", "run", "--endpoint", "http://x", "--trace", "t.jsonl", "--lock", "l", "--out", "-"],
                 ["bench", "plot", "r.json", "--out", "-"], ["bench", "merge", "r.json", "--out", "-"]):
        refused = invoke(*args)
        assert refused.exit_code == 2, (args, refused.output)
        assert "Invalid value for '--out': '-' (stdout) is not taken here: give a path" in refused.stderr, args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]
