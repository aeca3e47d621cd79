"""`stackpin bench run|job|merge|compare|attach`: measure a stack, compare two, gate on regressions.

Registered in stackpin/cli/main.py. The library (stackpin.bench) does the work; this module parses
and prints. Heavy imports stay inside the commands.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from stackpin.cli.common import HISTORY, OUTPUT, emit, emit_objects, file_only, finite, user_errors
from stackpin.cli.comparison import ALLOW_ACCEPTANCE_CHANGE
from stackpin.cli.complete import revisions

if TYPE_CHECKING:
    from stackpin.bench.replay import Progress
    from stackpin.bench.result import BenchResult, Point

LOCKDIR = click.option("--lockdir", default="lockfiles", show_default=True, type=click.Path(file_okay=False),
                       help="Where a profile's lock is looked up when LOCK is a profile.")


@click.group()
def bench() -> None:
    """Replay agent traces against a stack's endpoint, compare results, gate on regressions."""


@contextmanager
def _progress() -> Iterator[Progress]:
    """A live line on stderr when it is a terminal; nothing otherwise."""
    from stackpin.bench.replay import Progress

    def retry(point: Point) -> None:
        click.echo(f"warning: {point.agents} agent(s) not measured ({point.invalid}): measuring again", err=True)

    if not sys.stderr.isatty():
        yield Progress(retry=retry)
        return
    from rich.console import Console
    from rich.live import Live

    with Live("", console=Console(stderr=True), refresh_per_second=4, transient=True) as live:
        yield Progress(lambda agents, requests, errors, tokens: live.update(
            f"{agents} agent(s): {requests} requests, {errors} errors, {tokens} output tokens"), retry)


def _write_result(result: BenchResult, out: str) -> None:
    from stackpin.bench.result import result_json
    from stackpin.yamlio import write_output

    write_output(Path(out), result_json(result))


def _summary(result: BenchResult) -> dict[str, Any]:
    return {"stack": result.stack.name, "digest": result.stack.digest, "fingerprint": result.fingerprint,
            "interrupted": result.interrupted, "saturated": result.client.saturated,
            "simulated": result.simulation is not None, "servedModel": result.served_model,
            "tokenizer": result.client.tokenizer,
            "points": [{"agents": p.agents, "searched": p.searched, "requests": p.requests, "errors": p.errors,
                        "ttftP90S": p.ttft_s.p90, "itlP50S": p.itl_s.p50,
                        "tokenGapP50S": p.token_gap_s.p50 if p.token_gap_s else None,
                        "tokenGapP99S": p.token_gap_s.p99 if p.token_gap_s else None, "agentTpsMean": p.agent_tps.mean,
                        "outputTps": p.output_tps, "outputTpsPerGpu": p.output_tps_per_gpu,
                        "cacheHitRate": p.cache_hit_rate, "sloMet": p.slo_met, "invalid": p.invalid,
                        "acceptance": {"meanLength": p.acceptance.mean_length, "rates": list(p.acceptance.rates),
                                       "drafts": p.acceptance.drafts} if p.acceptance else None}
                       for p in result.points],
            "acceptanceFrom": result.acceptance_from,
            "score": result.score.model_dump(mode="json") if result.score else None}


def _print_result(result: BenchResult, out: str | None, output: str) -> None:
    from stackpin.bench.stats import PROMPT_TOLERANCE, prompts_off

    if output != "text":
        emit({**_summary(result), "out": out}, output)
        return
    sim = ""
    if result.simulation:
        by = "" if result.simulation.backend == "stackpin" else f"{result.simulation.backend} mocker, "
        sim = f", simulated ({by}{result.simulation.model}, speed {result.simulation.speed:g})"
    click.echo(f"stack {result.stack.name} {result.stack.digest[:19]} on {result.stack.gpus} GPU(s){sim}")
    header = ["AGENTS", "REQ", "ERR", "TTFT p50", "TTFT p90", "TTFT p99", "ITL p50", "GAP p50", "GAP p99",
              "TOK/S/AGENT", "TOK/S", "TOK/S/GPU", "CACHE", "SLO"]
    rows = []
    invalid = [p for p in result.points if p.invalid]
    for p in result.points:
        gap = p.token_gap_s
        if p.invalid:  # not a measurement: no number is printed for it
            rows.append([f"{p.agents}{'*' if p.searched else ''}", str(p.requests), str(p.errors), "invalid",
                         *[""] * (len(header) - 4)])
            continue
        rows.append([f"{p.agents}{'*' if p.searched else ''}", str(p.requests), str(p.errors),
                     f"{p.ttft_s.p50:.3f}s", f"{p.ttft_s.p90:.3f}s", f"{p.ttft_s.p99:.3f}s",
                     f"{p.itl_s.p50 * 1000:.2f}ms", f"{gap.p50 * 1000:.2f}ms" if gap else "-",
                     f"{gap.p99 * 1000:.2f}ms" if gap else "-", f"{p.agent_tps.mean:.1f}", f"{p.output_tps:.1f}",
                     f"{p.output_tps_per_gpu:.2f}", "-" if p.cache_hit_rate is None else f"{p.cache_hit_rate:.0%}",
                     "-" if p.slo_met is None else ("met" if p.slo_met else "missed")])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths,
                                                                                               strict=True))))
    click.echo("ITL: per request, (last token - first token) / (tokens - 1); GAP: every gap between token events")
    if any(p.searched for p in result.points):
        click.echo("* added by the SLO search")
    if result.score:
        from stackpin.bench.stats import slo_edge

        s = result.score
        edge = slo_edge(result.points, result.controls.slo) if result.controls.slo else None
        # a score whose edge was not located is a bound, and says so (bench compare judges it as one)
        bound = ">= " if edge is not None and edge.bound else ""
        at = f", {bound}{s.output_tps_per_gpu_at_slo:.2f} tok/s/GPU there" \
            if s.output_tps_per_gpu_at_slo is not None else ""
        single = any(p.agents == 1 and not p.invalid for p in result.points)
        said = f"single agent {s.single_agent_tps:.1f} tok/s" if single else "single agent not measured (invalid)"
        why = ""
        if edge is not None and edge.bound:
            why = (f" (a lower bound: the SLO held at every valid count measured, up to {edge.held.agents})"
                   if edge.failed is None and edge.held is not None else
                   f" (a lower bound: held at {edge.held.agents if edge.held else 0}, missed at "
                   f"{edge.failed.agents if edge.failed else '-'}, counts between not measured validly)")
        click.echo(f"score: {bound}{s.max_agents} agent(s) under the SLO{at}; {said}{why}")
    elif result.controls.slo and result.points and not any(not p.invalid for p in result.points):
        click.echo("score: none: no point is a measurement")
    for p in invalid:
        click.echo(f"warning: {p.agents} agents: invalid, {p.invalid}; measure it with fewer agents, a lower "
                   "simulator --speed or more --workers", err=True)
    off, counted = prompts_off(r for p in result.points for r in p.request_log)
    if off:
        click.echo(f"warning: {off} of {counted} prompts were off the trace's size by more than "
                   f"{PROMPT_TOLERANCE:.0%} in the server's count: the load is not the trace's (give the served "
                   "model's tokenizer.json with --tokenizer)", err=True)
    for line in ([result.client.note] if result.client.note else []) + (
            ["interrupted: the result holds what was measured before Ctrl-C"] if result.interrupted else []):
        click.echo(f"warning: {line}", err=True)
    if out:
        click.echo(f"wrote {out}", err=True)


@bench.command("run")
@click.option("--endpoint", required=True, metavar="URL", help="OpenAI-compatible server base URL (before /v1).")
@click.option("--trace", "trace_file", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="Mooncake/AIPerf JSONL trace (`stackpin trace gen`).")
@click.option("--lock", "lock_input", required=True, metavar="LOCK|DEPLOYMENT@REV",
              help="The stack behind the endpoint: a lockfile, a profile, or a revision of a deployment's history.")
@click.option("--agents", "agents_text", default="1,8,32", show_default=True, metavar="N,N,...",
              help="Concurrent agent counts to measure.")
@click.option("--slo", "slo_text", metavar="tps=T,ttft=S[,percentile=p90]|none",
              help="Score: the largest agent count (searched by bisection) in which every agent holds T tok/s and "
                   "the TTFT percentile is within S, with no failed request; and single-agent speed (default: the "
                   "profile's spec.service at p90; none: no score and no search).")
@click.option("--model", help="Model name to send (default: the endpoint's first in /v1/models, which must be the "
              "lock's; naming one measures it even when it is not, and the result records it).")
@click.option("--tokenizer", "tokenizer_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="The served model's tokenizer.json: prompts are built from its single-token words, so the "
                   "server counts the trace's tokens (default: the Dynamo bed's own; else stackpin's words, one "
                   "token each to its simulator only).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Client processes; agents are dealt among them.")
@click.option("--duration", "duration_text", metavar="SECONDS", help="Per agent count: start no turn after this.")
@click.option("--sessions", type=click.IntRange(min=1), help="Sessions each agent replays (default: enough for the "
              "agents to cover the trace once).")
@click.option("--delay-scale", type=finite(min=0), default=1.0, show_default=True,
              help="Factor on the trace's tool delays; 0 sends each turn as soon as the last answer ends.")
@click.option("--request-timeout", "timeout_text", default="300s", show_default=True, metavar="SECONDS",
              help="A request not finished by then is recorded as stalled.")
@click.option("--cache-salt", metavar="TEXT", help="Prefix of every prompt word, so that this run does not hit "
              "the prefix cache an earlier run filled (default: random per run).")
@click.option("--lag-limit", "lag_limit_text", default="10ms", show_default=True, metavar="SECONDS",
              envvar="STACKPIN_BENCH_LAG_LIMIT",
              help="A point whose client event-loop lag p99 (in the stack's time: wall lag x the simulator's speed) "
                   "reaches this is invalid: not printed, scored, compared or planned. It is the timestamp "
                   "precision the result claims.")
@click.option("--busy-limit", type=finite(min=0.01), default=0.9, show_default=True, envvar="STACKPIN_BENCH_BUSY_LIMIT",
              help="A point whose busiest client process used this share of a CPU is invalid: the client, not the "
                   "server, was the bottleneck.")
@click.option("--search-resolution", type=finite(min=0, max=1), default=0.0, show_default=True, metavar="FRACTION",
              help="Stop the SLO search when the count that held and the one that did not are within this fraction "
                   "of the first (0: to the agent). The score is the largest count measured to hold either way.")
@click.option("--retries", type=click.IntRange(min=0), default=1, show_default=True,
              help="Measure an invalid point again up to this many times (a passing load on the host often makes "
                   "one); the last measurement is kept, with how many it took.")
@click.option("--metrics", "metrics_urls", multiple=True, metavar="URL",
              help="A Prometheus page whose speculative-decoding counters (each engine's, as "
                   "stackpin/bench/acceptance.yaml names them) give each point's draft acceptance, summed over "
                   "every --metrics (default: the endpoint's /metrics; behind Dynamo's frontend, each worker's "
                   "system port: http://WORKER:PORT/metrics).")
@click.option("--pod-index", type=click.IntRange(min=0), default=0, hidden=True)
@click.option("--pods", type=click.IntRange(min=1), default=1, hidden=True)
@click.option("--out", required=True, type=click.Path(dir_okay=False), callback=file_only,
              help="The result file (JSON).")
@LOCKDIR
@HISTORY
@OUTPUT
@user_errors
def run(endpoint: str, trace_file: str, lock_input: str, agents_text: str, slo_text: str | None,
        model: str | None, tokenizer_file: str | None, workers: int, duration_text: str | None,
        sessions: int | None, delay_scale: float, timeout_text: str, cache_salt: str | None, lag_limit_text: str,
        busy_limit: float, search_resolution: float, retries: int, metrics_urls: tuple[str, ...], pod_index: int,
        pods: int, out: str, lockdir: str, history_dir: str, output: str) -> None:
    """Replay TRACE against ENDPOINT at each agent count and write one result bound to the stack.

    Each agent replays sessions one after another, sending the grown context each turn and waiting the
    trace's tool delay. Ctrl-C keeps what was measured (the result says it was interrupted).
    """
    import os
    import secrets
    import signal

    from stackpin.bench.binding import parse_agents, parse_seconds, slo_option
    from stackpin.bench.replay import RunOptions, run_bench
    from stackpin.bench.sessions import read_trace
    from stackpin.bench.specmetrics import check_url
    from stackpin.deploy.source import resolve_source
    from stackpin.errors import StackpinError

    for url in metrics_urls:
        check_url(url, "--metrics")
    if pod_index >= pods:
        raise StackpinError(f"--pod-index {pod_index} is not below --pods {pods}")
    source = resolve_source(lock_input, Path(lockdir), Path(history_dir))
    key = os.environ.get("STACKPIN_BENCH_API_KEY")
    vocabulary = None
    if tokenizer_file is not None:
        import hashlib

        from stackpin.bench.words import MAX_TOKENIZER_BYTES, from_tokenizer
        from stackpin.yamlio import read_regular

        try:
            data = read_regular(Path(tokenizer_file), MAX_TOKENIZER_BYTES)
        except OSError as exc:
            raise StackpinError(f"--tokenizer {tokenizer_file}: {exc.strerror or exc}") from None
        vocabulary = from_tokenizer(data, f"{Path(tokenizer_file).name} sha256:{hashlib.sha256(data).hexdigest()[:16]}")
    options = RunOptions(
        endpoint=endpoint, trace=read_trace(Path(trace_file)), agents=parse_agents(agents_text),
        slo=slo_option(slo_text, source.lock), model=model, workers=workers,
        duration_s=parse_seconds(duration_text, "--duration") if duration_text else None, sessions=sessions,
        delay_scale=delay_scale, timeout_s=parse_seconds(timeout_text, "--request-timeout"),
        headers={"Authorization": f"Bearer {key}"} if key else {}, pod_index=pod_index, pods=pods,
        cache_salt="".join(c for c in cache_salt if not c.isspace()) if cache_salt is not None
        else secrets.token_hex(3), vocabulary=vocabulary, lag_limit_s=parse_seconds(lag_limit_text, "--lag-limit"),
        busy_limit=busy_limit, search_resolution=search_resolution, retries=retries, metrics=metrics_urls)
    # run_bench returns with Ctrl-C ignored, so that what was measured is written and reported whole. After
    # an interrupted run it stays ignored: the user has asked to stop and the command is ending (a terminal
    # repeats Ctrl-C, users press it twice), and one arriving as the process exits would turn a kept
    # result into exit 130.
    original = signal.getsignal(signal.SIGINT)
    result = None
    try:
        with _progress() as progress:
            result = run_bench(options, source, progress)
        _write_result(result, out)
        _print_result(result, out, output)
    finally:
        if result is None or not result.interrupted:
            signal.signal(signal.SIGINT, original)


def _read(paths: tuple[str, ...]) -> list[BenchResult]:
    from stackpin.bench.resultfile import read_evidence

    return [read_evidence(Path(p)) for p in paths]


@bench.command("compare")
@click.argument("results", nargs=-1, metavar="[A.json B.json]")
@click.option("--a", "more_a", multiple=True, metavar="FILE", help="A run of stack A (repeat for repeated runs).")
@click.option("--b", "more_b", multiple=True, metavar="FILE", help="A run of stack B (repeat for repeated runs).")
@click.option("--threshold", "threshold_text", default="5%", show_default=True,
              help="Smallest relative change that counts as a regression or an improvement.")
@click.option("--agents", type=click.IntRange(min=1), help="Agent count to compare TTFT at (default: the largest "
              "every run measured).")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--resamples", type=click.IntRange(min=100, max=100_000), default=2000, show_default=True,
              help="Bootstrap resamples (at most 100,000: each costs a pass over every sample).")
@click.option("--force", is_flag=True, help="Compare even when trace, model build, precision or SLO differ.")
@ALLOW_ACCEPTANCE_CHANGE
@click.option("--acceptance-threshold", "acceptance_text", metavar="FRACTION", help="Largest relative difference of "
              "mean acceptance length compared without --allow-acceptance-change (default: 10%, "
              "stackpin/bench/acceptance.yaml says why).")
@click.option("--exit-code", is_flag=True, help="Exit 1 on a regression, 3 when the evidence is inconclusive (0: no "
              "significant change or an improvement).")
@OUTPUT
@user_errors
def compare(results: tuple[str, ...], more_a: tuple[str, ...], more_b: tuple[str, ...], threshold_text: str,
            agents: int | None, seed: int, resamples: int, force: bool, allow_acceptance_change: bool,
            acceptance_text: str | None, exit_code: bool, output: str) -> None:
    """Compare stack A's result(s) with stack B's: each headline (single-agent tok/s, max agents under
    the SLO, tok/s per GPU at the SLO, TTFT p90 at a common agent count) with a 95% bootstrap interval
    of the change and a verdict. Refused (exit 2) when the controls differ, unless --force, and when both
    sides measured draft acceptance and it differs past the threshold, unless --allow-acceptance-change.
    """
    from stackpin.bench.compare import compare as compare_results
    from stackpin.cli.comparison import print_comparison, threshold

    if len(results) not in (0, 2):
        raise click.UsageError("give A.json B.json, or --a FILE ... --b FILE ...")
    paths_a = (results[0],) + more_a if results else more_a
    paths_b = (results[1],) + more_b if results else more_b
    if not paths_a or not paths_b:
        raise click.UsageError("give A.json B.json, or --a FILE ... --b FILE ...")
    from stackpin.bench.binding import parse_threshold

    comparison = compare_results(_read(paths_a), _read(paths_b), threshold=threshold(threshold_text), seed=seed,
                                 resamples=resamples, agents=agents, force=force,
                                 allow_acceptance_change=allow_acceptance_change,
                                 acceptance_threshold=parse_threshold(acceptance_text, "--acceptance-threshold")
                                 if acceptance_text is not None else None)
    print_comparison(comparison, output)
    if exit_code:
        from stackpin.bench.compare import EXIT_INCONCLUSIVE, Verdict

        verdict = comparison.verdict
        sys.exit(1 if verdict is Verdict.regression else EXIT_INCONCLUSIVE if verdict is Verdict.inconclusive else 0)


@bench.command("attach")
@click.argument("revision_arg", metavar="DEPLOYMENT@REV", shell_complete=revisions)
@click.argument("result_file", metavar="RESULT.json", type=click.Path(dir_okay=False))
@click.option("--replace", is_flag=True, help="Replace a different result already attached to the revision.")
@HISTORY
@OUTPUT
@user_errors
def attach(revision_arg: str, result_file: str, replace: bool, history_dir: str, output: str) -> None:
    """Attach a bench result to a revision of a deployment's history (DEPLOYMENT alone: its newest).

    The result must have measured that revision's stack (its stack digest). `stackpin history` then
    shows the headline and `stackpin rollback --if-regressed` compares the newest two revisions' results.
    """
    from stackpin.bench.headline import headline
    from stackpin.bench.resultfile import read_evidence
    from stackpin.errors import StackpinError
    from stackpin.history.attachments import attach as attach_record
    from stackpin.history.store import HistoryStore

    store = HistoryStore(Path(history_dir))
    revision = store.query(revision_arg)
    key = revision.deployment
    result = read_evidence(Path(result_file))
    if result.stack.digest != revision.stack_digest:
        raise StackpinError(f"{result_file} measured stack {result.stack.name} {result.stack.digest}, but revision "
                            f"{revision.revision} of {key} is {revision.stack} {revision.stack_digest}")
    if result.shard is not None:
        raise StackpinError(f"{result_file} is one pod's part of a run (shard {result.shard.index} of "
                            f"{result.shard.count}): stackpin bench merge the parts first")
    text = Path(result_file).read_text(encoding="utf-8")
    path, what = attach_record(store, key, revision.revision, "bench", text, replace=replace)
    if output != "text":
        emit({"deployment": str(key), "revision": revision.revision, "file": str(path), "action": what,
              "headline": headline(result)}, output)
        return
    verb = {"created": "attached", "unchanged": "already attached", "replaced": "replaced"}[what]
    click.echo(f"{verb} {path}  revision {revision.revision} of {key}: {headline(result)}")


@bench.command("job")
@click.option("--lock", "lock_input", required=True, metavar="LOCK|DEPLOYMENT@REV", help="The stack to bench.")
@click.option("--endpoint", required=True, metavar="URL", help="The stack's frontend as the pods reach it, e.g. "
              "http://NAME-frontend.NAMESPACE.svc:8000.")
@click.option("--trace", "trace_file", required=True, type=click.Path(dir_okay=False), metavar="FILE")
@click.option("--pods", type=click.IntRange(min=1), required=True, help="Client pods; pod i runs the agents whose "
              "number modulo PODS is i.")
@click.option("--image", required=True, help="An image with stackpin installed (the pods run `stackpin bench run`).")
@click.option("--agents", "agents_text", default="1,8,32", show_default=True, metavar="N,N,...")
@click.option("--slo", "slo_text", metavar="tps=T,ttft=S[,percentile=p90]|none",
              help="As bench run's (default: the profile's spec.service).")
@click.option("--model")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Client processes a pod.")
@click.option("--duration", "duration_text", metavar="SECONDS")
@click.option("--sessions", type=click.IntRange(min=1))
@click.option("--delay-scale", type=finite(min=0), default=1.0, show_default=True)
@click.option("--request-timeout", "timeout_text", default="300s", show_default=True, metavar="SECONDS")
@click.option("--results-claim", metavar="PVC", help="An existing ReadWriteMany claim for the results (default: "
              "one is rendered).")
@click.option("--metrics", "metrics_urls", multiple=True, metavar="URL",
              help="As bench run's, as the pods reach it: a Prometheus page of the engines' speculative-decoding "
                   "counters (behind Dynamo's frontend, each worker's system port, e.g. "
                   "http://NAME-decode-0.NAMESPACE.svc:9090/metrics; default: the endpoint's /metrics).")
@click.option("-n", "--namespace", metavar="NAMESPACE", help="Namespace (default: the profile's metadata.namespace).")
@click.option("--out", "output_file", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write here instead of stdout (`-`: stdout).")
@LOCKDIR
@HISTORY
@OUTPUT
@user_errors
def job(lock_input: str, endpoint: str, trace_file: str, pods: int, image: str, agents_text: str,
        slo_text: str | None, model: str | None, workers: int, duration_text: str | None, sessions: int | None,
        delay_scale: float, timeout_text: str, results_claim: str | None, metrics_urls: tuple[str, ...],
        namespace: str | None, output_file: str | None, lockdir: str, history_dir: str, output: str) -> None:
    """Render an Indexed Job that runs the replay client in PODS pods next to the stack.

    Each pod writes result-<index>.json to the results volume; `stackpin bench merge` combines them.
    Validated against Kubernetes' schemas before anything is written.
    """

    from stackpin.bench.binding import parse_agents, parse_seconds, slo_option
    from stackpin.bench.job import job_objects
    from stackpin.bench.sessions import read_trace
    from stackpin.bench.specmetrics import check_url
    from stackpin.deploy.source import resolve_source
    from stackpin.errors import StackpinError
    from stackpin.lock.lockfile import render_lock
    from stackpin.validate.manifests import validate_objects

    for url in metrics_urls:
        check_url(url, "--metrics")  # a bad URL fails here, not in N pods
    source = resolve_source(lock_input, Path(lockdir), Path(history_dir))
    read_trace(Path(trace_file))  # a bad trace fails here, not in N pods
    objects = job_objects(
        source.lock, render_lock(source.lock), Path(trace_file).read_text(encoding="utf-8"), endpoint=endpoint,
        pods=pods, agents=parse_agents(agents_text), image=image, slo=slo_option(slo_text, source.lock),
        workers=workers, duration_s=parse_seconds(duration_text, "--duration") if duration_text else None,
        sessions=sessions, delay_scale=delay_scale, timeout_s=parse_seconds(timeout_text, "--request-timeout"),
        model=model, results_claim=results_claim, namespace=namespace, metrics=metrics_urls)
    errors = validate_objects([(f"bench-job#{i}", obj) for i, obj in enumerate(objects, 1)])
    if errors:
        raise StackpinError("\n".join(str(e) for e in errors))
    emit_objects(objects, f"stackpin bench job for {source.lock.metadata.name} ({source.lock.stack_digest}), "
                 f"{pods} pod(s)", output, output_file)


@bench.command("merge")
@click.argument("parts", nargs=-1, required=True, metavar="RESULT.json...")
@click.option("--out", required=True, type=click.Path(dir_okay=False), callback=file_only, help="The merged result.")
@OUTPUT
@user_errors
def merge(parts: tuple[str, ...], out: str, output: str) -> None:
    """Combine the pods' results of one `stackpin bench job` run into one result.

    Refused (exit 2) when the parts are not one run's: other controls or stack, a shard missing or twice.
    """
    from stackpin.bench.merge import merge as merge_parts

    result = merge_parts(_read(parts), parts)
    _write_result(result, out)
    _print_result(result, out, output)
