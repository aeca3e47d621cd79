"""Writing a set of files (every lockfile of a run, every manifest of a render) is all or nothing:
a failure puts back what was there, a killed process's switch is finished by the next run, and the
temp files it left are swept. Exercised on the real filesystem and with a real killed process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from stackpin.cli.main import main
from stackpin.errors import InputError
from stackpin.profile.loader import load_profile
from stackpin.yamlio import recover_writes, write_files
from tests.helpers import PROFILES_DIR, ROOT
from tests.lockkit import fill_mirror, lock_paths


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_blocked_target_leaves_every_file_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("old a\n")
    (tmp_path / "b.yaml").mkdir()  # a directory where the second file should go
    before = _files(tmp_path)
    with pytest.raises(InputError, match=r"b\.yaml: cannot write: Is a directory"):
        write_files({tmp_path / "a.yaml": "new a\n", tmp_path / "b.yaml": "new b\n"}, root=tmp_path)
    assert _files(tmp_path) == before


def test_a_failure_halfway_through_the_switch_puts_back_what_was_there(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.yaml").write_text("old a\n")
    (tmp_path / "b.yaml").write_text("old b\n")
    before = _files(tmp_path)
    real_replace = os.replace

    def failing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst).name == "b.yaml" and ".stackpin-tmp" in str(src):
            raise PermissionError(13, "Permission denied", str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(InputError, match="b.yaml: cannot write: Permission denied"):
        write_files({tmp_path / "a.yaml": "new a\n", tmp_path / "b.yaml": "new b\n",
                     tmp_path / "c.yaml": "new c\n"}, root=tmp_path)
    assert _files(tmp_path) == before  # a.yaml is old again, c.yaml never appeared, no temp files


def test_a_killed_switch_is_finished_by_the_next_reader(tmp_path: Path) -> None:
    """A real process killed (os._exit, as kill -9 leaves it: no cleanup) after the first rename."""
    (tmp_path / "a.yaml").write_text("old a\n")
    (tmp_path / "b.yaml").write_text("old b\n")
    script = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from stackpin import yamlio
        real, calls = os.replace, []
        def dying(src, dst):
            real(src, dst)
            if ".stackpin-tmp" in str(src) and not str(dst).endswith(".json"):
                calls.append(dst)
                if len(calls) == 1:
                    os._exit(9)
        os.replace = dying
        root = Path({str(tmp_path)!r})
        yamlio.write_files({{root / "a.yaml": "new a\\n", root / "b.yaml": "new b\\n"}}, root=root)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 9, proc.stderr
    half = _files(tmp_path)
    assert half["a.yaml"] == b"new a\n" and half["b.yaml"] == b"old b\n"  # a mix, with the journal naming it
    assert ".stackpin-journal.json" in half
    recover_writes(tmp_path)
    assert _files(tmp_path) == {"a.yaml": b"new a\n", "b.yaml": b"new b\n"}


def test_stale_temp_files_are_swept(tmp_path: Path) -> None:
    (tmp_path / ".gb300-tuned.lock.yaml.abc123.tmp").write_text("left by stackpin 0.1")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / ".k.yaml.q1.stackpin-tmp").write_text("left by a killed run")
    (tmp_path / "mine.txt").write_text("a user's file")
    write_files({tmp_path / "a.yaml": "a\n"}, root=tmp_path)
    assert _files(tmp_path) == {"a.yaml": b"a\n", "mine.txt": b"a user's file"}


def test_lock_with_one_lockfile_blocked_rewrites_none(tmp_path: Path) -> None:
    lockdir = tmp_path / "lockfiles"
    profiles = [PROFILES_DIR / "gb300-tuned.yaml", PROFILES_DIR / "gb300-launch.yaml"]
    lock_paths(lockdir, profiles[:1])
    (lockdir / "gb300-launch.lock.yaml").mkdir()  # written second: the first would already be rewritten
    tuned = lockdir / "gb300-tuned.lock.yaml"
    tuned.write_text(tuned.read_text() + "# edited by hand: a rewrite would drop this line\n")
    before = _files(lockdir)
    layout, hf = fill_mirror(tmp_path / "mirror", [load_profile(p) for p in profiles])
    result = CliRunner().invoke(main, ["lock", "--lockdir", str(lockdir), "--oci-layout", str(layout.path),
                                       "--hf-cache", str(hf.path), *map(str, profiles)])
    assert result.exit_code == 2, result.output
    assert "gb300-launch.lock.yaml: cannot write: Is a directory" in result.stderr
    assert _files(lockdir) == before
