"""Compare two stacks: grouped changes, the rollout each needs, and what each invalidates."""

from stackpin.diff.engine import diff_stacks
from stackpin.diff.inputs import RevisionLock, Stack, load_stack, stack_of_lock
from stackpin.diff.model import Change, Group, GroupId, Impact, Invalidated, Invalidation, StackDiff
from stackpin.diff.run import diff_locks, diff_sources, summarize_locks

__all__ = ["Change", "Group", "GroupId", "Impact", "Invalidated", "Invalidation", "RevisionLock", "Stack",
           "StackDiff", "diff_locks", "diff_sources", "diff_stacks", "load_stack", "stack_of_lock", "summarize_locks"]
