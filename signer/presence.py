"""The signer's presence report: every process that runs the signer controller renews one
Lease beside its leader Lease, with or without leader election (`kube.presence`), so
`status` and `explain` can tell a running signer from none with `get` on that one Lease —
no Secret, no Pod, no other Lease.

Its name is the leader Lease's (`--leader-elect-resource-name`, which has its default
with leader election off too) with `-presence` appended; the annotations say which
signer name the process serves, whether it elects a leader, and its version.
"""

from __future__ import annotations

PREFIX = "service-serving-signer/"
SIGNER_NAME = PREFIX + "signer-name"
LEADER_ELECT = PREFIX + "leader-elect"  # "true" / "false"
VERSION = PREFIX + "version"
LABEL = PREFIX + "presence"  # value: "signer"
SUFFIX = "-presence"


def presence_name(lease_name: str) -> str:
    """The presence Lease of the signer whose leader Lease is `lease_name`."""
    return lease_name + SUFFIX
