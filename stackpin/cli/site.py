"""stackpin site probe / site import: measure a site's GPU nodes and write its site overlay (docs/site.md)."""

from __future__ import annotations

from pathlib import Path

import click

from stackpin.cli.common import STDOUT, cluster_options, connect_cluster, emit_objects, user_errors, write_out


@click.group()
def site() -> None:
    """Site facts: measure the GPU nodes, write site.yaml (read before the catalog)."""


def _selector(values: tuple[str, ...]) -> dict[str, str] | None:
    if not values:
        return None
    out = {}
    for value in values:
        key, sep, label = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", param_hint="--selector")
        out[key] = label
    return out


@site.command()
@click.argument("profile", required=False, type=click.Path(dir_okay=False))
@click.option("--platform", "platform", metavar="PLATFORM", help="Probe a catalog platform (instead of a profile's).")
@click.option("--image", metavar="IMAGE", help="Image with python3 the probe runs in [default: the profile's runtime "
              "image].")
@click.option("--nodes", type=click.IntRange(min=1), help="Nodes to probe [default: the platform's nodes x the "
              "profile's target count].")
@click.option("--selector", multiple=True, metavar="KEY=VALUE", help="Node labels to select instead of the "
              "catalog's (repeatable): where its label is an estimate no node carries.")
@click.option("--apply", "apply_", is_flag=True, help="Apply the objects to the cluster (server-side apply).")
@click.option("--out", "out", metavar="FILE", help="Write the objects to FILE [default: stdout].")
@cluster_options
@user_errors
def probe(profile: str | None, platform: str | None, image: str | None, nodes: int | None, selector: tuple[str, ...],
          apply_: bool, out: str | None, kubeconfig: str | None, context: str | None, namespace: str | None) -> None:
    """The Job that records, on each GPU node of a platform, what nvidia-smi reports (one
    `stackpin-site-probe:` line per node in its pod's log). Apply it, wait for it, then
    `kubectl logs -l stackpin.dev/site-probe --tail=-1 > probe.log` and `stackpin site import probe.log`."""
    from stackpin.catalog import load_catalog
    from stackpin.errors import StackpinError
    from stackpin.site.probe import probe_objects

    labels = _selector(selector)
    count = nodes
    if profile is not None:
        from stackpin.profile.loader import load_profile

        loaded = load_profile(profile).profile
        platform = platform or loaded.spec.target.platform
        image = image or loaded.spec.versions.runtime_image
        labels = labels if labels is not None else loaded.spec.target.node_labels
        if count is None and platform == loaded.spec.target.platform:
            count = load_catalog().bundled_hardware.platforms[platform].nodes * loaded.spec.target.count
        namespace = namespace or loaded.metadata.namespace
    catalog = load_catalog()
    if platform is None:
        raise StackpinError("name a PROFILE or --platform", "stackpin site probe --platform P --image IMAGE")
    if platform not in catalog.bundled_hardware.platforms:
        raise StackpinError(f"--platform {platform}: not a catalog platform (known: "
                            f"{', '.join(catalog.bundled_hardware.platforms)})")
    if image is None:
        raise StackpinError("--image: the probe needs an image with python3 (the stack's runtime image has it)")
    objects = probe_objects(catalog, platform, image=image, namespace=namespace or "default", nodes=count,
                            selector=labels)
    if apply_:
        from stackpin.site.cluster import apply_probe

        cluster = connect_cluster(kubeconfig, context)
        for done in apply_probe(cluster, objects):
            click.echo(f"applied {done} ({cluster.context})", err=True)
        if out is None:
            return
    emit_objects(objects, f"stackpin site probe for {platform}: kubectl apply -f this, then stackpin site import",
                 "yaml", out)


@site.command(name="import")
@click.argument("logs", required=False, type=click.Path(dir_okay=False))
@click.option("--from-cluster", is_flag=True, help="Read the GPU nodes' Node objects too (labels, allocatable "
              "GPUs) and whether ComputeDomains are served.")
@click.option("--selector", default="", metavar="SELECTOR", help="Label selector of the Node objects to read.")
@click.option("--platform", "platform", metavar="PLATFORM", help="The platform of Node objects no probe line names.")
@click.option("--strict", is_flag=True, help="Write strict: true (the attestation fails a pod on a GPU name that is "
              "still the catalog's estimate).")
@click.option("--out", "out", default=STDOUT, show_default=True, metavar="FILE",
              help="Where to write site.yaml (put it in a site catalog directory).")
@cluster_options
@user_errors
def import_(logs: str | None, from_cluster: bool, selector: str, platform: str | None, strict: bool, out: str,
            kubeconfig: str | None, context: str | None, namespace: str | None) -> None:  # noqa: ARG001 - cluster-wide
    """Turn the probe's pod logs (LOGS) and, with --from-cluster, the Node objects into a site overlay."""
    import datetime

    from stackpin.catalog import load_catalog
    from stackpin.errors import StackpinError
    from stackpin.site.facts import build_site, site_yaml
    from stackpin.site.readings import read_logs

    if logs is None and not from_cluster:
        raise StackpinError("give the probe's LOGS file, --from-cluster, or both")
    readings = read_logs(Path(logs)) if logs is not None else []
    nodes, imex = [], None
    if from_cluster:
        from stackpin.site.cluster import compute_domains_served, gpu_nodes

        cluster = connect_cluster(kubeconfig, context)
        nodes = gpu_nodes(cluster, selector)
        imex = compute_domains_served(cluster)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    facts, problems = build_site(readings, nodes, platforms=set(load_catalog().bundled_hardware.platforms),
                                 platform=platform, imex_crd=imex, now=now, strict=strict)
    for problem in problems:
        click.echo(f"warning: not measured: {problem}", err=True)
    write_out(out, site_yaml(facts, problems))
    if out != STDOUT:
        click.echo(f"wrote {out} ({', '.join(facts.platforms)})", err=True)
