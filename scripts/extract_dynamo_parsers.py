"""Which tool-call and reasoning parsers a Dynamo release has, read from its published runtime wheel.

`dynamo.vllm --dyn-tool-call-parser` and `--dyn-reasoning-parser` take `choices=` from the compiled core
(`dynamo._core.get_tool_parser_names()` / `get_reasoning_parser_names()`, ai-dynamo 1.6.1
`dynamo/common/configuration/groups/runtime_args.py`): a name outside them stops the worker at start-up.
The names live in the Rust extension, not in Python source, so this script downloads the
`ai-dynamo-runtime` wheel of each release (pip, no dependencies), imports its core from the unpacked
wheel in a child interpreter and prints the YAML entries of stackpin/catalog/dynamo_parsers.yaml.

Run: `python scripts/extract_dynamo_parsers.py 1.6.1 [1.6.0 ...] >> stackpin/catalog/dynamo_parsers.yaml`
(needs the package index and an x86_64 Linux CPython >= 3.10; nothing is installed).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PROBE = ("import json; from dynamo._core import get_tool_parser_names as t, get_reasoning_parser_names as r; "
         "print(json.dumps({'tool': sorted(t()), 'reasoning': sorted(r())}))")


def parsers(version: str, work: Path) -> dict[str, object]:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                    f"ai-dynamo-runtime=={version}", "-d", str(work)], check=True)
    [wheel] = work.glob(f"ai_dynamo_runtime-{version}-*.whl")
    unpacked = work / "unpacked"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    found = json.loads(subprocess.run([sys.executable, "-c", PROBE], env={"PYTHONPATH": str(unpacked)},
                                      capture_output=True, text=True, check=True).stdout)
    return {"wheel": wheel.name, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(), **found}


def main() -> None:
    for version in sys.argv[1:]:
        with tempfile.TemporaryDirectory(prefix="dynamo-parsers-") as tmp:
            entry = parsers(version, Path(tmp))
        print(f'  "{version}":')
        print(f"    wheel: {entry['wheel']}")
        print(f"    sha256: {entry['sha256']}")
        print(f"    tool: [{', '.join(entry['tool'])}]")  # type: ignore[arg-type]
        print(f"    reasoning: [{', '.join(entry['reasoning'])}]")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
