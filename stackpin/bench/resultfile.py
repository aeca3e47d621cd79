"""Reading a bench result file: located errors for malformed JSON or fields, and every figure checked
against the request log it summarises (stackpin.bench.stats), so an edited number is caught on read."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

import stackpin.jsonio as jsonio
from stackpin.bench.result import BenchResult
from stackpin.bench.stats import inconsistency
from stackpin.errors import InputError, Location, Problem, StackpinError
from stackpin.yamlio import read_regular

MAX_RESULT_BYTES = 256 * 1024 * 1024  # a run's request log; far above any real one


def read_result(path: Path) -> BenchResult:
    """Read a result file; a malformed one is one located problem (exit 2) naming the file and field."""
    def no_constant(name: str) -> None:
        raise ValueError(f"{name} is not a number a result can hold")

    try:
        data = jsonio.loads(read_regular(path, MAX_RESULT_BYTES).decode("utf-8"), parse_constant=no_constant)
    except OSError as exc:
        raise StackpinError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise StackpinError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError([Problem(Location(str(path), exc.lineno, exc.colno), "", f"not JSON: {exc.msg}")]) from None
    except ValueError as exc:  # NestingError, or a constant or an integer json does not convert
        raise InputError([Problem(Location(str(path)), "", str(exc))]) from None
    try:
        result = BenchResult.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError([Problem(Location(str(path)), where, first["msg"])]) from None
    found = inconsistency(result)
    if found is not None:
        raise InputError([Problem(Location(str(path)), *found)])
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
