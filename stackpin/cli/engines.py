"""`stackpin engines add|diff|list`: engine release catalogs (see stackpin.engines).

Registered in stackpin/cli/main.py. The library does the work and returns typed results; this module
only prints them. Heavy imports stay inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from stackpin.cli.common import OUTPUT, emit, finite, user_errors

if TYPE_CHECKING:
    from stackpin.engines.add import Added
    from stackpin.engines.diff import Change, EngineDiff, EntryDiff, SetDiff


@click.group()
def engines() -> None:
    """Engine release catalogs: the flags, choices and env vars of each vLLM, Dynamo and FlashInfer release.

    Catalogs are searched in the directories of STACKPIN_CATALOG_PATH first, then in the bundled one.
    """


@engines.command("add")
@click.argument("spec", required=False, metavar="NAME==VERSION")
@click.option("--from", "from_file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Read this wheel or sdist instead of downloading (air-gapped sites); NAME==VERSION, when "
              "given, must match it.")
@click.option("--catalog", "catalog_dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Catalog directory to write engines/<engine>-<version>.json and versions.yaml into "
              "[default: the first directory of $STACKPIN_CATALOG_PATH].")
@click.option("--index-url", metavar="URL", help="PEP 691 package index [default: $PIP_INDEX_URL or "
              "https://pypi.org/simple].")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Keep the downloaded file here and reuse it next time (checked against the index's sha256).")
@click.option("--crd", type=click.Choice(["v1alpha1", "v1beta1"]),
              help="ai-dynamo only: the DynamoGraphDeployment version its operator stores [default: from the "
              "catalog's dgd_storage: v1beta1 from Dynamo 1.5.0, v1alpha1 before].")
@OUTPUT
@user_errors
def add(spec: str | None, from_file: Path | None, catalog_dir: Path | None, index_url: str | None,
        cache_dir: Path | None, crd: str | None, output: str) -> None:
    """Add a published release (vllm==X, ai-dynamo==X, flashinfer-python==X or sglang==X) to a catalog directory.

    The package is downloaded (or read from --from FILE), never installed or imported: its Python source
    is parsed for every option string its parser accepts, the allowed values, env vars and config
    classes; its sha256 is recorded, and the version pins of its metadata go into versions.yaml.
    """
    from stackpin.engines.add import add_release, parse_spec

    if from_file is None and spec:
        project, version = parse_spec(spec)  # a bad spec is refused before anything is announced
        click.echo(f"downloading {project}=={version} ...", err=True)
    added = add_release(spec, from_file=from_file, catalog_dir=catalog_dir, index_url=index_url,
                        cache_dir=cache_dir, crd=crd)
    _print_added(added, output)


def _print_added(added: Added, output: str) -> None:
    release = added.release
    if output != "text":
        emit({"engine": release.engine, "version": release.version, "package": added.package,
              "sha256": added.sha256, "downloaded": added.downloaded, "catalogFile": str(added.catalog_file),
              "versionsFile": str(added.versions_file) if added.versions_file else None, "pin": added.pin,
              "counts": added.counts, "unresolved": list(getattr(release, "unresolved", ()))}, output)
        return
    counts = added.counts
    click.echo(f"added {release.engine} {release.version} from {added.package} "
               f"({'downloaded' if added.downloaded else 'file'})")
    click.echo(f"  sha256   {added.sha256}")
    if "registered" in counts:
        what = (f"{counts['options']} options, {counts['optionStrings']} option strings ({counts['registered']} "
                f"registered, {counts['generated']} generated negatives), {counts['deprecated']} deprecated, "
                f"{counts['envVars']} env vars, {counts['configClasses']} config classes")
    elif "workerOptionStrings" in counts:
        what = (f"{counts['workerOptionStrings']} worker and {counts['frontendOptionStrings']} frontend option "
                f"strings, {counts['envVars']} env vars")
    elif "options" in counts:  # SGLang: plain argparse, no generated spellings
        what = (f"{counts['options']} options, {counts['optionStrings']} option strings, {counts['deprecated']} "
                f"deprecated, {counts['envVars']} env vars")
    else:
        what = f"{counts['envVars']} env vars"
    click.echo(f"  catalog  {added.catalog_file}: {what}")
    if added.versions_file is not None and added.pin is not None:
        pins = ", ".join(f"{k} {v}" for k, v in added.pin.items())
        click.echo(f"  pins     {added.versions_file}: {release.version} -> {pins}")
    for item in getattr(release, "unresolved", ()):
        click.echo(f"warning: not read statically: {item}", err=True)


@engines.command("diff")
@click.argument("engine", metavar="ENGINE")
@click.argument("old", metavar="OLD")
@click.argument("new", metavar="NEW")
@OUTPUT
@user_errors
def diff(engine: str, old: str, new: str, output: str) -> None:
    """What upgrading ENGINE (a serving engine: vllm, sglang; dynamo, flashinfer) from OLD to NEW changes: flags,
    option strings, deprecations, choices, defaults, speculative methods, env vars, config fields, requirements.
    A Dynamo diff covers every engine's worker section and the frontend."""
    from stackpin.backends import serving_releases
    from stackpin.engines.diff import diff_engine

    result = diff_engine(engine, old, new, serving_releases())
    if output != "text":
        emit(result.data(), output)
    else:
        _print_diff(result)


def _values(values: SetDiff) -> str:
    return " ".join([f"+{v}" for v in values.added] + [f"-{v}" for v in values.removed])


def _show(value: Any) -> str:
    """A value as JSON spells it (null, "none", 0.9), a run-time default as its <source>."""
    if isinstance(value, str) and value.startswith("<") and value.endswith(">"):
        return value
    return json.dumps(value)


def _change(change: Change) -> str:
    if change.values is not None:
        return f"{change.what} {_values(change.values)}"
    return f"{change.what} {_show(change.old)} -> {_show(change.new)}"


def _wrapped(items: list[str], indent: str) -> None:
    """Many short items, several to a line."""
    line = indent
    for item in items:
        if len(line) + len(item) > 100 and line.strip():
            click.echo(line.rstrip())
            line = indent
        line += item + " "
    if line.strip():
        click.echo(line.rstrip())


def _entry(name: str, entry: EntryDiff, titled: bool) -> None:
    indent = "  " if titled else ""
    if titled:
        click.echo(f"{name}:")
    # Options whose one change is a new negative spelling come from a change of the parser, not of the
    # options: listed together.
    gained = {flag: c[0].values for flag, c in entry.changed.items()
              if len(c) == 1 and c[0].what == "negatives" and c[0].values and not c[0].values.removed}
    changed = {flag: c for flag, c in entry.changed.items() if flag not in gained}
    click.echo(f"{indent}flags: {len(entry.added)} added, {len(entry.removed)} removed, {len(changed)} changed")
    for flag, option in entry.added.items():
        extra: list[str] = [option.type or "?"]
        if option.default is not None or option.default_expr:
            extra.append(f"default {_show(f'<{option.default_expr}>' if option.default_expr else option.default)}")
        if option.negatives:
            extra.append("off: " + ", ".join(option.negatives))
        click.echo(f"{indent}  + {flag} ({'; '.join(extra)})")
    for flag in entry.removed:
        click.echo(f"{indent}  - {flag}")
    for flag, changes in changed.items():
        click.echo(f"{indent}  ~ {flag}: {'; '.join(_change(c) for c in changes)}")
    if gained:
        click.echo(f"{indent}negative forms: {len(gained)} boolean options also answer to")
        _wrapped([s for values in gained.values() if values for s in values.added], indent + "  ")
    if entry.strings:
        click.echo(f"{indent}option strings: {len(entry.strings.added)} newly accepted, "
                   f"{len(entry.strings.removed)} no longer accepted")
    if entry.deprecated:
        hidden = {s: r for s, r in entry.deprecated.items()
                  if s.startswith("--no-") and r and r.startswith("--") and not r.startswith("--no-")}
        click.echo(f"{indent}newly deprecated: {len(entry.deprecated)}")
        for string, replacement in entry.deprecated.items():
            if string not in hidden:
                click.echo(f"{indent}  ! {string}" + (f" -> {replacement}" if replacement else " (no replacement)"))
        if hidden:
            click.echo(f"{indent}  ! {len(hidden)} --no-x forms, hidden from help; use the inverse "
                       f"(e.g. {next(iter(hidden))} -> {next(iter(hidden.values()))})")
    if entry.undeprecated:
        click.echo(f"{indent}no longer deprecated: {' '.join(entry.undeprecated)}")


def _print_diff(result: EngineDiff) -> None:
    from stackpin.backends import names

    click.echo(result.title)
    for name, entry in result.entries.items():
        _entry(name, entry, titled=len(result.entries) > 1)
    if result.choices:
        click.echo("choices:")
        for kind, values in result.choices.items():
            click.echo(f"  {kind}: {_values(values)}")
    if result.engine in names():  # a serving engine's release lists its speculative methods
        click.echo(f"speculative methods: {_values(result.speculative_methods) or 'unchanged'}")
    if result.env_vars or result.env_changed:
        click.echo(f"env vars: {len(result.env_vars.added)} added, {len(result.env_vars.removed)} removed, "
                   f"{len(result.env_changed)} changed")
        _wrapped([f"+{name}" for name in result.env_vars.added] + [f"-{name}" for name in result.env_vars.removed],
                 "  ")
        for name, changes in result.env_changed.items():
            click.echo(f"  ~ {name}: {'; '.join(_change(c) for c in changes)}")
    if result.config_fields or result.config_changed:
        click.echo("config fields (of JSON options):")
        for cls, values in result.config_fields.items():
            click.echo(f"  {cls}: {_values(values)}")
        for name, changes in result.config_changed.items():
            click.echo(f"  ~ {name}: {'; '.join(_change(c) for c in changes)}")
    if result.requires:
        requires = result.requires
        click.echo(f"requires: {len(requires.added)} added, {len(requires.removed)} removed, "
                   f"{len(requires.changed)} changed")
        for key, (old, new) in requires.changed.items():
            click.echo(f"  ~ {key}: {old} -> {new}")
        for line in requires.added:
            click.echo(f"  + {line}")
        for line in requires.removed:
            click.echo(f"  - {line}")


@engines.command("list")
@OUTPUT
@user_errors
def list_(output: str) -> None:
    """The release catalogs on the search path ($STACKPIN_CATALOG_PATH, then bundled); a release in two
    directories is read from the first."""
    from stackpin.engines.listing import list_catalogs

    entries = list_catalogs()
    if output != "text":
        emit([{"engine": e.engine, "version": e.version, "where": e.where, "package": e.package,
               "sha256": e.sha256, "shadowed": e.shadowed} for e in entries], output)
        return
    rows = [("ENGINE", "VERSION", "WHERE", "PACKAGE", "SHA256")]
    rows += [(e.engine, e.version, e.where + (" (shadowed)" if e.shadowed else ""), e.package, e.sha256[:12])
             for e in entries]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@engines.command("check")
@click.argument("inputs", nargs=-1, metavar="[LOCK|PROFILE|DIR...]")
@click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
              help="Where profiles' locks are looked up, and what is checked when no input is named.")
@click.option("--python", "python", type=click.Path(dir_okay=False, path_type=Path), metavar="PATH",
              help="The engine environment's Python [default: $STACKPIN_ENGINE_PYTHON, else "
                   ".enginecheck/<engine>-<pinned>/bin/python in the current directory (vllm-0.31.0, "
                   "sglang-0.5.21), where `stackpin engines setup-check` builds vLLM's].")
@click.option("--timeout", "timeout_s", type=finite(min=1, max=3600), default=600, show_default=True,
              help="Seconds one pool's check may take.")
@OUTPUT
@user_errors
def check(inputs: tuple[str, ...], lockdir: str, python: Path | None, timeout_s: float, output: str) -> None:
    """Run every worker pool of each stack through its pinned engine's own code (vLLM or SGLang), on CPU.

    vLLM's own parser and engine-config construction take the argv and environment render writes, then
    the pure-Python steps of model build (attention class, the KV-cache dtype it stores, the kernel block
    size, the CUDA graph mode the model runner resolves, the draft's revision, the autotune file); for an
    SGLang stack, SGLang's ServerArgs resolve the same argv and environment. Exit 0 when each pool starts
    as declared, 1 listing what the engine would refuse or change, 2 when the engine environment cannot
    run (build it with `stackpin engines setup-check`).
    """
    import os

    from stackpin.enginecheck.check import lock_check
    from stackpin.enginecheck.envbuild import check_python
    from stackpin.render.output import load_inputs

    locks, _ = load_inputs(list(inputs), Path(lockdir))
    results, failed = [], False
    env_python = os.environ.get("STACKPIN_ENGINE_PYTHON")
    given = python or (Path(env_python) if env_python else None)
    # Resolved here, against the directory the command runs in: the check itself runs from a scratch directory.
    stacks = sorted({(lock.stack_profile.spec.engine.value, lock.stack_profile.spec.engine_version) for lock in locks})
    interpreters = {key: check_python(*key, given) for key in stacks}
    for lock in locks:
        key = (lock.stack_profile.spec.engine.value, lock.stack_profile.spec.engine_version)
        for pool in lock_check(key[0])(lock, interpreters[key], timeout_s=timeout_s):
            failed |= not pool.ok
            results.append({"stack": pool.stack, "pool": pool.role, "ok": pool.ok, "problems": list(pool.problems),
                            key[0]: pool.result})
            if output == "text":
                click.echo("\n".join(f"problem {pool.stack} {pool.role}: {p}" for p in pool.problems) if pool.problems
                           else f"ok {pool.stack} {pool.role}: {pool.resolved}")
    if output != "text":
        emit({"ok": not failed, "pools": results}, output)
    if failed:
        raise SystemExit(1)


@engines.command("setup-check")
@click.argument("venv", required=False, type=click.Path(file_okay=False, path_type=Path), metavar="[DIR]")
@click.option("--vllm", default="0.31.0", show_default=True, metavar="VERSION",
              help="The pinned vLLM whose environment to build (those stackpin ships a requirements list for).")
@user_errors
def setup_check(venv: Path | None, vllm: str) -> None:
    """Build the environment `stackpin engines check` runs in [DIR default: .enginecheck/vllm-VERSION here].

    A venv holding vLLM's published wheel, torch as vLLM pins it and only the packages the check imports (a
    list shipped with stackpin, installed with --no-deps): about 2 GB and a few minutes the first time, pip
    showing its progress; then a no-op while the list is unchanged. Only PyPI, or the index pip's own
    configuration names, is contacted.
    """
    from stackpin.enginecheck.envbuild import build, default_venv, recipe

    build(venv or default_venv(vllm), recipe(vllm), lambda line: click.echo(line, err=True))
