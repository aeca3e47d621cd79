"""`stackpin rollout gitops`: the Argo CD or Flux files that roll a revision out to a fleet in waves
(see stackpin.rollout.gitops). Registered under `rollout` in stackpin/cli/main.py's SUBCOMMANDS."""

from __future__ import annotations

from pathlib import Path

import click

from stackpin.cli.common import HISTORY, OUTPUT, emit, user_errors


@click.command("gitops")
@click.argument("fleet_file", metavar="FLEET", type=click.Path(dir_okay=False))
@click.argument("deployment", metavar="DEPLOYMENT@REV")
@click.option("--output-dir", "output_dir", required=True, metavar="DIR", type=click.Path(),
              help="Where to write: racks/<rack>/ and the tool's file (created if missing; its parent must exist).")
@click.option("--format", "fmt", required=True, type=click.Choice(["argocd", "flux"]),
              help="argocd: one ApplicationSet with a RollingSync by wave; flux: Kustomizations chained by dependsOn.")
@click.option("--repo-url", metavar="URL", help="argocd: the Git repository Argo CD reads (spec.source.repoURL).")
@click.option("--target-revision", metavar="REV", default="HEAD", show_default=True,
              help="argocd: the branch, tag or commit Argo CD reads.")
@click.option("--source", metavar="NAME", help="flux: the GitRepository in flux-system the Kustomizations read.")
@click.option("--repo-path", metavar="PATH",
              help="DIR's path inside the Git repository  [default: its path in the Git work tree holding it]")
@HISTORY
@OUTPUT
@user_errors
def gitops(fleet_file: str, deployment: str, output_dir: str, fmt: str, repo_url: str | None,
           target_revision: str, source: str | None, repo_path: str | None, history_dir: str, output: str) -> None:
    """Write each rack's deployment directory for revision DEPLOYMENT@REV and the Argo CD ApplicationSet
    or Flux Kustomizations that sync them wave by wave, the canary first. All files or none."""
    from stackpin.rollout.fleet import load_fleet
    from stackpin.rollout.gitops import GitOpsFormat, GitOpsOptions, default_repo_path, read_revision, write_gitops

    if fmt == "argocd" and source:
        raise click.UsageError("--source is for --format flux (argocd takes --repo-url)")
    if fmt == "flux" and (repo_url or target_revision != "HEAD"):
        raise click.UsageError("--repo-url and --target-revision are for --format argocd (flux takes --source)")
    loaded = load_fleet(fleet_file)
    revision = read_revision(Path(history_dir), deployment)
    out = Path(output_dir)
    options = GitOpsOptions(GitOpsFormat(fmt), repo_path if repo_path is not None else default_repo_path(out),
                            repo_url or "", target_revision, source or "")
    result = write_gitops(loaded, revision, out, options)
    if output != "text":
        emit(result.data(), output)
        return
    for name in result.files:
        click.echo(str(out / name))
    waves = "; ".join(f"{n}: {', '.join(w)}" for n, w in enumerate(result.waves, start=1))
    click.echo(f"wrote {len(result.files)} files for revision {result.revision} to fleet {result.fleet} "
               f"({fmt}; waves {waves})", err=True)
