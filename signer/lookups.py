"""The live reads a decision makes of the API server (`signer.decide.Lookups`).

One GET each, a 404 answered as None ("not there"); every other error raises, for the
controller loop to retry — a decision is never made on a read that failed. A PodCertificate
Request's legacy key is read through v1beta1, whichever version the signer watches.
"""

from __future__ import annotations

from kube.client import ApiError, Client, is_not_found, path_segment
from kube.types import JSON
from signer.records import PodRecord, ServiceRecord, pod_record, service_record

PCR_GROUP = "certificates.k8s.io"


class ApiLookups:
    def __init__(self, client: Client) -> None:
        self.client = client

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        raw = self._get(f"/api/v1/namespaces/{path_segment(namespace)}/pods/{path_segment(name)}")
        return None if raw is None else pod_record(raw)

    def service(self, namespace: str, name: str) -> ServiceRecord | None:
        raw = self._get(
            f"/api/v1/namespaces/{path_segment(namespace)}/services/{path_segment(name)}"
        )
        return None if raw is None else service_record(raw)

    def legacy_pkix_key(self, namespace: str, name: str) -> bytes | str | None:
        """A v1 request without a stub CSR was written by a pre-1.36 kubelet with the
        deprecated `pkixPublicKey`, which the v1 view drops (the API requires one of the
        two). Read it once through v1beta1 rather than deny a request we can sign; None
        when v1beta1 is not served or the request is gone."""
        raw = self._get(
            f"/apis/{PCR_GROUP}/v1beta1/namespaces/{path_segment(namespace)}"
            f"/podcertificaterequests/{path_segment(name)}"
        )
        # The field itself, not `pcr_record(raw)`: a record of a request another replica
        # has just finished keeps no key material.
        value = ((raw or {}).get("spec") or {}).get("pkixPublicKey")
        return value if isinstance(value, bytes | str) and value else None

    def _get(self, path: str) -> JSON | None:
        try:
            return self.client.get(path)
        except ApiError as err:
            if is_not_found(err):
                return None
            raise
