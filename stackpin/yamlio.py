"""YAML in and out: loading that remembers where every value came from, canonical dumping.

Loading composes the node graph (which carries marks) and builds plain Python values alongside a
map from field path (a tuple of keys and indexes) to the file position, so errors found later, by
pydantic or by a validation rule, can still point at `file:line:col`.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

import yaml

from stackpin.errors import InputError, Location, Problem

FieldPath = tuple[str | int, ...]


class Positions:
    """Field path -> Location for one loaded document (falls back to the nearest known parent)."""

    def __init__(self, file: str, marks: dict[FieldPath, tuple[int, int]]) -> None:
        self.file = file
        self._marks = marks

    def locate(self, path: FieldPath) -> Location:
        path = tuple(path)
        while path and path not in self._marks:
            path = path[:-1]
        line, col = self._marks.get(path, (1, 1))
        return Location(self.file, line, col)


# Values built, aliases expanded: far above any profile, far below what an alias bomb expands to.
MAX_NODES = 100_000
MAX_INPUT_BYTES = 4 * 1024 * 1024  # profiles and locks are KBs; a rendered manifest file well under 1 MB
# Integers beyond 64 bits are no sane setting and overflow float arithmetic later.
MAX_INT = 2**63


def _build(node: yaml.Node, path: FieldPath, marks: dict[FieldPath, tuple[int, int]],
           loader: yaml.SafeLoader, file: str) -> Any:
    marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if len(marks) > MAX_NODES:
        raise InputError([Problem(Location(file, *marks[path]), "", f"invalid YAML: more than {MAX_NODES} "
                                  "values once aliases are expanded")])
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise InputError([Problem(Location(file, key_node.start_mark.line + 1,
                                                   key_node.start_mark.column + 1), "",
                                          "YAML merge keys (<<) are not supported; use extends:")])
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                key = str(key)
            if key in out:
                raise InputError([Problem(Location(file, key_node.start_mark.line + 1,
                                                   key_node.start_mark.column + 1),
                                          ".".join(map(str, path + (key,))), "duplicate key")])
            out[key] = _build(value_node, path + (key,), marks, loader, file)
            # Point a key's errors at the key itself, where editors put the cursor.
            marks[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), marks, loader, file) for i, item in enumerate(node.value)]
    value = loader.construct_object(node, deep=True)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MAX_INT:
        raise InputError([Problem(Location(file, *marks[path]), ".".join(map(str, path)),
                                  "integer out of range (more than 64 bits)")])
    return value


def read_regular(path: Path, limit: int, follow: bool = True) -> bytes:
    """The bytes of a regular file, at most `limit` of them: a FIFO or a device is refused, never read (it
    would block or never end, and its size says nothing); with `follow=False` a symbolic link is refused too
    (OSError ELOOP). OSError (strerror set) otherwise; errno 0 for "not a regular file" and "larger than"."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(0, "not a regular file")
        # Sized by what fstat says (one read for most files), bounded by `limit` whatever the file does.
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(limit + 1 - total, max(info.st_size - total + 1, 1 << 16)))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > limit:
        raise OSError(0, f"larger than {limit} bytes")
    return b"".join(chunks)


def load_yaml(path: Path, display: str | None = None) -> tuple[Any, Positions]:
    """Load one YAML document from `path`; bad input raises InputError with file:line:col."""
    file = display or str(path)
    try:
        # A regular file only (a FIFO or /dev/zero would block or never end; its size says nothing), read
        # with a byte limit, before a parser spends seconds and gigabytes on it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(21, "Is a directory")
            if not stat.S_ISREG(info.st_mode):
                raise InputError([Problem(Location(file), "", "is not a regular file, expected a YAML file")])
            if info.st_size > MAX_INPUT_BYTES:
                raise InputError([Problem(Location(file), "", f"is {info.st_size:,} bytes; stackpin reads YAML files "
                                          f"of at most {MAX_INPUT_BYTES:,} bytes (a profile is a few KB)")])
            with os.fdopen(os.dup(fd), "rb") as fh:
                raw = fh.read(MAX_INPUT_BYTES + 1)
        finally:
            os.close(fd)
        if len(raw) > MAX_INPUT_BYTES:
            raise InputError([Problem(Location(file), "", f"is more than {MAX_INPUT_BYTES:,} bytes; stackpin reads "
                                      "YAML files of at most that (a profile is a few KB)")])
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise InputError([Problem(Location(file), "", "no such file")]) from None
    except IsADirectoryError:
        raise InputError([Problem(Location(file), "", "is a directory, expected a YAML file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError([Problem(Location(file), "", f"cannot read: {exc}")]) from None
    return parse_yaml(text, file)


# The one choice of YAML loader: libyaml's safe loader where PyYAML was built with it (it parses ~10x
# faster than the Python parser and gives the same nodes and marks), else PyYAML's. A base chosen at run
# time is opaque to mypy, hence Any.
SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_data(text: str | bytes) -> Any:
    """Plain data from one YAML document, no positions or limits: stackpin's own files, text it just
    dumped, or a cheap first look at a file that `load_yaml` reads properly. Raises yaml.YAMLError."""
    return yaml.load(text, Loader=SAFE_LOADER)


def _printable(text: str, file: str) -> None:
    """PyYAML's check for unprintable characters (NUL, ...), as a located one-line problem."""
    try:
        yaml.reader.Reader(text)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - text.rfind("\n", 0, exc.position)
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise InputError([Problem(Location(file, line, col), "", f"invalid YAML: unacceptable character "
                                  f"#x{char:04x}: {exc.reason}")]) from None


@contextmanager
def _parsing(text: str, file: str) -> Iterator[Any]:
    """A loader over `text` whose errors become one located InputError each."""
    _printable(text, file)
    loader = SAFE_LOADER(text)
    try:
        yield loader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        reason = exc.problem or exc.context or "invalid YAML"
        raise InputError([Problem(Location(file, line, col), "", f"invalid YAML: {reason}")]) from None
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        raise InputError([Problem(Location(file), "", f"invalid YAML: {exc}")]) from None
    finally:
        loader.dispose()


def parse_yaml(text: str, file: str) -> tuple[Any, Positions]:
    with _parsing(text, file) as loader:
        node = loader.get_single_node()
        if node is None:
            return None, Positions(file, {})
        marks: dict[FieldPath, tuple[int, int]] = {}
        data = _build(node, (), marks, loader, file)
        return data, Positions(file, marks)


def parse_yaml_all(text: str, file: str) -> list[tuple[Any, Positions]]:
    """Every document of a multi-document stream (`---`), each as `parse_yaml` builds one: positions kept,
    merge keys and duplicate keys refused, MAX_NODES counted over the whole stream."""
    docs: list[tuple[Any, Positions]] = []
    total = 0
    with _parsing(text, file) as loader:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            marks: dict[FieldPath, tuple[int, int]] = {}
            docs.append((_build(node, (), marks, loader, file), Positions(file, marks)))
            total += len(marks)
            if total > MAX_NODES:
                raise InputError([Problem(Location(file), "", f"invalid YAML: more than {MAX_NODES} values")])
    return docs


class _CanonicalDumper(yaml.SafeDumper):
    """Block style, no aliases, stable string quoting: the same data always gives the same bytes.

    PyYAML's own emitter, not libyaml's: the two write different bytes for some values (trailing
    line breaks, characters beyond the BMP, complex keys), and output must not depend on how PyYAML
    was built on a machine."""

    def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002 - overrides yaml's BaseRepresenter method
        return True

    # PyYAML's analysis of a scalar (which styles can write it) depends on its text and allow_unicode only, and
    # its character-by-character loop is a quarter of a dump. A render repeats texts (keys; the attestation
    # script, 9 KB, in every stack's ConfigMap): each is analysed once per process.
    _analyses: ClassVar[dict[tuple[str, bool], yaml.emitter.ScalarAnalysis]] = {}

    def analyze_scalar(self, scalar: str) -> yaml.emitter.ScalarAnalysis:
        key = (scalar, bool(self.allow_unicode))
        found = self._analyses.get(key)
        if found is None:
            found = _multiline_ascii_analysis(scalar) or super().analyze_scalar(scalar)
            # Bounded: a long-running caller dumps unbounded text (50,000 entries of at most 64 KiB).
            if len(scalar) <= 65_536 and len(self._analyses) < 50_000:
                self._analyses[key] = found
        return found

    # PyYAML's writers go character by character too. For the texts a render writes they come down to one
    # write each; any other text takes PyYAML's own path. tests/test_yamlio.py compares the bytes with
    # PyYAML's writers alone.

    def write_plain(self, text: str, split: bool = True) -> None:
        # No line break, and too short to reach the width where PyYAML would fold at a space.
        if (self.encoding or not text or _BREAKS.search(text)
                or (split and self.column + 1 + len(text) > self.best_width)):
            super().write_plain(text, split)
            return
        if self.root_context:
            self.open_ended = True
        if not self.whitespace:
            text = " " + text
        self.whitespace = self.indention = False
        self.column += len(text)
        self.stream.write(text)

    def write_literal(self, text: str) -> None:
        # `|` block whose only line breaks are \n: each non-empty line indented, then a closing break if
        # the text has none (what PyYAML's loop writes, line by line).
        if self.encoding or self.best_line_break != "\n" or _OTHER_BLOCK_BREAKS.search(text):
            super().write_literal(text)
            return
        hints = self.determine_block_hints(text)
        self.write_indicator("|" + hints, True)
        if hints[-1:] == "+":
            self.open_ended = True
        self.write_line_break()
        indent = " " * (self.indent or 0)
        body = "\n".join(indent + line if line else "" for line in text.split("\n"))
        if not text.endswith("\n"):
            body += "\n"
        self.stream.write(body)
        self.line += body.count("\n")
        self.column = 0
        self.whitespace = self.indention = True


_BREAKS = re.compile("[\n\x85\u2028\u2029]")
_OTHER_BLOCK_BREAKS = re.compile("[\x85\u2028\u2029]")
_PRINTABLE_ASCII_LINES = re.compile("[\n\x20-\x7e]*")


def _multiline_ascii_analysis(scalar: str) -> yaml.emitter.ScalarAnalysis | None:
    """PyYAML's analysis of a text of printable ASCII lines (a script: the attestation ConfigMap's 9 KB), from
    string searches instead of its loop over every character; None for any other text. With a line break no
    plain style is allowed whatever the indicators, so only the whitespace around breaks decides."""
    if "\n" not in scalar or not _PRINTABLE_ASCII_LINES.fullmatch(scalar):
        return None
    break_space, space_break = "\n " in scalar, " \n" in scalar
    return yaml.emitter.ScalarAnalysis(
        scalar=scalar, empty=False, multiline=True, allow_flow_plain=False, allow_block_plain=False,
        allow_single_quoted=not (break_space or space_break), allow_double_quoted=True,
        allow_block=not (scalar.endswith(" ") or space_break))


# Line breaks YAML knows besides \n: PyYAML writes them raw in plain or single-quoted scalars,
# where a reader folds them, so such strings are emitted double-quoted (escaped) instead.
_OTHER_BREAKS = ("\x85", "\u2028", "\u2029", "\r")


# Plain scalars that some YAML reader takes for something other than a string. PyYAML's resolver
# (what the emitter consults) knows most YAML 1.1 forms but not all of them, nor YAML 1.2's, nor what
# Go's yaml.v2 (sigs.k8s.io/yaml: kubectl, Argo CD, Flux) reads: `value: y` is a string to PyYAML and
# `true` to the Kubernetes API server. Such strings are written quoted; every other string stays plain.
#
# Words, in any letter case (YAML 1.1 bools and nulls; `<<` is the merge key, `=` the value key):
_WORDS = re.compile(r"(?i:y|n|yes|no|true|false|on|off|null|~|<<|=|)")
# Numbers. Go's reader removes every `_` before parsing a scalar that starts with a digit or a sign,
# and YAML 1.1 allows `_` between digits, so they are matched with underscores removed. Covers ints
# in every base and spelling (`0755`, `08`, `0x1F`, `0o17`, `0b101`, `1_000`), floats (`1.`, `.5`,
# `1e3`, `+.5E-3`), infinities and NaNs, and YAML 1.1 sexagesimals (`1:20`, `-1:20.5`).
_NUMBER = re.compile(
    r"[-+]?(?:0[bB][01]+|0[oO][0-7]+|0[xX][0-9a-fA-F]+"
    r"|(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[0-9]+(?::[0-5]?[0-9])+(?:\.[0-9]*)?"
    r"|\.(?i:inf|nan))")
# YAML 1.1 timestamps, with Go's looser one-digit fields (`2001-1-2`, `2001-12-14 21:59:43.10 -5`).
_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"
    r"(?:(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}(?:\.[0-9]*)?"
    r"(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::?[0-9]{2})?))?)?")


def ambiguous_scalar(value: str) -> bool:
    """Whether `value`, written plain, could be read by a YAML 1.1 or 1.2 reader (PyYAML, Go's
    yaml.v2/v3, libyaml-based, js-yaml, SnakeYAML) as a bool, number, null, timestamp or merge key."""
    if _WORDS.fullmatch(value) or _TIMESTAMP.fullmatch(value):
        return True
    return value[:1] in "0123456789+-." and _NUMBER.fullmatch(value.replace("_", "")) is not None


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if any(b in value for b in _OTHER_BREAKS):
        style: str | None = '"'
    elif "\n" in value:
        style = "|"
    else:
        # Single-quoted, as PyYAML quotes the ambiguous strings it knows of itself (`'true'`).
        style = "'" if ambiguous_scalar(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_CanonicalDumper.add_representer(str, _str_representer)
# Parsed profiles hold enum members (StrEnum): one reaching a manifest is written as its value,
# byte for byte what the plain string gives.
_CanonicalDumper.add_multi_representer(StrEnum, lambda dumper, value: _str_representer(dumper, value.value))


def dump_yaml(data: Any, sort_keys: bool = True) -> str:
    return yaml.dump(data, Dumper=_CanonicalDumper, sort_keys=sort_keys, default_flow_style=False,
                     allow_unicode=True, width=4096)


def dump_yaml_all(docs: list[Any], sort_keys: bool = True) -> str:
    return yaml.dump_all(docs, Dumper=_CanonicalDumper, sort_keys=sort_keys,
                         default_flow_style=False, allow_unicode=True, width=4096)


def _write_failed(path: Path, exc: OSError) -> InputError:
    reason = exc.strerror or type(exc).__name__
    return InputError([Problem(Location(str(path)), "", f"cannot write: {reason}")])


# --- writing a set of files ------------------------------------------------------------------------
#
# A set of files (every lockfile of a run, every manifest of a render) is switched in as one: all are
# staged as temp files beside their targets, a journal naming them is written, then each is renamed
# into place. A failure during the switch puts back what was there (hard-link backups); a process
# killed during the switch leaves the journal, and the next writer or reader of that directory
# finishes the switch (every staged file was complete before the journal existed). An exclusive lock
# on the directory keeps two runs from switching or recovering at once.

_JOURNAL = ".stackpin-journal.json"
_TMP = ".stackpin-tmp"


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    """An exclusive flock on the directory itself: nothing is left behind in it."""
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _recover(root: Path) -> None:
    """Finish a switch a killed process left half done; sweep temp files and backups it left."""
    journal = root / _JOURNAL
    if journal.exists():
        try:
            entries = json.loads(journal.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            entries = []  # torn before it was complete: nothing was renamed yet (written before any rename)
        for entry in entries:
            tmp, target = root / entry["tmp"], root / entry["target"]
            if tmp.exists():
                os.replace(tmp, target)
        journal.unlink()
    # Temp files and backups of killed runs; `.NAME.yaml.XXXX.tmp` is what stackpin 0.1 left.
    for pattern in (f"*{_TMP}", f"*{_TMP}.bak", ".*.yaml.*.tmp"):
        for stale in root.rglob(pattern):
            stale.unlink(missing_ok=True)


def recover_writes(root: Path) -> None:
    """Bring a directory stackpin writes to a consistent state before reading it (see above)."""
    if not root.is_dir():
        return
    leftovers = (next(root.rglob(pattern), None) for pattern in (_JOURNAL, f"*{_TMP}*", ".*.yaml.*.tmp"))
    if any(found is not None for found in leftovers):
        with _locked(root):
            _recover(root)


def refuse_links_below(root: Path, path: Path) -> None:
    """Refuse `path` when a directory between `root` (which may itself be a link: the user named it) and
    `path` is a symbolic link: a write must never leave the tree it was told to write (issue 18: a linked
    history/<namespace>/<deployment> made promote write into /etc)."""
    root, path = Path(root), Path(path)
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return
    current = root
    for part in parts[:-1]:
        current = current / part
        if current.is_symlink():
            raise InputError([Problem(Location(str(current)), "", f"is a symbolic link; stackpin writes only "
                                      f"inside {root}, never through a link out of it")])


def write_output(path: Path, data: str | bytes) -> None:
    """The one file a command was told to write (`--out FILE`), all or nothing. Its directory must exist:
    a mistyped path is an error naming it, never a tree of directories created outside what was named."""
    path = Path(path)
    if not path.parent.is_dir():
        raise InputError([Problem(Location(str(path)), "", f"cannot write: {path.parent} is not a directory")])
    write_files({path: data})


def write_files(files: Mapping[Path, str | bytes], root: Path | None = None) -> None:
    """Write several files as one set: all of them or none (see above). `root` is the directory the
    set lives in (default: the targets' common parent); its journal and lock live there. A failure
    (read-only, disk full, a directory where a file should be) leaves every existing file as it was
    and raises one line."""
    if not files:
        return
    paths = [Path(p) for p in files]
    root = Path(root) if root is not None else Path(os.path.commonpath([p.parent for p in paths]))
    for path in paths:
        refuse_links_below(root, path)
    with _locked(root):
        _recover(root)
        staged = _stage(files)
        try:
            _switch(staged, root)
        finally:
            for tmp, _ in staged:
                tmp.unlink(missing_ok=True)


def _staging_file(path: Path) -> tuple[int, str]:
    """A new file beside `path`, created exclusively and readable by the owner only (what tempfile.mkstemp
    gives; not imported for it: with shutil and random it is 3 ms of a 140 ms render). (fd, name)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        name = str(path.parent / f".{path.name}.{os.urandom(6).hex()}{_TMP}")
        try:
            return os.open(name, flags, 0o600), name
        except FileExistsError:
            continue
    raise FileExistsError(17, "no unused staging file name", str(path.parent))


def _stage(files: Mapping[Path, str | bytes]) -> list[tuple[Path, Path]]:
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            path = Path(path)
            if path.is_dir():  # found now, not halfway through the switch
                raise _write_failed(path, IsADirectoryError(21, "Is a directory"))
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, name = _staging_file(path)
            except OSError as exc:
                raise _write_failed(path, exc) from None
            staged.append((Path(name), path))
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data.encode("utf-8") if isinstance(data, str) else data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.chmod(name, 0o644)
            except OSError as exc:
                raise _write_failed(path, exc) from None
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    return staged


def _switch(staged: list[tuple[Path, Path]], root: Path) -> None:
    journal = root / _JOURNAL
    def rel(path: Path) -> str:
        return Path(os.path.relpath(path, root)).as_posix()

    entries = [{"tmp": rel(tmp), "target": rel(path)} for tmp, path in staged]
    try:
        _write_journal(journal, entries)
    except OSError as exc:
        raise _write_failed(journal, exc) from None
    done: list[tuple[Path, Path | None]] = []  # (target, backup of what it held, if anything)
    current = root
    try:
        for tmp, current in staged:
            path = current
            backup = None
            if path.exists():
                backup = tmp.with_name(tmp.name + ".bak")
                os.link(path, backup)
            try:
                os.replace(tmp, path)
            except OSError:
                if backup is not None:
                    backup.unlink()
                raise
            done.append((path, backup))
    except OSError as exc:
        for target, backup in reversed(done):  # put back what was there
            if backup is not None:
                os.replace(backup, target)
            else:
                target.unlink(missing_ok=True)
        journal.unlink(missing_ok=True)
        raise _write_failed(current, exc) from None
    journal.unlink()
    for _, backup in done:
        if backup is not None:
            backup.unlink(missing_ok=True)


def _write_journal(journal: Path, entries: list[dict[str, str]]) -> None:
    tmp = journal.with_name(journal.name + _TMP)
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(entries, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, journal)  # the journal appears whole or not at all
    _fsync_dir(journal.parent)


def write_atomic(path: Path, data: str | bytes) -> None:
    """One file, via a temp file beside it and a rename: a failed run never leaves half a file."""
    path = Path(path)
    if path.is_dir():
        raise _write_failed(path, IsADirectoryError(21, "Is a directory"))
    staged = _stage({path: data})
    try:
        os.replace(staged[0][0], path)
    except OSError as exc:
        raise _write_failed(path, exc) from None
    finally:
        staged[0][0].unlink(missing_ok=True)


# --- files created once --------------------------------------------------------------------------
#
# A record that is written once and never replaced (a deployment's revision) is created whole or not
# at all under a name nobody holds yet: staged and fsynced beside its target as above, then hard-linked
# to its name (link, unlike rename, fails when the name exists), then the staged name is removed.


@contextmanager
def lock_directory(root: Path) -> Iterator[None]:
    """Hold the exclusive lock on `root` that `write_files` takes (created if missing) while the block
    runs. Never call `write_files` or `recover_writes` on the same `root` inside the block: flock is
    per open file, so the inner call would wait for the outer one forever."""
    with _locked(root):
        yield


def create_exclusive(path: Path, data: str | bytes) -> None:
    """Create `path` whole or not at all, never replacing a file: FileExistsError when the name is taken.
    A process killed before the link leaves only a staged temp file (see `sweep_temp_files`)."""
    path = Path(path)
    [(tmp, _)] = _stage({path: data})
    try:
        os.link(tmp, path)
        _fsync_dir(path.parent)
    except FileExistsError:
        raise
    except OSError as exc:
        raise _write_failed(path, exc) from None
    finally:
        tmp.unlink(missing_ok=True)


def sweep_temp_files(directory: Path) -> None:
    """Remove what killed writers left staged in `directory` (not below it). Call it holding the
    directory's lock (`lock_directory`): a live writer's staged file is never swept from under it."""
    for stale in directory.glob(f".*{_TMP}"):
        stale.unlink(missing_ok=True)
