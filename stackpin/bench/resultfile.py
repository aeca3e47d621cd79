"""Reading a bench result file: located errors for malformed JSON or fields, and every figure checked
against the request log it summarises (stackpin.bench.stats), so an edited number is caught on read."""

from __future__ import annotations

from pathlib import Path

from stackpin.bench.result import BenchResult
from stackpin.bench.stats import inconsistency
from stackpin.errors import InputError, Problem, StackpinError
from stackpin.models import load_model, parse_json
from stackpin.yamlio import read_regular

MAX_RESULT_BYTES = 256 * 1024 * 1024  # a run's request log; far above any real one


def read_result(path: Path) -> BenchResult:
    """Read a result file; a malformed one is every problem of it, each at its line and column (exit 2)."""
    def no_constant(name: str) -> None:
        raise ValueError(f"{name} is not a number a result can hold")

    try:
        text = read_regular(path, MAX_RESULT_BYTES).decode("utf-8")
    except OSError as exc:
        raise StackpinError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise StackpinError(f"{path}: cannot read: {exc}") from None
    data, locate = parse_json(text, str(path), parse_constant=no_constant)
    result = load_model(data, BenchResult, locate)
    found = inconsistency(result)
    if found is not None:
        where, message = found
        steps = tuple(s if not s.isdigit() else int(s) for s in where.split("."))  # list indices as ints
        raise InputError([Problem(locate(steps), where, message)])
    return result


def read_evidence(path: Path) -> BenchResult:
    """A result a decision is taken on (compare, attach, rollback, trial, promote, the rollout gate): read
    as `read_result` does, and refused (exit 2, naming the file) when a figure of it cannot be recomputed
    from a request log."""
    from stackpin.bench.compare import no_evidence

    result = read_result(path)
    if (why := no_evidence(result)) is not None:
        raise StackpinError(f"{path}: {why}")
    return result
