"""`--pod-identity-subject` writes the subject byte for byte as KEP-6283's proof of concept
does (kubernetes #139409: Go's `pkix.Name{CommonName, Organization, ExtraNames}`), so a
client that compares subjects sees no difference between this signer and the in-tree one
it anticipates (tests/integration/go/podsubject prints Go's DER)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from signer.authority import PodSubject

PROGRAM = Path(__file__).with_name("go") / "podsubject"


@pytest.mark.parametrize(
    ("pod", "namespace"),
    [
        ("web-0", "shop"),
        ("web-7c9f8d6b5-x2x7q", "team-a"),
        ("a" * 63 + "." + "b" * 63 + "." + "c" * 63, "n" * 63),  # longer than CN's 64
    ],
    ids=["statefulset", "deployment", "longest"],
)
def test_the_pod_subject_is_the_proof_of_concepts_bytes(pod: str, namespace: str) -> None:
    uid = str(uuid.uuid4())
    go = subprocess.run(
        ["go", "run", ".", pod, namespace, uid],
        cwd=PROGRAM,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert go.returncode == 0, go.stderr
    ours = PodSubject(pod, namespace, uid).x509_name().public_bytes()
    assert ours.hex() == go.stdout.strip()
