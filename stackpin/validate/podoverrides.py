"""spec.placement.podOverrides: a pass-through the renderer applies last. Its form is checked where the
profile is read (stackpin.profile.podpatch: directives, merge keys, what a patch may not change); here each
component that has one is named, so a reviewer sees what stackpin carries without modelling it."""

from __future__ import annotations

from collections.abc import Iterator

from stackpin.profile.podpatch import touched
from stackpin.rules import Context, Hit, Severity, rule


@rule("SP271", Severity.info, "a component's pod template is patched by spec.placement.podOverrides")
def pod_overrides_in_force(ctx: Context) -> Iterator[Hit]:
    for component, patch in sorted(ctx.profile.spec.placement.pod_overrides.items()):
        yield Hit(("spec", "placement", "podOverrides", component),
                  f"the {component} pods are rendered with a pass-through patch stackpin does not model or check "
                  f"beyond its form: {', '.join(touched(patch)) or 'an empty patch'}",
                  "model what you can (sharedMemory, env, engineArgs): a modelled field is validated, a patch is not")
