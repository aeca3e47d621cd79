"""The model-specific Dynamo worker flags of a stack: its tool-call and reasoning parsers.

The model's catalog entry names them (`serving`), a profile may override either (`spec.model.toolCallParser`,
`none` for no parser), and the pinned Dynamo's parser lists (catalog/dynamo_parsers.yaml, read from its
runtime wheel) say whether the worker will accept the name: `dynamo.vllm` takes them as argparse choices,
so an unknown one stops every worker at start-up.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from stackpin.catalog import Catalog
from stackpin.profile.model import StackProfile

NONE = "none"


class ParserChoice(msgspec.Struct, frozen=True):
    kind: Literal["tool", "reasoning"]
    option: str  # the dynamo.vllm flag
    field: str  # spec.model's field (camelCase, as the profile spells it)
    value: str | None  # what the stack asks for; None: no parser
    given: bool  # the profile named it (else the catalog's default)
    known: tuple[str, ...] | None  # the pinned Dynamo's names; None when stackpin has no list for it

    @property
    def accepted(self) -> bool:
        """The pinned Dynamo takes it (or there is no list to say otherwise)."""
        return self.value is None or self.known is None or self.value in self.known

    @property
    def rendered(self) -> str | None:
        """What render passes: the choice when the worker accepts it. A catalog default the pinned Dynamo
        lacks is left out (a warning says so); a profile's own unknown name is refused by validation."""
        return self.value if self.value is not None and (self.accepted or self.given) else None


def parser_choices(profile: StackProfile, catalog: Catalog) -> tuple[ParserChoice, ...]:
    found = catalog.model_for(profile.spec.model.id)
    serving = found[1].serving if found else None
    parsers = catalog.dynamo_parsers.get(profile.spec.versions.dynamo)
    out = []
    for kind, option, attr, field in (("tool", "--dyn-tool-call-parser", "tool_call_parser", "toolCallParser"),
                                      ("reasoning", "--dyn-reasoning-parser", "reasoning_parser", "reasoningParser")):
        given = getattr(profile.spec.model, attr)
        default = getattr(serving, attr) if serving else None
        value = None if given == NONE else (given or default)
        known = (parsers.tool if kind == "tool" else parsers.reasoning) if parsers else None
        out.append(ParserChoice(kind, option, field, value, given is not None, known))  # type: ignore[arg-type]
    return tuple(out)
