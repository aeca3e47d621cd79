"""Which files of a Git tree go into a Flux GitRepository's artifact, decided the way source-controller v1.9.1
decides it, with gitignore patterns compiled by pathspec (an implementation that is not stackpin's).

source-controller (internal/controller/gitrepository_controller.go `reconcileArtifact`) loads every `.sourceignore`
of the tree (fluxcd/pkg sourceignore v0.18.0 `LoadIgnorePatterns`: the root's first, then each directory's in
name order, each scoped to its directory), appends `.spec.ignore`'s lines, and archives with fluxcd/pkg artifact
v0.18.1 `SourceIgnoreFilter`: the VCS patterns first, then those; only when there are none at all, the VCS
patterns and the default exclusions (`ExcludeExt`, `ExcludeCI`, `ExcludeExtra`). `Archive` walks every file,
into excluded directories too, and drops a file when the matcher says so: sourceignore's go-git matcher takes the
last pattern that matches the path (a pattern matching a directory above a file matches the file), an `!`
pattern keeping it. So unlike git, a later `!dir/` keeps files under a directory an earlier rule excluded.
Comment (`#`) and blank lines are skipped (sourceignore `ReadPatterns`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pathspec.patterns.gitignore.basic import GitIgnoreBasicPattern

# fluxcd/pkg sourceignore/sourceignore.go at sourceignore/v0.18.0 (the version source-controller v1.9.1's go.mod
# requires): ExcludeVCS, then ExcludeExt, ExcludeCI and ExcludeExtra.
EXCLUDE_VCS = (".git/", ".gitignore", ".gitmodules", ".gitattributes")
EXCLUDE_DEFAULT = ("*.jpg", "*.jpeg", "*.gif", "*.png", "*.wmv", "*.flv", "*.tar.gz", "*.zip",
                   ".github/", ".circleci/", ".travis.yml", ".gitlab-ci.yml", "appveyor.yml", ".drone.yml",
                   "cloudbuild.yaml", "codeship-services.yml", "codeship-steps.yml",
                   "**/.goreleaser.yml", "**/.sops.yaml", "**/.flux.yaml")


@dataclass(frozen=True)
class Rule:
    domain: tuple[str, ...]  # the directory whose .sourceignore it came from; () for the root and spec.ignore
    line: str
    pattern: GitIgnoreBasicPattern

    def verdict(self, parts: tuple[str, ...]) -> bool | None:
        """True: excluded, False: kept (`!`), None: the rule does not match the file or a directory above it."""
        if len(parts) <= len(self.domain) or parts[:len(self.domain)] != self.domain:
            return None
        rest = parts[len(self.domain):]
        candidates = ["/".join(rest[:i]) + "/" for i in range(1, len(rest))] + ["/".join(rest)]
        if any(self.pattern.match_file(c) is not None for c in candidates):
            return bool(self.pattern.include)
        return None


def rules(lines: Iterable[str], domain: tuple[str, ...] = ()) -> list[Rule]:
    out = []
    for line in lines:
        if line.startswith("#") or not line.strip():
            continue
        pattern = GitIgnoreBasicPattern(line)
        assert pattern.include is not None, line  # pathspec skips nothing source-controller keeps
        out.append(Rule(domain, line, pattern))
    return out


def matcher(ignore: str | None, sourceignore_files: Mapping[str, str] | None = None) -> list[Rule]:
    """The rules in source-controller's order; `sourceignore_files`: a .sourceignore's text by its path."""
    loaded: list[Rule] = []
    for path in sorted(sourceignore_files or {}, key=lambda p: tuple(p.split("/")[:-1])):
        loaded += rules((sourceignore_files or {})[path].splitlines(), tuple(path.split("/")[:-1]))
    if ignore is not None:
        loaded += rules(ignore.splitlines())
    if loaded:
        return rules(EXCLUDE_VCS) + loaded
    return rules(EXCLUDE_VCS) + rules(EXCLUDE_DEFAULT)


def kept(path: str, ruleset: list[Rule]) -> bool:
    """Whether the file at `path` (relative to the tree's root) is in the artifact."""
    parts = tuple(path.split("/"))
    for rule in reversed(ruleset):
        verdict = rule.verdict(parts)
        if verdict is not None:
            return not verdict
    return True
