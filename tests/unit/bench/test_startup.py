"""The start-up bench's arithmetic: per run, start-up with and without a certificate and
the three parts of the difference, each from the same Pods' timestamps; medians across
rounds per kind of run."""

from __future__ import annotations

from bench.startup import Observed, PodTimes, medians, summarise


def test_a_run_splits_a_certificate_pods_start_up_into_kubelet_signer_and_kubelet() -> None:
    observed = Observed()
    observed.pods = {
        "p-0": PodTimes(cert=True, created=0.0, pcr=1.0, issued=1.2, running=3.5),
        "p-1": PodTimes(cert=False, created=0.5, running=1.5),
        "p-2": PodTimes(cert=True, created=1.0, pcr=2.0, issued=2.1, running=None),
    }
    summary = summarise(observed)
    assert summary["startup_with_cert"] == {"n": 1, "p50": 3.5, "p99": 3.5}
    assert summary["startup_without_cert"] == {"n": 1, "p50": 1.0, "p99": 1.0}
    assert summary["added_p99"] == 2.5
    assert summary["pod_to_pcr_kubelet"]["n"] == 2
    assert summary["pcr_to_issued_signer"]["p99"] == 0.2
    assert summary["issued_to_running_kubelet"] == {"n": 1, "p50": 2.3, "p99": 2.3}
    assert summary["not_running"] == 1


def test_medians_are_taken_per_kind_of_run_across_rounds() -> None:
    runs = [
        {"run": "quiet", "startup_with_cert": {"p50": v}, "noise_lists_per_second": 0.0}
        for v in (3.0, 1.0, 2.0)
    ]
    summary = medians(runs)
    assert summary["quiet"]["rounds"] == 3
    assert summary["quiet"]["startup_with_cert_p50"] == 2.0
    assert "noise" not in summary
