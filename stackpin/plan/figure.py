"""Matplotlib figures as deterministic PNG bytes: Agg backend, no timestamp or version in the metadata.

matplotlib loads only here, inside functions: it costs a cold start about a second.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# PNG text chunks: only what we set. matplotlib's default "Software" names its version.
_METADATA: dict[str, str | None] = {"Software": "stackpin", "Creation Time": None}


def new_figure(width: float = 8.0, height: float = 5.0) -> Figure:
    """A figure drawn by Agg whatever the environment's backend (no display here or in CI)."""
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
