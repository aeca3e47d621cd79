"""stackpin site probe: what one GPU node's driver reports, as one line a log reader can find.

Shipped by `stackpin site probe` in a ConfigMap and run by each probe Job pod with the image's own Python;
stackpin never imports it: it uses the standard library only, so that it runs in any image with python3.

    python3 probe.py PLATFORM

Prints one line, `stackpin-site-probe: {json}`, with the node's name (NODE_NAME, from the downward API), the
platform the probe was made for, the time (UTC), and what nvidia-smi printed, verbatim: its --query-gpu CSV
(name, memory.total, driver_version, power.limit, compute_cap; no header, no units) and its summary's header
lines (where the CUDA version is: --query-gpu has no field for it). `stackpin site import` parses them.
Exit 0 once the line is printed, whatever nvidia-smi did (its exit status and stderr are in the line).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys

PREFIX = "stackpin-site-probe: "
QUERY = "name,memory.total,driver_version,power.limit,compute_cap"
TIMEOUT_S = 60
MAX_CHARS = 16384  # per output: a node has a few GPUs; nvidia-smi's summary is a page


def run(args: list[str]) -> dict[str, object]:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"exit": None, "stdout": "", "stderr": str(exc)[:MAX_CHARS]}
    return {"exit": done.returncode, "stdout": done.stdout[:MAX_CHARS], "stderr": done.stderr[:MAX_CHARS]}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: probe.py PLATFORM", file=sys.stderr)
        return 2
    smi = shutil.which("nvidia-smi")
    line = {"v": 1, "node": os.environ.get("NODE_NAME", ""), "platform": argv[1],
            "at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}  # noqa: UP017 - any python3
    if smi is None:
        line["error"] = "nvidia-smi is not on PATH (does the pod request GPUs, and the runtime inject the driver?)"
    else:
        line["query"] = run([smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"])
        summary = run([smi])
        # The header lines only ("| NVIDIA-SMI 580.65.06  Driver Version: ...  CUDA Version: 13.0 |").
        summary["stdout"] = "\n".join(str(summary["stdout"]).splitlines()[:4])
        line["summary"] = summary
    print(PREFIX + json.dumps(line, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
