"""The probe's lines, found in pod logs, parsed into per-node readings.

nvidia-smi's `--query-gpu=name,memory.total,driver_version,power.limit,compute_cap --format=csv,noheader,nounits`
prints one line per GPU, the values separated by ", ", a value the driver does not have as `[N/A]` (or
`[Not Supported]`, `[Unknown Error]`). memory.total is MiB and power.limit W without units (nounits). The CUDA
version is not a --query-gpu field: the summary's header line says it (`CUDA Version: 13.0`).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import msgspec

import stackpin.jsonio as jsonio
from stackpin.errors import StackpinError
from stackpin.site.probe_runtime import PREFIX, QUERY

MAX_LOG_BYTES = 64 * 1024 * 1024  # a probe line is ~1 KB per node; logs of a few thousand nodes fit
_CUDA = re.compile(r"CUDA Version:\s*([0-9][0-9.]*)")
_FIELDS = tuple(QUERY.split(","))


class GpuReading(msgspec.Struct, frozen=True):
    name: str | None
    memory_mib: int | None
    driver_version: str | None
    power_limit_w: float | None
    compute_cap: str | None


class NodeReading(msgspec.Struct, frozen=True):
    node: str
    platform: str
    at: str
    gpus: tuple[GpuReading, ...]
    cuda_version: str | None
    problem: str | None  # why the node gave no reading (nvidia-smi missing or failing)


def _value(text: str) -> str | None:
    text = text.strip()
    return None if not text or (text.startswith("[") and text.endswith("]")) else text


def _number(text: str | None, kind: type[int] | type[float], where: str, field: str) -> int | float | None:
    if text is None:
        return None
    try:
        return kind(float(text)) if kind is int else float(text)
    except ValueError:
        raise StackpinError(f"{where}: {field} {text!r} is not a number") from None


def parse_query(stdout: str, where: str) -> tuple[GpuReading, ...]:
    """The GPUs of one `--query-gpu` output (noheader, nounits)."""
    gpus = []
    for row in csv.reader(stdout.splitlines(), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(_FIELDS):
            raise StackpinError(f"{where}: nvidia-smi printed {len(row)} field(s) where --query-gpu={QUERY} gives "
                                f"{len(_FIELDS)}: {', '.join(row)[:120]!r}")
        name, memory, driver, power, cap = (_value(v) for v in row)
        gpus.append(GpuReading(name, int(m) if (m := _number(memory, int, where, "memory.total")) is not None else None,
                               driver, _number(power, float, where, "power.limit"), cap))
    return tuple(gpus)


def cuda_version(summary: str) -> str | None:
    found = _CUDA.search(summary)
    return found[1] if found else None


def _reading(data: object, where: str) -> NodeReading:
    if not isinstance(data, dict) or not isinstance(data.get("node"), str) or not isinstance(data.get("platform"), str):
        raise StackpinError(f"{where}: not a probe line (no node or platform)")
    node, platform, at = data["node"], data["platform"], str(data.get("at", ""))
    if not node:
        raise StackpinError(f"{where}: the probe line names no node (NODE_NAME was not set in its pod)")
    if data.get("error"):
        return NodeReading(node, platform, at, (), None, str(data["error"]))
    query = data.get("query") or {}
    summary = data.get("summary") or {}
    if not isinstance(query, dict) or not isinstance(summary, dict):
        raise StackpinError(f"{where}: query and summary must be objects")
    if query.get("exit") != 0:
        why = (str(query.get("stderr") or query.get("stdout") or "").strip().splitlines() or ["no output"])[0]
        return NodeReading(node, platform, at, (), None, f"nvidia-smi failed (exit {query.get('exit')}: {why})")
    gpus = parse_query(str(query.get("stdout", "")), f"{where} (node {node})")
    if not gpus:
        return NodeReading(node, platform, at, (), None, "nvidia-smi reports no GPU")
    return NodeReading(node, platform, at, gpus, cuda_version(str(summary.get("stdout", ""))), None)


def parse_logs(text: str, file: str) -> list[NodeReading]:
    """Every probe line in `text` (pod logs as `kubectl logs` prints them, with or without --prefix). A node
    seen twice keeps its latest reading."""
    found: dict[str, NodeReading] = {}
    for number, line in enumerate(text.splitlines(), 1):
        at = line.find(PREFIX)
        if at < 0:
            continue
        where = f"{file}:{number}"
        try:
            data = jsonio.loads(line[at + len(PREFIX):])
        except ValueError as exc:
            raise StackpinError(f"{where}: the probe line is not JSON ({exc})") from None
        reading = _reading(data, where)
        if reading.node not in found or found[reading.node].at <= reading.at:
            found[reading.node] = reading
    return [found[n] for n in sorted(found)]


def read_logs(path: Path) -> list[NodeReading]:
    from stackpin.yamlio import read_regular

    try:
        text = read_regular(path, MAX_LOG_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        raise StackpinError(f"{path}: cannot read the probe's logs: {exc.strerror or exc}") from None
    readings = parse_logs(text, str(path))
    if not readings:
        raise StackpinError(f"{path}: no probe line ({PREFIX.strip()} ...) in it",
                            "kubectl logs -l stackpin.dev/site-probe --tail=-1 > FILE, once the probe Jobs are done")
    return readings
