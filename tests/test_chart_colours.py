"""Charts say what they show (issue 20, section 5): one colour per stack in every chart, and whether the
numbers are simulated and per which GPUs. Colour-blind readers tell the colours apart (issue 34, part 4)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from stackpin.plan.figure import LINESTYLES, PALETTE, STACK_COLORS, caveats, curve_styles, stack_color
from tests import benchdata

ROOT = Path(__file__).resolve().parent.parent

# Machado, Oliveira and Fernandes (2009), severity 1.0: what a dichromat sees of a linear-RGB colour.
DICHROMACY = {
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413),
                     (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602), (0.004733, 0.691367, 0.303900)),
}
# CIE76 distance in L*a*b*: about 2.3 is just noticeable; lines and small markers need far more.
APART = 15.0


def _linear(hex_colour: str) -> list[float]:
    channels = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    return [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]


def _lab(rgb: list[float]) -> tuple[float, float, float]:
    r, g, b = (min(1.0, max(0.0, c)) for c in rgb)
    x, y, z = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b, \
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def seen(hex_colour: str, vision: str | None) -> tuple[float, float, float]:
    rgb = _linear(hex_colour)
    if vision is not None:
        rgb = [sum(m * c for m, c in zip(row, rgb, strict=True)) for row in DICHROMACY[vision]]
    return _lab(rgb)


def closest_pair(colours: list[str], vision: str | None) -> float:
    return min(math.dist(seen(a, vision), seen(b, vision)) for a, b in itertools.combinations(colours, 2))


def test_a_stack_keeps_its_colour_and_two_stacks_never_share_one() -> None:
    assert len(set(STACK_COLORS.values())) == len(STACK_COLORS)  # the shipped stacks: seven colours
    assert stack_color("gb300-tuned") == stack_color("gb300-tuned", {"#000000"}) == STACK_COLORS["gb300-tuned"]
    taken: set[str] = set()
    picked = []
    for name in ("site-a", "site-b", "site-c", "site-d"):
        picked.append(stack_color(name, taken))
        taken.add(picked[-1])
    assert len(set(picked)) == 4 and set(picked) <= set(PALETTE)
    assert stack_color("site-a") == picked[0]  # the same name, the same colour, in another chart


def test_every_chart_says_simulated_and_per_which_gpu() -> None:
    simulated = benchdata.launch()
    assert caveats([simulated]).startswith("simulated (illustrative): not hardware")
    measured = simulated.model_copy(update={"simulation": None})
    assert caveats([measured]) == "measured; throughput per GPU of the stack"


@pytest.mark.parametrize("vision", [None, *DICHROMACY])
def test_colour_blind_readers_tell_every_palette_colour_apart(vision: str | None) -> None:
    assert closest_pair(list(PALETTE), vision) >= APART
    assert set(STACK_COLORS.values()) <= set(PALETTE)


def test_the_old_red_and_green_were_not_apart_for_deuteranopes() -> None:
    # The palette before issue 34 drew gb300-launch red and vera-rubin-tuned green: one colour to a deuteranope.
    assert closest_pair(["#d62728", "#2ca02c"], "deuteranopia") < APART / 2


def test_every_colour_shows_on_white() -> None:
    # Lines and their labels on a white chart: no colour lighter than L* 75 (Okabe-Ito's yellow is 89).
    assert all(seen(c, None)[0] <= 75 for c in PALETTE)


def test_curves_on_one_chart_differ_in_colour_then_in_line_style() -> None:
    # Eight revisions alternating two stacks: each stack its own colour first, the other revisions free ones.
    styles = curve_styles(["gb300-launch", "gb300-tuned"] * 4)
    assert styles[0] == (STACK_COLORS["gb300-launch"], "-") and styles[1] == (STACK_COLORS["gb300-tuned"], "-")
    assert len(set(styles)) == 8 and len({c for c, _ in styles[:len(PALETTE)]}) == len(PALETTE)
    assert styles[len(PALETTE)][1] == LINESTYLES[1]


def test_the_reports_diff_tables_do_not_tell_old_from_new_by_colour_alone() -> None:
    template = (ROOT / "stackpin" / "report" / "templates" / "report.html.j2").read_text(encoding="utf-8")
    assert "#b00020" not in template and "#2a7d2a" not in template  # the red and green they were
    assert '<td class="old"><span class="sign">&minus;</span> was' in template
    assert '<td class="new"><span class="sign">+</span> now' in template
