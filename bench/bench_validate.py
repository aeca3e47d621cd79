"""Per-object validation time: kubernetes-validate versus stackpin's cached validators.

Run from the repository root: `python bench/bench_validate.py [N]` (N defaults to 200).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from stackpin.validate.manifests import validate_objects

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devkit.timing import median_call_ms  # noqa: E402

DGD_EXAMPLE = ROOT / "tests" / "data" / "upstream" / "examples_backends_vllm_deploy_v1beta1_disagg.yaml"
K8S_VERSION = "1.37.0"

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "bench", "namespace": "serving", "labels": {"app": "bench"}},
    "spec": {
        "containers": [{
            "name": "main",
            "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.2.0",
            "args": ["python3", "-m", "dynamo.frontend"],
            "ports": [{"containerPort": 8000, "name": "http"}],
            "resources": {"limits": {"cpu": "4", "memory": "16Gi"}},
        }],
        "restartPolicy": "Always",
    },
}


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    dgd = yaml.safe_load(DGD_EXAMPLE.read_text())
    for origin, obj in (("pod", POD), ("dgd", dgd)):
        errors = validate_objects([(origin, obj)])
        assert not errors, [str(e) for e in errors]

    k8s_pod = median_call_ms(lambda: kubernetes_validate.validate(POD, K8S_VERSION, strict=True), runs)
    ours_pod = median_call_ms(lambda: validate_objects([("pod", POD)]), runs)
    ours_dgd = median_call_ms(lambda: validate_objects([("dgd", dgd)]), runs)

    rows = [
        ("Pod", "kubernetes-validate", k8s_pod, ""),
        ("Pod", "stackpin", ours_pod, f"{k8s_pod / ours_pod:.1f}x faster"),
        ("DynamoGraphDeployment", "stackpin", ours_dgd, ""),
    ]
    print(f"median per object over {runs} runs (Kubernetes schemas {K8S_VERSION})")
    print(f"{'object':<22} {'validator':<20} {'ms':>8}  ratio")
    for obj, validator, ms, ratio in rows:
        print(f"{obj:<22} {validator:<20} {ms:>8.3f}  {ratio}")


if __name__ == "__main__":
    main()
