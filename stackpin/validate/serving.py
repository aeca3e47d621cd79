"""Rules on the model-specific Dynamo worker flags (profile/serving.py): the tool-call and reasoning parsers.

A coding agent's tool calls come back as plain text from a worker without its model's tool-call parser,
and `dynamo.vllm` takes the parser names as argparse choices from its compiled core, so an unknown name
stops every worker at start-up. The names each Dynamo release accepts are in catalog/dynamo_parsers.yaml.
"""

from __future__ import annotations

from collections.abc import Iterator

from stackpin.profile.serving import ParserChoice, parser_choices
from stackpin.rules import Context, Hit, Severity, choices_hint, pools, rule


def _first_with(ctx: Context, choice: ParserChoice) -> str | None:
    """The first Dynamo release stackpin knows whose parsers include the choice."""
    from packaging.version import Version

    having = [v for v, p in ctx.catalog.dynamo_parsers.items()
              if choice.value in (p.tool if choice.kind == "tool" else p.reasoning)]
    return min(having, key=Version) if having else None


@rule("SP227", Severity.error, "parser the pinned Dynamo does not have")
def unknown_parser(ctx: Context) -> Iterator[Hit]:
    dynamo = ctx.profile.spec.versions.dynamo
    choices = parser_choices(ctx.profile, ctx.catalog)
    for choice in choices:
        if choice.given and not choice.accepted:
            assert choice.known is not None
            yield Hit(("spec", "model", choice.field), f"Dynamo {dynamo} has no {choice.kind} parser "
                      f"{choice.value!r}: dynamo.vllm refuses {choice.option} {choice.value} and no worker starts",
                      choices_hint(str(choice.value), choice.known, "catalog/dynamo_parsers.yaml"))
    for role, path, pool in pools(ctx):  # a pool's own dynamoArgs, which render passes instead
        for choice in choices:
            value = pool.spec.dynamo_args.get(choice.option)
            if isinstance(value, str) and choice.known is not None and value not in choice.known:
                yield Hit((*path, "dynamoArgs", choice.option), f"Dynamo {dynamo} has no "
                          f"{choice.kind} parser {value!r}: dynamo.vllm refuses it and the {role} workers do not start",
                          choices_hint(value, choice.known, "catalog/dynamo_parsers.yaml"))


@rule("SP228", Severity.warning, "model's parser missing from the pinned Dynamo")
def missing_parser(ctx: Context) -> Iterator[Hit]:
    dynamo = ctx.profile.spec.versions.dynamo
    for choice in parser_choices(ctx.profile, ctx.catalog):
        if not choice.given and not choice.accepted:
            since = _first_with(ctx, choice)
            effect = ("tool calls come back as plain text" if choice.kind == "tool" else
                      "reasoning is not separated from the answer")
            yield Hit(("spec", "versions", "dynamo"), f"Dynamo {dynamo} has no {choice.kind} parser "
                      f"{choice.value!r}, the one the model needs: render leaves {choice.option} out and {effect}",
                      f"pin Dynamo {since} or later" if since else f"set spec.model.{choice.field} (none to accept it)")


@rule("SP229", Severity.warning, "no parser facts for the pinned Dynamo")
def no_parser_facts(ctx: Context) -> Iterator[Hit]:
    dynamo = ctx.profile.spec.versions.dynamo
    if dynamo not in ctx.catalog.dynamo_parsers and any(c.value for c in parser_choices(ctx.profile, ctx.catalog)):
        yield Hit(("spec", "versions", "dynamo"), f"stackpin does not know which parsers Dynamo {dynamo} has "
                  "(catalog/dynamo_parsers.yaml): the tool-call and reasoning parsers went unchecked",
                  f"add it: python scripts/extract_dynamo_parsers.py {dynamo}")


@rule("SP232", Severity.error, "frontend flag the pinned Dynamo lacks, or one stackpin writes")
def frontend_flags(ctx: Context) -> Iterator[Hit]:
    """spec.placement.frontendArgs pass through to `dynamo.frontend`, which refuses an unknown option or a
    value outside its choices and does not start; the flags render writes itself may not be repeated."""
    from stackpin.catalog.flags import dynamo_catalog
    from stackpin.profile.engine_args import MODELLED_FRONTEND

    version = ctx.profile.spec.versions.dynamo
    catalog = dynamo_catalog(version, "frontend")
    for option, value in ctx.profile.spec.placement.frontend_args.items():
        path = ("spec", "placement", "frontendArgs", option)
        if option in MODELLED_FRONTEND:
            yield Hit(path, f"{option} is written from the profile (spec.placement)", "set it there and remove it")
        elif catalog is not None:
            for problem in catalog.check_value(option, value):
                yield Hit(path, f"{problem}: Dynamo {version}'s frontend does not start", "remove it or fix it")
