"""stackpin's Python API: load, validate, lock, render, diff and record serving stacks (docs/api.md).

Only the names in `__all__` are public. The CLI imports this package on every start, so it loads nothing
up front: each name's module is imported on first use (PEP 562 `__getattr__`); type checkers read the
imports under TYPE_CHECKING. No name may be a subpackage's (`validate`, `lock`, `render`, `diff`,
`history`...): importing the subpackage would set that attribute to the module.
"""

from __future__ import annotations

# Not `from typing import TYPE_CHECKING`: typing alone would cost `import stackpin` several times what it
# costs now. Type checkers read any constant of this name as true (PEP 484 convention, mypy and pyright).
TYPE_CHECKING = False

# Public name -> the module that defines it.
_EXPORTS = {
    "__version__": "stackpin.version",  # not in __all__; a module of its own that the stages may import
    # entry points
    "load_profile": "stackpin.profile.loader",
    "validate_profiles": "stackpin.api",
    "lock_profiles": "stackpin.api",
    "read_lock": "stackpin.api",
    "load_locks": "stackpin.api",
    "render_locks": "stackpin.api",
    "diff_stacks": "stackpin.api",
    "open_history": "stackpin.api",
    "list_revisions": "stackpin.api",
    "promote": "stackpin.api",
    "rollback": "stackpin.api",
    # what they return
    "LoadedProfile": "stackpin.profile.loader",
    "StackProfile": "stackpin.profile.model",
    "CheckResult": "stackpin.validate.check",
    "ProfileReport": "stackpin.validate.check",
    "Finding": "stackpin.validate",
    "Severity": "stackpin.validate",
    "StackLock": "stackpin.lock.lockfile",
    "Locked": "stackpin.lock.run",
    "RenderedStack": "stackpin.render.output",
    "StackDiff": "stackpin.diff.model",
    "HistoryStore": "stackpin.history.store",
    "DeploymentKey": "stackpin.history.model",
    "Revision": "stackpin.history.model",
    "HistoryEntry": "stackpin.history.listing",
    "Recorded": "stackpin.history.record",
    # what they raise
    "StackpinError": "stackpin.errors",
    "InputError": "stackpin.errors",
    "ResolveError": "stackpin.errors",
    "IntegrityError": "stackpin.errors",
    "StackMismatch": "stackpin.lock.lockfile",
    "RenderError": "stackpin.render.build",
    "RevisionError": "stackpin.history.model",
    "SignatureError": "stackpin.history.signing",
}

__all__ = [
    "CheckResult",
    "DeploymentKey",
    "Finding",
    "HistoryEntry",
    "HistoryStore",
    "InputError",
    "IntegrityError",
    "LoadedProfile",
    "Locked",
    "ProfileReport",
    "Recorded",
    "RenderError",
    "RenderedStack",
    "ResolveError",
    "Revision",
    "RevisionError",
    "Severity",
    "SignatureError",
    "StackDiff",
    "StackLock",
    "StackMismatch",
    "StackProfile",
    "StackpinError",
    "diff_stacks",
    "list_revisions",
    "load_locks",
    "load_profile",
    "lock_profiles",
    "open_history",
    "promote",
    "read_lock",
    "render_locks",
    "rollback",
    "validate_profiles",
]

if TYPE_CHECKING:
    from stackpin.api import (
        diff_stacks,
        list_revisions,
        load_locks,
        lock_profiles,
        open_history,
        promote,
        read_lock,
        render_locks,
        rollback,
        validate_profiles,
    )
    from stackpin.diff.model import StackDiff
    from stackpin.errors import InputError, IntegrityError, ResolveError, StackpinError
    from stackpin.history.listing import HistoryEntry
    from stackpin.history.model import DeploymentKey, Revision, RevisionError
    from stackpin.history.record import Recorded
    from stackpin.history.signing import SignatureError
    from stackpin.history.store import HistoryStore
    from stackpin.lock.lockfile import StackLock, StackMismatch
    from stackpin.lock.run import Locked
    from stackpin.profile.loader import LoadedProfile, load_profile
    from stackpin.profile.model import StackProfile
    from stackpin.render.build import RenderError
    from stackpin.render.output import RenderedStack
    from stackpin.validate import Finding, Severity
    from stackpin.validate.check import CheckResult, ProfileReport
    from stackpin.version import __version__ as __version__
else:
    # Hidden from type checkers: to them an unknown name must stay an error, not Any.
    def __getattr__(name: str) -> object:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'stackpin' has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(module), name)
        globals()[name] = value  # later look-ups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
