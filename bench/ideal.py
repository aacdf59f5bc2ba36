"""An ideal signer for the ceiling scenario: zero decision cost, in its own process.

`python -m bench.ideal CONFIG.json` watches the PCRs of one namespace and, for each one
without a status, PUTs a certificate pre-signed by the benchmark before the clock started
(looked up by the request's stub CSR and Service name) from `workers` threads. It does
what our signer does minus every decision, so it is the most a signer can issue per
second on this API server, and it does not share the benchmark's interpreter (GIL) with
the creators. Prints `ready` on stdout once its initial list is done.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
from pathlib import Path
from typing import Any

from kube.client import ApiError, Client

JSON = dict[str, Any]


def status_key(pcr: JSON) -> str:
    spec = pcr["spec"]
    service = (spec.get("unverifiedUserAnnotations") or {}).get("kubernetes.io/service-names")
    return f"{spec.get('stubPKCS10Request', '')}|{service}"


def main(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text())
    client = Client.from_kubeconfig(config["kubeconfig"], qps=0, burst=1)
    client.user_agent = "bench-ideal-signer"
    statuses: dict[str, JSON] = config["statuses"]
    path = f"/apis/certificates.k8s.io/v1/namespaces/{config['namespace']}/podcertificaterequests"
    todo: queue.Queue[JSON] = queue.Queue()

    def worker() -> None:
        while True:
            pcr = todo.get()
            body = {**pcr, "status": statuses[status_key(pcr)]}
            try:
                client.replace(f"{path}/{pcr['metadata']['name']}/status", body)
            except ApiError as err:
                print(f"PUT {pcr['metadata']['name']}: {err}", file=sys.stderr, flush=True)

    for _ in range(int(config["workers"])):
        threading.Thread(target=worker, daemon=True).start()
    listed = client.get(path)
    for item in listed.get("items", []):
        if not item.get("status", {}).get("conditions"):
            todo.put(item)
    print("ready", flush=True)
    rv = listed["metadata"]["resourceVersion"]
    while True:
        params = {"resourceVersion": rv, "allowWatchBookmarks": True, "timeoutSeconds": 600}
        for event in client.watch(path, params, read_timeout=120):
            obj = event.get("object", {})
            rv = obj.get("metadata", {}).get("resourceVersion", rv)
            if event.get("type") == "ADDED" and not obj.get("status", {}).get("conditions"):
                todo.put(obj)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
