"""What the injector's ConfigMap cache holds per hostile tenant ConfigMap, in-process (no
control plane): N labelled ConfigMaps, each with its own long selector (~3.4 KB, a signer
nothing publishes) and every other annotation and managedFields entry a tenant may write,
decoded one at a time and kept as the informer keeps them (`injector.configmaps.to_target`).
It reports tracemalloc's bytes per record and the process's RSS growth per record, for
this checkout and, with `--source DIR` (e.g. `git archive <commit> | tar -x -C DIR`),
another one, each in its own process: one JSON line.

Run: `.venv/bin/python -m bench.injector_records [--configmaps 10000] [--source DIR]`.
bench.injector_tenant measures the same against a real injector process and API server.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

MEASURE = r"""
import gc, json, sys, tracemalloc
from injector.configmaps import to_target
with open(sys.argv[1]) as f:
    texts = f.read().splitlines()
count = len(texts)
gc.collect()
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0
before_rss = rss()
tracemalloc.start()
before = tracemalloc.get_traced_memory()[0]
records = [to_target(json.loads(t)) for t in texts]
traced = tracemalloc.get_traced_memory()[0] - before
tracemalloc.stop()
gc.collect()
print(json.dumps({"traced_bytes_each": round(traced / count),
                  "rss_bytes_each": round((rss() - before_rss) / count),
                  "annotation_chars": len(records[0].annotation or "")}))
"""


def tenant_config_map(i: int) -> dict[str, Any]:
    """Tenant ConfigMap `i`: labelled, its own selector, hostile annotations."""
    labels = {f"k{j:03d}": f"{i:08d}-{j:03d}" for j in range(150)}
    selector = {"signerName": "example.com/none", "labelSelector": {"matchLabels": labels}}
    note = json.dumps({"sha256": "0" * 64, "anchors": ["f" * 64] * 100, "notAfter": 1})
    return {
        "metadata": {
            "name": f"t-{i:08d}".ljust(63, "n"),
            "namespace": "tenant",
            "uid": f"{i:08d}-0000-0000-0000-000000000000",
            "resourceVersion": str(1000 + i),
            "labels": {"service-serving-signer/inject-ca-bundle": "true"},
            "annotations": {
                "service-serving-signer/ca-bundle-from": json.dumps(selector)[:4000],
                "service-serving-signer/injected": note.ljust(8_000),
                "service-serving-signer/truststore-pkcs12": "truststore.p12",
                "service-serving-signer/truststore-password": "p" * 1_024,
            },
            "managedFields": [
                {
                    "manager": f"m{k}".ljust(128, "x"),
                    "operation": "Apply",
                    "fieldsV1": {"f:data": {"f:ca.crt": {}}},
                }
                for k in range(20)
            ],
        },
        "data": {"app.conf": "x" * 4096},
    }


def measure(tree: Path, objects: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(objects)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--configmaps", type=int, default=10_000)
    parser.add_argument("--source", type=Path, default=None)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"configmaps": args.configmaps, "target_bytes_each": "<= 2048"}
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as objects:
        objects.write("\n".join(json.dumps(tenant_config_map(i)) for i in range(args.configmaps)))
        objects.flush()
        if args.source is not None:
            result["before"] = measure(args.source, Path(objects.name))
        result["now"] = measure(ROOT, Path(objects.name))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
