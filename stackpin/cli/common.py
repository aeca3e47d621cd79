"""Pieces every CLI module shares: output format option, one-line user errors, structured output."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import click


class Finite(click.FloatRange):
    """A float option that refuses NaN and infinity (which every range comparison lets through)."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def finite(min: float | None = None, max: float | None = None, min_open: bool = False) -> Finite:  # noqa: A002
    return Finite(min=min, max=max, min_open=min_open)


OUTPUT = click.option("-o", "--output", type=click.Choice(["text", "json", "yaml"]), default="text",
                      show_default=True, help="Output format; json and yaml have stable keys.")
HISTORY = click.option("--history", "history_dir", default="history", show_default=True, metavar="DIR",
                       type=click.Path(file_okay=False),
                       help="Where revisions are kept: <namespace>/<deployment>@<platform>/NNNNNN.yaml.")




REQUEST_TIMEOUT = "request_timeout"


def _keep_request_timeout(ctx: click.Context, _param: click.Parameter, value: float | None) -> None:
    ctx.meta[REQUEST_TIMEOUT] = value


def connect_cluster(kubeconfig: str | None, context: str | None) -> Any:
    """`stackpin.deploy.kube.connect` with the command's --request-timeout (kept by cluster_options)."""
    from stackpin.deploy.kube import REQUEST_TIMEOUT_S, connect

    given = click.get_current_context().meta.get(REQUEST_TIMEOUT)
    return connect(kubeconfig, context, REQUEST_TIMEOUT_S if given is None else given)


LOCK_TIMEOUT_KEY = "lock_timeout"


def _keep_lock_timeout(ctx: click.Context, _param: click.Parameter, value: float | None) -> None:
    ctx.meta[LOCK_TIMEOUT_KEY] = value


# For the commands that write a cluster (apply, rollback --apply); read with lock_timeout().
LOCK_TIMEOUT = click.option(
    "--lock-timeout", type=finite(min=0), metavar="SECONDS", expose_value=False, callback=_keep_lock_timeout,
    help="Wait this long for another stackpin writing the deployment (it holds the Lease "
         "stackpin-<deployment>) to finish; 0 refuses at once, naming the holder.  [default: 0]")


def lock_timeout() -> float:
    given = click.get_current_context().meta.get(LOCK_TIMEOUT_KEY)
    return 0.0 if given is None else float(given)


def _meta_flag(flag: str, key: str, help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A flag kept in the click context's meta under `key` (None when not given), not passed to the command:
    read with `_flag_on(key)`; `cluster_flags_given` sees whether it was given."""
    def keep(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        ctx.meta[key] = value or None

    return click.option(flag, is_flag=True, expose_value=False, callback=keep, help=help_text)


def _flag_on(key: str) -> bool:
    return bool(click.get_current_context().meta.get(key))


STRICT_KEY = "strict_preflight"
# For the commands that write a cluster (apply, rollback --apply); read with strict_preflight().
STRICT = _meta_flag(
    "--strict", STRICT_KEY,
    "Refuse, writing nothing, when preflight finds what would keep the pods from running as rendered "
    "(no node matches a pool's nodeSelector, a server without image volumes); otherwise a warning.")


def strict_preflight() -> bool:
    return _flag_on(STRICT_KEY)


ALLOW_STAND_INS_KEY = "allow_stand_ins"
# For the commands that write a cluster (apply, rollback --apply, rollout start); read with allow_stand_ins().
ALLOW_STAND_INS = _meta_flag(
    "--allow-stand-ins", ALLOW_STAND_INS_KEY,
    "Apply a stack holding stand-in pins (a demo mirror's, not production digests), for a test cluster; "
    "otherwise it is refused, naming each. A rollout keeps it for resume.")


def allow_stand_ins() -> bool:
    return _flag_on(ALLOW_STAND_INS_KEY)


def cluster_flags_given() -> list[str]:
    """--request-timeout, --lock-timeout, --strict and --allow-stand-ins, when given (commands where they mean
    nothing refuse them)."""
    meta = click.get_current_context().meta
    return [flag for flag, key in (("--request-timeout", REQUEST_TIMEOUT), ("--lock-timeout", LOCK_TIMEOUT_KEY),
                                   ("--strict", STRICT_KEY), ("--allow-stand-ins", ALLOW_STAND_INS_KEY))
            if meta.get(key) is not None]


def cluster_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--kubeconfig, --context, -n/--namespace and --request-timeout, spelled and defaulted as kubectl
    does, for every command that reads or writes a cluster (apply, status, bench against a live stack).
    --request-timeout reaches `connect_cluster` through the click context, not the command's arguments."""
    fn = click.option("--request-timeout", type=finite(min=0, min_open=True), metavar="SECONDS", expose_value=False,
                      callback=_keep_request_timeout,
                      help="Give up when the API server has not answered within this many seconds, all the "
                           "command's requests together (default 30; waits for --wait and --timeout are "
                           "apart).")(fn)
    fn = click.option("-n", "--namespace", metavar="NAMESPACE",
                      help="Namespace (default: the profile's metadata.namespace).")(fn)
    fn = click.option("--context", metavar="NAME", help="kubeconfig context (default: current-context).")(fn)
    return click.option("--kubeconfig", metavar="FILE", type=click.Path(dir_okay=False),
                        help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")(fn)


def fail(lines: list[str], code: int) -> None:
    for line in lines:
        click.echo(f"error: {line}" if not line.startswith(("error", "warning")) else line, err=True)
    sys.exit(code)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn StackpinError into one line per problem on stderr and its exit code; never a traceback. Under
    `-o json|yaml` the same problems also go to stdout in that format (`{"error": {"exitCode": N,
    "problems": [...]}}`), so a tool reading the command's output reads its failure too."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from stackpin.errors import StackpinError

        def failed(lines: list[str], code: int) -> None:
            if kwargs.get("output") in ("json", "yaml"):
                emit({"error": {"exitCode": code, "problems": lines}}, kwargs["output"])
            fail(lines, code)

        try:
            return fn(*args, **kwargs)
        except StackpinError as exc:
            failed(exc.lines(), exc.exit_code)
        except BrokenPipeError:
            # The reader of stdout went away (`stackpin ... | head`): not a problem to report. click's own
            # handler stops quietly (exit 1), as it does for every command.
            raise
        except OSError as exc:  # the filesystem said no (read-only, full, not a directory, ...)
            where = f"{exc.filename}: " if exc.filename else ""
            failed([f"{where}{exc.strerror or exc}"], 2)

    return wrapper


def emit(data: Any, output: str, err: bool = False) -> None:
    if output == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=True), err=err)
    else:
        from stackpin.yamlio import dump_yaml

        click.echo(dump_yaml(data), nl=False, err=err)


STDOUT = "-"  # `--out -`: the file's text on stdout, as `tar -f -` and `kubectl apply -f -` read `-`


def write_out(out: str, text: str) -> None:
    """The text file `--out` names, written all or nothing; `--out -` prints it on stdout instead, and the
    command's own report on what it wrote then goes to stderr (`report_to_stderr`)."""
    from pathlib import Path

    from stackpin.yamlio import write_output

    if out == STDOUT:
        click.echo(text, nl=False)
    else:
        write_output(Path(out), text)


def report_to_stderr(out: str | None) -> bool:
    """Whether a command's report goes to stderr: stdout holds the file itself (`--out -`)."""
    return out == STDOUT


def out_name(out: str) -> str:
    """How a command's report names where it wrote."""
    return "stdout" if out == STDOUT else out


def file_only(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
    """The callback of an `--out` whose file is no text for a pipe (a PNG, an archive, a directory) or whose
    command prints its own tables on stdout: `-` is refused, where it would otherwise make a file called `-`."""
    if value is not None and str(value) == STDOUT:
        raise click.BadParameter("'-' (stdout) is not taken here: give a path")
    return value


def emit_objects(objects: list[dict[str, Any]], header: str, output: str, output_file: str | None) -> None:
    """Kubernetes objects a command generates: a kubectl List as JSON (what `kubectl apply -f` takes),
    else YAML documents under a `# header` comment (text and yaml are the same document); to
    `output_file` atomically, or stdout."""
    from stackpin.yamlio import dump_yaml_all

    if output == "json":
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2, sort_keys=True) + "\n"
    else:
        text = f"# {header}\n" + dump_yaml_all(objects)
    out = output_file or STDOUT
    write_out(out, text)
    if out != STDOUT:
        click.echo(f"wrote {out} ({len(objects)} objects)", err=True)
