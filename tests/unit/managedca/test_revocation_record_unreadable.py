"""A replica that cannot read the revocation record (the stable ClusterTrustBundle's
`revoked-roots`: a 403, a 503 while the control plane recovers, a timeout) does not
switch its signing set to a CA it does not already sign with — a Secret restored from
before an emergency could name a revoked root — and reads the record again on its
re-read period, switching once it can."""

from __future__ import annotations

from typing import cast

import pytest
from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client
from managedca import decide as d
from managedca.material import ApiMaterialSource
from signer.authority import issue_probe
from tests.unit.managedca.builders import NOW, H
from tests.unit.managedca.test_restore import A_KEY, AI, B_KEY, BI, _secret

FAULTS = {
    "403": ApiError(403, "Forbidden"),
    "503": ApiError(503, "ServiceUnavailable"),
    "timeout": TimeoutError("timed out"),
}


class Record:
    """The stable bundle's record, readable or not."""

    def __init__(self, fault: Exception | None) -> None:
        self.fault = fault
        self.reads = 0

    def __call__(self) -> tuple[frozenset[str], tuple[d.CaInfo, ...]]:
        self.reads += 1
        if self.fault is not None:
            raise self.fault
        return frozenset({AI.fingerprint}), (BI,)


def _source(record: Record) -> ApiMaterialSource:
    source = ApiMaterialSource(
        cast(Client, object()), "ns", "ca", CollectorRegistry(), issuer=issue_probe
    )
    source.remember_revoked_from(record)
    return source


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_replica_that_cannot_read_the_revocations_does_not_sign_with_a_restored_root(
    fault: str,
) -> None:
    source = _source(Record(FAULTS[fault]))
    restored = d.State(current=AI, previous=(d.Previous(BI, NOW, None),), confirmed_at=NOW - H)
    source.apply(_secret(restored, A_KEY, "90"))
    assert source.loaded().signing != AI.fingerprint, (
        "signs with A although the one place that remembers A revoked could not be read"
    )


def test_it_keeps_signing_with_what_it_has_and_switches_once_the_record_is_read() -> None:
    record = Record(None)
    source = _source(record)
    b_state = d.State(current=BI, confirmed_at=NOW - H)
    source.apply(_secret(b_state, B_KEY, "10"))
    assert source.loaded().signing == BI.fingerprint
    record.fault = ApiError(503, "ServiceUnavailable")
    # The same CA in a newer Secret: no switch, nothing refused.
    source.apply(_secret(b_state, B_KEY, "11"))
    assert source.loaded().signing == BI.fingerprint
    reads = record.reads
    source.apply(_secret(b_state, B_KEY, "11"))  # the re-read period, nothing rejected
    assert record.reads == reads  # nothing rejected: no retry needed


def test_the_switch_refused_for_an_unreadable_record_is_retried_on_the_re_read() -> None:
    record = Record(ApiError(503, "ServiceUnavailable"))
    source = _source(record)
    c_state = d.State(current=BI, confirmed_at=NOW - H)
    source.apply(_secret(c_state, B_KEY, "20"))
    assert source.loaded().signing is None
    record.fault = None
    source.apply(_secret(c_state, B_KEY, "20"))  # the 60 s re-read of the same Secret
    assert source.loaded().signing == BI.fingerprint


def test_a_replica_started_while_the_record_is_unreadable_serves_no_bundle_yet() -> None:
    """Its bundle is what the publisher publishes: a restored Secret's roots (a revoked
    one among them) are not served until the record says which are revoked."""
    record = Record(ApiError(503, "ServiceUnavailable"))
    source = _source(record)
    restored = d.State(current=AI, previous=(d.Previous(BI, NOW, None),), confirmed_at=NOW - H)
    source.apply(_secret(restored, A_KEY, "90"))
    assert not source.has_bundle()
    record.fault = None
    source.apply(_secret(restored, A_KEY, "90"))  # the re-read
    assert source.has_bundle()
    assert AI.fingerprint not in source.loaded().anchors  # the record revokes A
