"""Matplotlib figures as deterministic PNG bytes (Agg backend, no timestamp or version in the metadata),
and what every chart of results shares: the colour-blind-safe palette, the markers that tell a point that
met the SLO from one that missed it and from one that is not a measurement (invalid), the SLO edge of a
curve, and label placement that never lets two labels overlap.

matplotlib loads only here, inside functions: it costs a cold start about a second, and it is the `plot` extra.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from stackpin.bench.result import BenchResult, Simulation, Slo
from stackpin.plan.curve import Bound, CurvePoint, Operating, holds, operating_point, point_speed

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.transforms import Bbox

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


# Okabe and Ito's colour-blind-safe palette (Color Universal Design, 2008): blue, vermillion, bluish green,
# reddish purple, orange, sky blue; its black is the reference lines' (SLO, TTFT limit) and its yellow, too
# light for lines and labels on white, gives way to a dark grey. Every pair stays apart under protanopia,
# deuteranopia and tritanopia (tests/test_chart_colours.py simulates them).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#595959")
LineStyle = Literal["-", "--", ":", "-."]
# Once every colour is taken, line style tells curves apart too: colour is never the only difference.
LINESTYLES: tuple[LineStyle, ...] = ("-", "--", ":", "-.")

# One colour per stack, the same in every chart and the report: the shipped stacks' own, then a colour
# picked by the name's hash (another chart with the same stacks picks the same).
STACK_COLORS = {"gb300-launch": "#D55E00", "gb300-tuned": "#0072B2", "vera-rubin-tuned": "#009E73",
                "gb300-disagg-wide-ep": "#CC79A7", "vera-rubin-disagg-wide-ep": "#56B4E9", "gb200-tuned": "#E69F00",
                "b200-disagg": "#595959"}
REFERENCE = "black"  # SLO and TTFT limit lines


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


def curve_styles(names: Sequence[str]) -> list[tuple[str, LineStyle]]:
    """(colour, linestyle) per curve, in order: each stack's own colour on its first curve; another curve of
    a stack already drawn (another revision) the first colour no stack here has, so curves on one chart
    differ in colour while the palette lasts, and in line style once it runs out."""
    own: dict[str, str] = {}
    for name in names:
        if name not in own:
            own[name] = stack_color(name, set(own.values()))
    taken = set(own.values())
    seen: set[str] = set()
    styles: list[tuple[str, LineStyle]] = []
    for name in names:
        if name not in seen:
            seen.add(name)
            color = own[name]
        else:
            free = [c for c in PALETTE if c not in taken]
            color = free[0] if free else PALETTE[len(styles) % len(PALETTE)]
            taken.add(color)
        styles.append((color, LINESTYLES[(len(styles) // len(PALETTE)) % len(LINESTYLES)]))
    return styles


class _Simulated(Protocol):
    @property
    def simulation(self) -> Simulation | None: ...


def caveats(rs: Sequence[_Simulated]) -> str:
    """The footnote every chart of results carries: simulated or measured, and per which GPUs."""
    models = sorted({r.simulation.model for r in rs if r.simulation})
    said = [f"simulated ({', '.join(models)}): not hardware" if models else "measured"]
    if any(r.simulation and r.simulation.gpus for r in rs):
        said.append("throughput per served GPU (a share of each stack was served)")
    else:
        said.append("throughput per GPU of the stack")
    return "; ".join(said)


# Markers, the same in every chart: filled where the SLO held, hollow where it did not, a hollow X where the
# point is not a measurement (invalid: drawn where it was measured, off the curve, and labelled), a diamond
# where the curve crosses the SLO, a ring around the two measured points either side of that crossing.
MET = "o"
INVALID = "X"
CROSSING = "D"
MARKER_SIZE = 6.0
RING_SIZE = 13.0


@dataclass(frozen=True)
class InvalidPoint:
    """A point the result keeps but does not count (Point.invalid): where it was measured, and why not."""

    agents: int
    speed: float  # the slowest agent's tok/s, as measured
    tps_per_gpu: float
    ttft_s: dict[str, float]  # by percentile: p50, p90, p99
    cause: str


def invalid_points(result: BenchResult) -> tuple[InvalidPoint, ...]:
    return tuple(InvalidPoint(p.agents, point_speed(p), p.output_tps_per_gpu,
                              {q: getattr(p.ttft_s, q) for q in ("p50", "p90", "p99")}, p.invalid)
                 for p in sorted(result.points, key=lambda p: p.agents) if p.invalid is not None)


@dataclass(frozen=True)
class Edge:
    """Where a curve meets the SLO: the last measured point that met it, the first that missed, the
    operating point between them, and whether the answer is only a bound."""

    last_met: CurvePoint | None
    first_missed: CurvePoint | None
    operating: Operating
    past_invalid: tuple[int, ...]  # invalid counts between the two: the crossing may lie at any of them
    text: str  # what the chart writes beside it

    @property
    def bound(self) -> bool:
        """True where the curve never crossed the SLO, or crossed only past an invalid point."""
        return self.operating.bound is Bound.at_least


def slo_edge(curve: Sequence[CurvePoint], invalid: Sequence[int], slo: Slo, gpus: int) -> Edge:
    """`curve`: the valid points by agent count (curve_of); `invalid`: the agent counts of invalid points. The
    operating point and whether it is a bound are stackpin.plan.curve's (what `plan` answers)."""
    op = operating_point(list(curve), slo, gpus, invalid)
    last_met = first_missed = None
    for point in curve:
        if not holds(point, slo):
            first_missed = point
            break
        last_met = point
    if last_met is None:
        text = f"SLO missed from {first_missed.agents} agent(s)" if first_missed else "no valid point"
        return Edge(None, first_missed, op, (), text)
    ceiling = first_missed.agents if first_missed else math.inf
    past = tuple(a for a in sorted(invalid) if last_met.agents < a < ceiling)
    if past:
        which = ", ".join(map(str, past)) if len(past) <= 2 else f"{past[0]}, ..., {past[-1]}"
        text = f">= {last_met.agents} agents: a bound (crossing past invalid {which})"
    elif first_missed is None:
        text = f">= {last_met.agents} agents: a bound (SLO still met at the largest valid count)"
    else:
        text = f"SLO edge ~{op.agents:,.0f} agents ({op.limited_by} limit)"
    return Edge(last_met, first_missed, op, past, text)


@dataclass
class _Label:
    ax: Axes
    x: float
    y: float
    text: str
    color: str
    priority: int  # 0: must be read (invalid, edge, bound); 1: agent counts
    order: int


@dataclass
class Labeller:
    """Labels placed after the layout is final, in display pixels, so that no two overlap and none covers
    a marker: each tries offsets around its point (near first, then further out with a leader line) and
    takes the first whose box is inside its axes and clear of every box placed before it. Labels that
    must be read go first and look further out; a label with no room left is dropped and counted (the
    chart says how many). Deterministic: the same labels, in the same order, land in the same places."""

    figure: Figure
    fontsize: float = 7.0
    labels: list[_Label] = field(default_factory=list)
    markers: list[tuple[Axes, float, float, float]] = field(default_factory=list)  # ax, x, y, size in points
    lines: list[tuple[Axes, list[float], list[float]]] = field(default_factory=list)
    dropped: int = 0

    def label(self, ax: Axes, x: float, y: float, text: str, color: str, priority: int = 1) -> None:
        self.labels.append(_Label(ax, x, y, text, color, priority, len(self.labels)))

    def marker(self, ax: Axes, x: float, y: float, size: float = MARKER_SIZE) -> None:
        self.markers.append((ax, x, y, size))

    def line(self, ax: Axes, xs: Sequence[float], ys: Sequence[float]) -> None:
        """A drawn line labels keep off where they can (they may cross one rather than be left out)."""
        self.lines.append((ax, list(xs), list(ys)))

    def place(self) -> None:
        from matplotlib.transforms import Bbox

        figure = self.figure
        figure.draw_without_rendering()  # the constrained layout settles every axes' place ...
        figure.set_layout_engine("none")  # ... and keeps it: labels are placed in its pixels
        renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
        px = figure.dpi / 72
        taken: list[Bbox] = []
        for ax, x, y, size in self.markers:
            cx, cy = ax.transData.transform((x, y))
            half = size * px / 2
            taken.append(Bbox.from_extents(cx - half, cy - half, cx + half, cy + half))
        segments: list[tuple[float, float, float, float]] = []
        for ax, xs, ys in self.lines:
            drawn = [tuple(v) for v in ax.transData.transform(list(zip(xs, ys, strict=True)))] if xs else []
            segments += [(a[0], a[1], b[0], b[1]) for a, b in zip(drawn, drawn[1:], strict=False)]
        for label in sorted(self.labels, key=lambda a: (a.priority, a.order)):
            ax = label.ax
            inside = ax.get_window_extent(renderer)
            probe = ax.text(0, 0, label.text, fontsize=self.fontsize)
            extent = probe.get_window_extent(renderer)
            probe.remove()
            width, height = extent.width, extent.height
            ax_, ay_ = ax.transData.transform((label.x, label.y))
            # A label that must be read looks further out before it gives up.
            # Clear of lines and with a clear leader first; then across a line; a label that must be read
            # then takes a leader line across others rather than go missing.
            radii = _RADII + (_FAR if label.priority == 0 else ())
            spot = _free_spot(ax_, ay_, width, height, inside, taken, radii, segments) or \
                _free_spot(ax_, ay_, width, height, inside, taken, radii, ()) or \
                (_free_spot(ax_, ay_, width, height, inside, taken, radii, (), clear_leader=False)
                 if label.priority == 0 else None)
            if spot is None:
                self.dropped += 1
                continue
            left, bottom, radius = spot
            arrow = {"arrowstyle": "-", "color": label.color, "linewidth": 0.6, "shrinkA": 0, "shrinkB": 3} \
                if radius > _RADII[1] else None
            ax.annotate(label.text, (label.x, label.y), xytext=(left - ax_, bottom - ay_), textcoords="offset pixels",
                        ha="left", va="bottom", fontsize=self.fontsize, color=label.color, arrowprops=arrow,
                        annotation_clip=False)
            box = Bbox.from_bounds(left, bottom, width, height)
            taken.append(box.padded(1.5))
            if arrow:  # later labels keep off this leader line where they can
                segments.append((ax_, ay_, *_centre(box)))


_RADII = (5.0, 11.0, 20.0, 32.0, 46.0, 62.0)  # pixels from the point
_FAR = (85.0, 110.0, 140.0, 180.0, 230.0, 290.0, 360.0)
_DIRECTIONS = ((1, 1), (-1, 1), (1, -1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1))


def _free_spot(x: float, y: float, width: float, height: float, inside: Bbox, taken: Sequence[Bbox],
               radii: Sequence[float], segments: Sequence[tuple[float, float, float, float]],
               clear_leader: bool = True) -> tuple[float, float, float] | None:
    """(left, bottom, radius) of the first box of `width` x `height` around (x, y) that lies inside
    `inside`, overlaps nothing `taken` and crosses none of `segments`."""
    from matplotlib.transforms import Bbox

    for radius in radii:
        for dx, dy in _DIRECTIONS:
            left = x + dx * radius - (width if dx < 0 else width / 2 if dx == 0 else 0)
            bottom = y + dy * radius - (height if dy < 0 else height / 2 if dy == 0 else 0)
            box = Bbox.from_bounds(left, bottom, width, height)
            if not (box.x0 >= inside.x0 + 2 and box.x1 <= inside.x1 - 2 and box.y0 >= inside.y0 + 2
                    and box.y1 <= inside.y1 - 2) or any(box.overlaps(other) for other in taken) \
                    or any(_crosses(box, *segment) for segment in segments):
                continue
            # A far label's leader line must not run through another label or marker either.
            if clear_leader and radius > _RADII[1] and any(_crosses(other, x, y, *_centre(box)) for other in taken
                                                           if not other.contains(x, y)):
                continue
            return left, bottom, radius
    return None


def _centre(box: Bbox) -> tuple[float, float]:
    """Where a leader line aims (matplotlib draws it from the text's centre, cut at its box)."""
    return (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2


def _crosses(box: Bbox, x0: float, y0: float, x1: float, y1: float) -> bool:
    """Whether the segment (x0, y0)-(x1, y1) passes through the box (Liang-Barsky clipping)."""
    low, high = 0.0, 1.0
    dx, dy = x1 - x0, y1 - y0
    for p, q in ((-dx, x0 - box.x0), (dx, box.x1 - x0), (-dy, y0 - box.y0), (dy, box.y1 - y0)):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return False
    return True


def wrapped(text: str, width: int) -> str:
    """A legend entry on lines of at most `width` characters: a long one would run off the figure."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False, subsequent_indent="  "))


def below(figure: Figure, handles: Sequence[object], columns: int, plots_height: float) -> None:
    """The legend under the plots, outside every axes, and the figure made as tall as the plots need plus
    the legend's own height: 100 entries make a taller figure, never a legend over the data."""
    legend = figure.legend(handles=handles, loc="outside lower center", ncols=columns, fontsize=8, frameon=False)
    figure.draw_without_rendering()
    figure.set_figheight(plots_height + legend.get_window_extent().height / figure.dpi)


def key_handles(edge: bool) -> list[object]:
    """Legend entries that say what the markers mean (black: they hold for every curve)."""
    from matplotlib.lines import Line2D

    handles: list[object] = [
        Line2D([], [], color="black", marker=MET, linestyle="none", label="SLO met"),
        Line2D([], [], color="black", marker=MET, markerfacecolor="white", linestyle="none", label="SLO missed"),
        Line2D([], [], color="black", marker=INVALID, markerfacecolor="white", linestyle="none",
               label="invalid: not a measurement, not counted (labelled with its agents)"),
    ]
    if edge:
        handles += [
            Line2D([], [], color="black", marker=MET, markersize=RING_SIZE, markerfacecolor="none", linestyle="none",
                   markeredgewidth=0.8, label="SLO edge: the last valid point that met, the first that missed"),
            Line2D([], [], color="black", marker=CROSSING, markerfacecolor="white", linestyle="none",
                   label="crossing, interpolated (>= where only a bound is known)"),
        ]
    return handles
