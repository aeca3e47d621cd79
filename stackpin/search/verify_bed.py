"""`search --verify bed`: the base and each pick that passed the lock and the engine check benched on a bed
(the Dynamo bed: Dynamo's own frontend, KV router and mocker timed from each lock), with one trace, one set
of controls and one SLO, alternated (ABBA: `upgrade.trialbed.alternate`, as `upgrade trial` benches) and
repeated, each pick judged against the base by `bench compare`'s verdict model and ranked by what was
measured. The base is benched beside each pick (a bed of each, started for the pair), so every pick's
comparison is of runs made in the same minutes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from stackpin.bench.compare import compare
from stackpin.bench.controlled import BenchControls, compared_slo
from stackpin.errors import StackpinError
from stackpin.search.verify import (
    Note,
    Outcome,
    PickVerification,
    Verification,
    VerifyOptions,
    check_all,
    fresh_results,
    judged,
    pick_files,
    prefixed,
    ranked,
    unmeasured,
    write_records,
)
from stackpin.upgrade.trialbed import Bed, DynamoBed, alternate, endpoints


def bed_name(bed: Bed) -> str:
    return "dynamo bed" if isinstance(bed, DynamoBed) else type(bed).__name__


def verify_bed(base: Path, picks: Sequence[Path], bed: Bed, controls: BenchControls, trace_name: str, *,
               slo_text: str | None = None, options: VerifyOptions | None = None,
               on_note: Note | None = None) -> Verification:
    """Lock and engine-check the base and `picks`, bench each pick that passed against the base on `bed`
    (`options.runs` runs a side, alternated), judge, rank; write each pick's lock, results and record. The
    SLO is `slo_text` as bench run reads it (absent: the base's spec.service), the same for every stack."""
    from stackpin.plan.slo import slo_text as format_slo

    note = on_note or (lambda _: None)
    options = options or VerifyOptions()
    checked_base, checked = check_all(base, picks, options, note)
    assert checked_base.lock is not None
    controls = replace(controls, slo=compared_slo(slo_text, checked_base.lock, controls.agents))
    slo = None if controls.slo is None else format_slo(controls.slo)
    where = bed_name(bed)
    records: list[tuple[Path, PickVerification]] = []
    for pick in checked:
        record_path = pick_files(pick.profile)[2]
        if pick.refused:
            records.append((record_path, unmeasured(pick, checked_base, where, trace_name, slo, options,
                                                    Outcome.refused, pick.problems)))
            continue
        record = unmeasured(pick, checked_base, where, trace_name, slo, options, Outcome.failed, ())
        results = fresh_results(pick.profile)
        try:
            with endpoints(bed, checked_base.source, pick.source) as urls:
                base_runs, pick_runs = alternate(urls, (checked_base.source, pick.source), ("base", "pick"),
                                                 controls, options.runs, results, prefixed(note, f"{pick.profile}: "))
            comparison = compare([r for _, r in base_runs], [r for _, r in pick_runs], threshold=options.threshold)
        except StackpinError as exc:  # the bed would not serve it, a run failed: measured it is not
            problem = " ".join(" ".join(exc.lines()).split())
            note(f"pick {pick.profile}: failed on the {where}: {problem}")
            records.append((record_path, record.model_copy(update={"problems": [problem]})))
            continue
        record = record.model_copy(update={"base_results": [str(p) for p, _ in base_runs],
                                           "pick_results": [str(p) for p, _ in pick_runs]})
        records.append((record_path, judged(record, comparison)))
    out = ranked(records)
    write_records(out)
    return Verification(base, where, out)
