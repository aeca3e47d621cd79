"""Rewrite the docs' runnable blocks from a real run: python scripts/update_docs.py [DOC...] [--check].

Each marked block (devkit/docrun.py; the convention: docs/README.md) is run in a scratch copy of the
repository, as tests/test_docs_run.py runs it; a block whose doc no longer shows what it printed gets the
printed output in its place (a block that still matches, `...` lines and all, is left as it is). Files a
block lists under `images` are copied from the same run into the repository. Sessions that need what is
missing here (the `sim` extra; a cluster: the envtest kube-apiserver, started once when a session needs it,
as tests/kube.py starts it) are left alone and named. --check only reports, exit 1 on a difference.
--coverage prints, per doc, how many documented commands the tests run and lists the lines of the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devkit import docrun  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("docs", nargs="*", help="README.md or docs/NAME.md (default: all)")
    parser.add_argument("--check", action="store_true", help="report differences, change nothing")
    parser.add_argument("--coverage", action="store_true", help="print the documented commands the tests run")
    args = parser.parse_args()
    if args.coverage:
        return print_coverage([str(Path(d)) for d in args.docs] or None)
    differs = 0
    cluster: dict[str, str] | None = None
    with tempfile.TemporaryDirectory(prefix="stackpin-update-docs-") as tmp, contextlib.ExitStack() as stack:
        for doc in [str(Path(d)) for d in args.docs] or docrun.DOCS:
            stale: list[docrun.Ran] = []
            for n, session in enumerate(docrun.sessions([doc])):
                if "cluster" in session.needs and cluster is None:
                    cluster = start_cluster(stack, Path(tmp) / "envtest")
                reason = docrun.missing(session, cluster=bool(cluster))
                if reason:
                    print(f"skipped  {session.id}: {reason}", file=sys.stderr)
                    continue
                base = Path(tmp) / doc.replace("/", "_") / str(n)
                for ran in docrun.run_session(session, base, cluster if "cluster" in session.needs else None):
                    if docrun.mismatch(ran) is not None:
                        stale.append(ran)
                        print(f"{'differs' if args.check else 'updated'}  {ran.block.where}", file=sys.stderr)
                    if not args.check:
                        for image in docrun.images(ran.block):
                            shutil.copyfile(base / "repo" / image, docrun.ROOT / image)
                            print(f"image    {image}", file=sys.stderr)
            differs += len(stale)
            if stale and not args.check:
                path = docrun.ROOT / doc
                path.write_text(docrun.rewrite(path.read_text(), doc, stale))
    return 1 if args.check and differs else 0


def print_coverage(docs: list[str] | None) -> int:
    found = docrun.coverage(docs)
    for c in found:
        if c.documented:
            print(f"{c.doc:28} run {len(c.executed):3} of {c.documented:3}  excused {len(c.excused):2}  "
                  f"not run: {' '.join(map(str, c.unrun)) or '-'}")
    ran, excused, total = (sum(len(c.executed) for c in found), sum(len(c.excused) for c in found),
                           sum(c.documented for c in found))
    print(f"run {ran} of {total} documented commands ({ran / max(total, 1):.0%}); {excused} excused (a GPU, "
          f"the internet); run of the rest: {ran / max(total - excused, 1):.0%}")
    return 0


def start_cluster(stack: contextlib.ExitStack, workdir: Path) -> dict[str, str]:
    """The tests' API server (devkit/envtest.py, with tests/kube.py's rack nodes), or {} where it cannot start."""
    from devkit.envtest import EnvtestUnavailable, start_envtest
    from tests.kube import add_rack_nodes

    workdir.mkdir(parents=True)
    try:
        env = stack.enter_context(start_envtest(workdir))
    except EnvtestUnavailable as exc:
        print(f"no Kubernetes API server: {exc}", file=sys.stderr)
        return {}
    add_rack_nodes(env)
    return {"KUBECONFIG": str(env.kubeconfig)}


if __name__ == "__main__":
    sys.exit(main())
