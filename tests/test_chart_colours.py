"""Charts say what they show (issue 20, section 5): one colour per stack in every chart, and whether the
numbers are simulated and per which GPUs."""

from __future__ import annotations

from stackpin.plan.figure import PALETTE, STACK_COLORS, caveats, stack_color
from tests import benchdata


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
