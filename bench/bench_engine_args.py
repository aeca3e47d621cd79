"""What 50 engineArgs entries cost validation: each shipped stack with and without them, side by side.

The entries are 50 vLLM flags stackpin does not model, every one valid for the pinned vLLM (switches
and options with enforced choices), written into the stack's first pool; so every check of SP221-SP226
runs on each and none fires. Each row: median over RUNS of loading the profile and running every rule
(`stackpin validate`'s work in-process, the catalogs already read), and of building the stack's
objects from its lock (render's plan, which re-checks the passed flags). The aim: 50 entries add less
than 10 ms to validating one stack.

Run from the repository root: `python bench/bench_engine_args.py [RUNS]` (default 30).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import yaml

from stackpin.backends.vllm import MODELLED as MODELLED_VLLM
from stackpin.catalog.flags import vllm_catalog
from stackpin.lock.lockfile import StackLock, read_lock
from stackpin.profile.loader import load_profile
from stackpin.profile.topology import topology_of
from stackpin.render.build import build_objects
from stackpin.validate import run_rules

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devkit.timing import median_call_ms  # noqa: E402

ENTRIES = 50
AIM_MS = 10.0


def fifty_flags(vllm_version: str) -> dict[str, Any]:
    """ENTRIES unmodelled flags with values the pinned vLLM accepts: switches first, then choices."""
    catalog = vllm_catalog(vllm_version)
    assert catalog is not None
    modelled = set(MODELLED_VLLM)
    uses = [u for o in sorted(catalog.options) if o.startswith("--") and (u := catalog.resolve(o)) is not None]
    fields = {f for m in modelled if m in catalog.flags and (f := catalog.flags[m].config_field)}
    usable = [u for u in uses if u.flag not in modelled and u.deprecation is None and not u.option.hidden
              and u.option.config_field not in fields and not u.negative]
    switches = {u.string: True for u in usable if u.option.store_true or u.option.boolean_optional}
    choices = {u.string: catalog.enforced[u.string][0] for u in usable
               if u.string in catalog.enforced and u.string not in switches}
    picked = dict(list(switches.items())[:40] + list(choices.items())[:ENTRIES - min(40, len(switches))])
    assert len(picked) == ENTRIES, len(picked)
    return picked


def with_flags(profile: Path, out: Path) -> Path:
    """A profile extending `profile` whose first pool passes fifty_flags."""
    loaded = load_profile(profile)
    pool = topology_of(loaded.profile).pools[0]
    doc = {"apiVersion": "stackpin.dev/v1", "kind": "StackProfile", "extends": str(profile.resolve()),
           "metadata": {"name": loaded.profile.name},
           "spec": {"placement": {"pools": {pool.role: {"engineArgs": fifty_flags(
               loaded.profile.spec.versions.vllm)}}}}}
    out.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return out


def lock_with_flags(lock: StackLock, flags_profile: Path) -> StackLock:
    """The shipped lock with the flags in its profile (render reads the lock's profile, not the file)."""
    data = lock.to_data()
    data["profile"] = load_profile(flags_profile).profile.model_dump(mode="json", by_alias=True, exclude={"extends"})
    return msgspec.convert(data, StackLock)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    profiles = sorted((ROOT / "profiles" / "deepseek-v4.1-flash").glob("*.yaml"))
    print(f"median over {runs} runs; {ENTRIES} engineArgs entries in the first pool (valid for the pinned vLLM)")
    print(f"{'stack':<28} {'validate':>9} {'+50 args':>9} {'overhead':>9} {'per entry':>10}   "
          f"{'render':>8} {'+50 args':>9}")
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="bench-engine-args-") as tmp:
        for profile in profiles:
            flagged = with_flags(profile, Path(tmp) / profile.name)
            findings = run_rules(load_profile(flagged))
            passed = [f for f in findings if f.code.startswith("SP22")]
            assert not passed, [str(f) for f in passed]
            plain = median_call_ms(lambda p=profile: run_rules(load_profile(p)), runs)
            extra = median_call_ms(lambda p=flagged: run_rules(load_profile(p)), runs)
            lock = read_lock(ROOT / "lockfiles" / f"{profile.stem}.lock.yaml")
            flagged_lock = lock_with_flags(lock, flagged)
            render_plain = median_call_ms(lambda lk=lock: build_objects(lk), runs)
            render_extra = median_call_ms(lambda lk=flagged_lock: build_objects(lk), runs)
            overhead = extra - plain
            worst = max(worst, overhead)
            print(f"{profile.stem:<28} {plain:>7.2f}ms {extra:>7.2f}ms {overhead:>7.2f}ms "
                  f"{overhead / ENTRIES * 1000:>8.1f}us   {render_plain:>6.2f}ms {render_extra:>7.2f}ms")
    verdict = "met" if worst < AIM_MS else "NOT met"
    print(f"aim: {ENTRIES} engineArgs entries add under {AIM_MS:g} ms to validating a stack: worst "
          f"{worst:.2f} ms: {verdict}")


if __name__ == "__main__":
    main()
