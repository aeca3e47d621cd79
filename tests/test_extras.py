"""The install's split (pyproject.toml's extras, stackpin/extras.py): validate, lock, render, diff and history run
with every package only an extra brings missing, and a command whose extra is missing names the extra to install,
in one line, exit 2.

The packages are missing for real: the CLI runs in a subprocess whose import system refuses them (a meta-path
finder raising ModuleNotFoundError, as Python does for a package that is not installed), so an import that is
not lazy, or not behind `stackpin.extras.require`, fails these tests.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from stackpin.extras import EXTRAS
from stackpin.lock.lockfile import read_lock
from stackpin.profile.loader import load_profile
from stackpin.render.output import render_stack
from tests import benchdata
from tests.kube import Kube
from tests.lockkit import PROFILES_DIR, ROOT, fill_mirror

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
OPTIONAL = PROJECT["optional-dependencies"]
LAUNCH, TUNED = PROFILES_DIR / "gb300-launch.yaml", PROFILES_DIR / "gb300-tuned.yaml"
DEPLOYMENT = "dynamo/dsv41-flash@gb300-nvl72"

# Runs the CLI with the modules named in argv[1] (comma-separated) refused, as if not installed.
BLOCKED_CLI = """
import sys

class Missing:
    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing(frozenset(sys.argv[1].split(","))))
from stackpin.cli.main import main

main(sys.argv[2:], prog_name="stackpin")
"""


def _closure(requirements: list[str]) -> set[str]:
    """The installed distributions these requirements bring, their dependencies' included (no extras of theirs)."""
    seen: set[str] = set()
    todo = list(requirements)
    while todo:
        requirement = Requirement(todo.pop())
        name = canonicalize_name(requirement.name)
        if name == "stackpin":  # `all` names the other extras
            todo.extend(r for extra in requirement.extras for r in OPTIONAL[extra])
            continue
        if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            todo.extend(metadata.distribution(name).requires or [])
        except metadata.PackageNotFoundError:
            pass  # an optional part not installed here: the tests below say so where it matters
    return seen


@cache
def _modules_of() -> dict[str, set[str]]:
    """distribution -> the top-level modules it installs."""
    out: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            out.setdefault(canonicalize_name(dist), set()).add(module)
    return out


def _modules(distributions: set[str]) -> set[str]:
    return set().union(*(_modules_of().get(d, set()) for d in distributions))


@cache
def extras_only() -> frozenset[str]:
    """Every top-level module that only an extra brings: what `pip install stackpin` does not install."""
    extras = _closure([r for name, reqs in OPTIONAL.items() if name != "test" for r in reqs])
    core = _closure(PROJECT["dependencies"])
    return frozenset(_modules(extras - core) - _modules(core))


def cli(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`stackpin ARGS` with every extra missing."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "STACKPIN_AUTHOR": "Test <test@example.com>",
           "SOURCE_DATE_EPOCH": "1767225600"}
    for name in ("STACKPIN_SIGNING_KEY", "STACKPIN_ALLOWED_SIGNERS"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-c", BLOCKED_CLI, ",".join(sorted(extras_only())), *map(str, args)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def test_the_extras_table_matches_pyproject() -> None:
    """Each extra's modules come with its requirements and not with the core's; `all` is every extra."""
    core = _modules(_closure(PROJECT["dependencies"]))
    assert set(EXTRAS) | {"all", "test"} == set(OPTIONAL)
    assert OPTIONAL["all"] == [f"stackpin[{','.join(sorted(EXTRAS, key=list(EXTRAS).index))}]"]
    for name, modules in EXTRAS.items():
        brought = _modules(_closure(OPTIONAL[name]))
        if not brought:
            pytest.skip(f"the `{name}` extra is not installed here: pip install -e '.[all,test]'")
        assert set(modules) <= brought, name
        assert not set(modules) & core, f"{name}: the core already brings {set(modules) & core}"


def test_the_heavy_packages_are_extras() -> None:
    """The packages that made the core install 497 MB are what the tests below make missing."""
    assert {"kubernetes_validate", "matplotlib", "numpy", "jinja2", "cryptography", "sshsig",
            "tokenizers"} <= extras_only()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The launch and tuned stacks locked against the demo mirror and rendered, promoted as revisions 1 and 2
    of their deployment, all by the CLI with every extra missing."""
    site = tmp_path_factory.mktemp("core")
    fill_mirror(site / "mirror", [load_profile(LAUNCH), load_profile(TUNED)])
    ok(cli("lock", LAUNCH, TUNED, "--lockdir", "lockfiles", "--oci-layout", "mirror/oci", "--hf-cache", "mirror/hf",
           cwd=site))
    for name in ("launch", "tuned"):
        ok(cli("promote", f"lockfiles/gb300-{name}.lock.yaml", "-m", name, cwd=site))
    benchdata.write(benchdata.launch(read_lock(site / "lockfiles/gb300-launch.lock.yaml").stack_digest),
                    site / "launch.json")
    return site


def test_validate_runs_without_extras(tmp_path: Path) -> None:
    out = ok(cli("validate", ROOT / "profiles", cwd=tmp_path))
    assert "gb300-launch" in out


def test_lock_runs_without_extras(site: Path) -> None:
    locks = sorted(p.name for p in (site / "lockfiles").iterdir())
    assert locks == ["gb300-launch.lock.yaml", "gb300-tuned.lock.yaml"]
    ok(cli("lock", LAUNCH, TUNED, "--lockdir", "lockfiles", "--offline", "--check", cwd=site))


def test_render_runs_without_extras_and_writes_what_a_full_install_writes(site: Path) -> None:
    result = cli("render", "--lockdir", "lockfiles", "--output-dir", "out", cwd=site)
    ok(result)
    # The custom resources are checked against the bundled CRDs either way; the ConfigMap's schema is the extra's.
    assert result.stderr == ("note: built-in kinds (the ConfigMaps) not checked against Kubernetes' schemas: that "
                             "needs the `manifests` extra (pip install 'stackpin[manifests]')\n")
    for name in ("launch", "tuned"):
        full = render_stack(read_lock(site / f"lockfiles/gb300-{name}.lock.yaml"))
        written = {p.name: p.read_text(encoding="utf-8") for p in (site / "out" / full.name).iterdir()}
        assert written == full.files


def test_render_checks_custom_resources_without_extras(tmp_path: Path) -> None:
    """Without the `manifests` extra, what render checks its objects with still refuses a bad custom resource
    (bundled CRDs, core jsonschema); a built-in kind passes unchecked."""
    objects = [("dgd", {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
                        "metadata": {"name": "a"}, "spec": {"bogus": 1}}),
               ("cm", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"k": 1}})]
    code = BLOCKED_CLI.replace("from stackpin.cli.main import main\n\nmain(sys.argv[2:], prog_name=\"stackpin\")",
                               "from stackpin.validate.manifests import validate_objects\n"
                               f"print(*validate_objects({objects!r}, builtin_optional=True), sep='\\n')")
    result = subprocess.run([sys.executable, "-c", code, ",".join(sorted(extras_only()))], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "dgd: DynamoGraphDeployment/a: spec.bogus: unknown field\n"


def test_diff_runs_without_extras(site: Path) -> None:
    out = ok(cli("diff", "lockfiles/gb300-launch.lock.yaml", "lockfiles/gb300-tuned.lock.yaml", cwd=site))
    assert out.strip()


def test_history_runs_without_extras(site: Path) -> None:
    out = ok(cli("history", DEPLOYMENT, cwd=site))
    assert "launch" in out and "tuned" in out
    ok(cli("history", "--check", cwd=site))
    ok(cli("history", "--verify", cwd=site))


def test_the_cluster_commands_need_the_cluster_extra(site: Path, kube: Kube) -> None:
    """apply, status and diff against the live stack, with every extra missing: one line naming the `cluster`
    extra (the official Kubernetes client), before any request."""
    config = ("--kubeconfig", str(kube.kubeconfig), "-n", kube.namespace)
    for args in (("apply", "lockfiles/gb300-launch.lock.yaml", "--allow-stand-ins"), ("status", "dsv41-flash"),
                 ("diff", "dsv41-flash@live", "lockfiles/gb300-launch.lock.yaml")):
        result = cli(*args, *config, cwd=site)
        assert result.returncode == 2 and result.stderr == _needs(f"stackpin {args[0]}", "cluster"), result.stderr
    assert kube.everything() == {}


def _needs(command: str, extra: str) -> str:
    missing = ", ".join(EXTRAS[extra])
    return f"error: `{command}` needs the `{extra}` extra ({missing} not installed): pip install 'stackpin[{extra}]'\n"


MISSING = [
    (("report", DEPLOYMENT, "--out", "report.html"), "stackpin report", "report"),
    (("bench", "plot", "launch.json", "--out", "curve.png"), "stackpin bench plot", "plot"),
    (("plan", "launch.json", "--agents", "1000", "--chart", "plan.png"), "stackpin plan", "plot"),
    (("validate", "--manifests", "out"), "stackpin validate --manifests", "manifests"),
    (("bench", "job", "--lock", "lockfiles/gb300-launch.lock.yaml", "--endpoint", "http://frontend:8000",
      "--trace", "agents.jsonl", "--pods", "2", "--image", "example.com/stackpin:1"), "stackpin bench job",
     "manifests"),
    (("promote", "lockfiles/gb300-launch.lock.yaml", "-m", "signed", "--allow-same", "--signing-key", "id_ed25519"),
     "stackpin promote", "signing"),
    (("history", "--verify", "--allowed-signers", "allowed_signers"), "stackpin history", "signing"),
    (("bench", "run", "--endpoint", "http://127.0.0.1:9", "--trace", "agents.jsonl", "--lock",
      "lockfiles/gb300-launch.lock.yaml", "--agents", "1", "--tokenizer", "tokenizer.json", "--out", "r.json"),
     "stackpin bench run", "tokenizer"),
]


@pytest.mark.parametrize(("args", "command", "extra"), MISSING, ids=[f"{c[1]}-{c[2]}" for c in MISSING])
def test_a_command_whose_extra_is_missing_names_it(site: Path, args: tuple[str, ...], command: str,
                                                   extra: str) -> None:
    for name, text in (("id_ed25519", "not read: the extra is asked for first\n"), ("allowed_signers", "\n"),
                       ("tokenizer.json", "{}\n")):
        (site / name).write_text(text, encoding="utf-8")
    if not (site / "agents.jsonl").exists():
        ok(cli("trace", "gen", "--sessions", "2", "--seed", "1", "--out", "agents.jsonl", cwd=site))
    (site / "out").mkdir(exist_ok=True)
    before = _files(site)
    result = cli(*args, cwd=site)
    assert (result.returncode, result.stderr, result.stdout) == (2, _needs(command, extra), "")
    assert _files(site) == before  # nothing written


def _files(root: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in root.rglob("*") if p.is_file()}
