"""Matplotlib figures as deterministic PNG bytes: Agg backend, no timestamp or version in the metadata.

matplotlib loads only here, inside functions: it costs a cold start about a second, and it is the `plot` extra.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from matplotlib.figure import Figure

    from stackpin.bench.result import BenchResult

# PNG text chunks: only what we set. matplotlib's default "Software" names its version.
_METADATA: dict[str, str | None] = {"Software": "stackpin", "Creation Time": None}


def new_figure(width: float = 8.0, height: float = 5.0) -> Figure:
    """A figure drawn by Agg whatever the environment's backend (no display here or in CI)."""
    from stackpin.extras import require

    require("plot")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def png_bytes(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata=_METADATA)
    return buffer.getvalue()


PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f")

# One colour per stack, the same in every chart and the report: the shipped stacks' own, then a colour
# picked by the name's hash (another chart with the same stacks picks the same).
STACK_COLORS = {"gb300-launch": "#d62728", "gb300-tuned": "#1f77b4", "vera-rubin-tuned": "#2ca02c",
                "gb300-disagg-wide-ep": "#9467bd", "vera-rubin-disagg-wide-ep": "#17becf", "gb200-tuned": "#ff7f0e",
                "b200-disagg": "#8c564b"}


def stack_color(name: str, taken: set[str] | None = None) -> str:
    """The stack's colour; an unknown stack's is picked by the name's hash, skipping colours `taken`."""
    if name in STACK_COLORS:
        return STACK_COLORS[name]
    import hashlib

    start = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")
    for i in range(len(PALETTE)):
        color = PALETTE[(start + i) % len(PALETTE)]
        if color not in (taken or set()):
            return color
    return PALETTE[start % len(PALETTE)]


def caveats(rs: Sequence[BenchResult]) -> str:
    """The footnote every chart of results carries: simulated or measured, and per which GPUs."""
    models = sorted({r.simulation.model for r in rs if r.simulation})
    said = [f"simulated ({', '.join(models)}): not hardware" if models else "measured"]
    if any(r.simulation and r.simulation.gpus for r in rs):
        said.append("throughput per served GPU (a share of each stack was served)")
    else:
        said.append("throughput per GPU of the stack")
    return "; ".join(said)
