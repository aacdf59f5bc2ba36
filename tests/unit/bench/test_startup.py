"""The start-up bench's arithmetic and placement: per run, the control's start-up and per
signer its Pods' start-up, what the certificate adds and the three parts of it, each from
the same Pods' timestamps; medians across rounds per kind of run, rate and signer; and the
FlowSchema that puts every benched signer in the signer's level."""

from __future__ import annotations

from bench.startup import (
    KCM_USER,
    PEER_ACCOUNT,
    PEER_NAMESPACE,
    Observed,
    PodTimes,
    medians,
    placement,
    signer_flowcontrol_objects,
    summarise,
)


def test_a_run_splits_each_signers_pods_start_up_into_kubelet_signer_and_kubelet() -> None:
    observed = Observed()
    observed.pods = {
        "p-0": PodTimes(kind="ours", created=0.0, pcr=1.0, issued=1.2, running=3.5),
        "p-1": PodTimes(kind="none", created=0.5, running=1.5),
        "p-2": PodTimes(kind="ours", created=1.0, pcr=2.0, issued=2.1, running=None),
        "p-3": PodTimes(kind="kcm", created=1.5, pcr=2.5, issued=3.5, running=6.5),
    }
    summary = summarise(observed)
    assert summary["startup_without_cert"] == {"n": 1, "p50": 1.0, "p99": 1.0}
    ours = summary["signers"]["ours"]
    assert ours["startup_with_cert"] == {"n": 1, "p50": 3.5, "p99": 3.5}
    assert ours["added_p99"] == 2.5
    assert ours["pod_to_pcr_kubelet"]["n"] == 2
    assert ours["pcr_to_issued_signer"]["p99"] == 0.2
    assert ours["issued_to_running_kubelet"] == {"n": 1, "p50": 2.3, "p99": 2.3}
    assert ours["not_running"] == 1
    kcm = summary["signers"]["kcm"]
    assert kcm["pcr_to_issued_signer"]["p50"] == 1.0
    assert kcm["added_p99"] == 4.0
    assert set(summary["signers"]) == {"ours", "kcm"}


def test_medians_are_taken_per_kind_of_run_rate_and_signer_across_rounds() -> None:
    runs = [
        {
            "run": "quiet",
            "rate": 20.0,
            "signers": {"ours": {"startup_with_cert": {"p50": v}}, "kcm": {}},
            "noise_lists_per_second": 0.0,
        }
        for v in (3.0, 1.0, 2.0)
    ]
    summary = medians(runs)
    assert [(m["run"], m["rate"], m["signer"]) for m in summary] == [
        ("quiet", 20.0, "ours"),
        ("quiet", 20.0, "kcm"),
    ]
    assert summary[0]["rounds"] == 3
    assert summary[0]["startup_with_cert_p50"] == 2.0
    assert summary[1]["startup_with_cert_p50"] is None


def test_the_flowschema_names_every_signer_and_the_kcm_user_before_its_bootstrap() -> None:
    schemas = {
        o["metadata"]["name"]: o for o in signer_flowcontrol_objects() if o["kind"] == "FlowSchema"
    }
    ours = schemas["service-serving-signer"]["spec"]
    assert {"namespace": PEER_NAMESPACE, "name": PEER_ACCOUNT} in [
        s.get("serviceAccount") for s in ours["rules"][0]["subjects"]
    ]
    kcm = schemas["service-serving-signer-bench-kcm-shaped"]["spec"]
    assert kcm["rules"][0]["subjects"] == [{"kind": "User", "user": {"name": KCM_USER}}]
    # the bootstrap `kube-controller-manager` FlowSchema matches this user at 800
    assert kcm["matchingPrecedence"] < 800
    assert kcm["priorityLevelConfiguration"] == ours["priorityLevelConfiguration"]
    assert kcm["rules"][0]["resourceRules"] == ours["rules"][0]["resourceRules"]


def test_every_node_starts_every_kind_of_pod_alike() -> None:
    nodes = [f"n{k}" for k in range(10)]
    kinds = ["ours", "kcm", "peer", "none"]
    counts: dict[tuple[str, str], int] = {}
    for i in range(400):
        pair = placement(i, nodes, kinds)
        counts[pair] = counts.get(pair, 0) + 1
    assert set(counts) == {(n, k) for n in nodes for k in kinds}
    assert set(counts.values()) == {10}
    # still one Pod per node per lap, and the kinds evenly interleaved in time
    assert [placement(i, nodes, kinds)[0] for i in range(10)] == nodes
    assert sorted(placement(i, nodes, kinds)[1] for i in range(4)) == sorted(kinds)


def test_the_request_watch_reads_the_version_the_plane_serves() -> None:
    """1.36 serves PodCertificateRequests as v1beta1 only: the bench watches that version,
    so the kubelet's share can be measured on 1.36 as on 1.37 and 1.38."""
    from bench.startup import pcr_path
    from tests.unit.fakeapi import FakeApi

    fake = FakeApi().start()
    try:
        for version in ("v1beta1", "v1"):
            fake.discovery[f"/apis/certificates.k8s.io/{version}"] = {
                "kind": "APIResourceList",
                "resources": [{"name": "podcertificaterequests"}],
            }
            assert pcr_path(fake.client(), "ns") == (
                f"/apis/certificates.k8s.io/{version}/namespaces/ns/podcertificaterequests"
            )
    finally:
        fake.stop()
