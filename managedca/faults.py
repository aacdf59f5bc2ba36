"""The gates' inputs, as one declared table: for each source the leader or a replica
reads and each way it can be wrong, what the leader decides and what each replica signs
with (docs/managed-ca.md "Faults", rendered from `ROWS` by `render()`).

The rule every row keeps: **a fault never opens a gate.** It is a wait that `ca status`,
the `ManagedCAWaiting` Event and `managed_ca_waiting{reason}` name, a failing step
(`sync-failing`), a step that restores what the fault took away (Adopt, Emergency,
Bootstrap keeping the published roots), or an explicit, recorded operator decision
(`OPERATOR`) — never a Swap, a Confirm or a Retire (`OPENS`).

Each row is checked by a scenario in tests/unit/managedca/test_fault_table.py, run
against `decide` and the material source (`check` names it); a row that decide and the
source cannot see (leader election, RBAC, a writer that holds the key) says why instead
(`why`), and the test holds both kinds to the rule. Pure data: no client.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCES = (
    ("leader-lease", "the leader Lease"),
    ("replica-report", "a replica's report Lease"),
    ("injector-report", "the injector's convergence report Lease"),
    ("secret-current", "CA Secret: the current CA (`ca.key`/`ca.crt`)"),
    ("secret-next", "CA Secret: the next CA (`next.key`/`next.crt`)"),
    ("secret-previous", "CA Secret: the previous roots (`previous.crt`, `ca-previous`)"),
    ("secret-retired", "CA Secret: `ca-retired`"),
    ("secret-emergency", "CA Secret: `ca-emergency`"),
    ("secret-revoked", "CA Secret: `ca-revoked`"),
    ("hash-bundles", "the signer's hash-named ClusterTrustBundles (the read-back)"),
    ("stable-bundle", "the stable ClusterTrustBundle's roots (what a replica checks)"),
    ("revocation-record", "the stable ClusterTrustBundle's `revoked-roots`"),
    ("server-clock", "the API server's clock (the `Date` of its answers)"),
)
"""(key, what it is)."""

FAULTS = (
    ("absent", "absent from the start"),
    ("deleted", "deleted after being seen"),
    ("stale", "stale"),
    ("unparseable", "unparseable"),
    ("out-of-bounds", "out of bounds"),
    ("foreign", "written by someone else"),
    ("restored", "restored from an older copy (an earlier phase)"),
    ("unreadable", "unreadable (403, 5xx, timeout)"),
)
"""(key, what it is)."""

OPENS = ("Swap", "Confirm", "Retire")
"""The outcomes that open a gate: never a fault's."""

OPERATOR = "operator: "
"""A leader outcome starting so is an explicit, recorded operator decision."""

KEEPS = "keeps its signing CA"
FOLLOWS = "signs with the state's current CA once confirmed"
SIGNS_NOTHING_NEW = "keeps its signing CA; switches only to a CA published and readable"
NOT_READ = "not read"


def wait(reason: str) -> str:
    """The leader outcome of a `Wait` for `reason` (`decide.WAIT_REASONS`)."""
    return f"wait {reason}"


FAILING = "sync-failing"


@dataclass(frozen=True)
class Row:
    source: str  # a key of SOURCES
    fault: str  # a key of FAULTS
    leader: str  # what the leader decides: wait <reason>, sync-failing, an action's name
    replica: str  # what each replica signs with
    check: str = ""  # the scenario in tests/unit/managedca/test_fault_table.py
    why: str = ""  # for a row no scenario can drive: why, and what holds instead


SECRET_SCOPE = (
    "the Secret's writer holds the key: RBAC gives update to the signer's ServiceAccount "
    "(and `ca` commands' users), so a forged field is no worse than the key it sits beside"
)
ELECTION = (
    "leader election (kube.leaderelection): nothing is decided by a process that does not "
    "hold the Lease; a new holder is a leader change"
)
QUORUM = "every read of it is a quorum GET (no cache): a step never decides on a stale copy"

ROWS: tuple[Row, ...] = (
    # the leader Lease ---------------------------------------------------------------
    Row("leader-lease", "absent", "no step (no leader)", KEEPS, why=ELECTION),
    Row("leader-lease", "deleted", "no step until one is elected again", KEEPS, why=ELECTION),
    Row("leader-lease", "stale", wait("propagation-delay"), KEEPS, check="new_leader"),
    Row("leader-lease", "unparseable", "no step (no leader)", KEEPS, why=ELECTION),
    Row("leader-lease", "out-of-bounds", "no step (no leader)", KEEPS, why=ELECTION),
    Row(
        "leader-lease",
        "foreign",
        "no step here (another holder)",
        KEEPS,
        why="RBAC: get/update by name for the signer's ServiceAccount only",
    ),
    Row("leader-lease", "restored", wait("propagation-delay"), KEEPS, check="new_leader"),
    Row("leader-lease", "unreadable", "no step (not leading)", KEEPS, why=ELECTION),
    # a replica's report -------------------------------------------------------------
    Row("replica-report", "absent", wait("no-replica-report"), FOLLOWS, check="no_report"),
    Row(
        "replica-report",
        "deleted",
        wait("replica-not-ready"),
        KEEPS,
        check="replica_report_deleted",
    ),
    Row("replica-report", "stale", wait("no-replica-report"), KEEPS, check="replica_dead"),
    Row(
        "replica-report",
        "unparseable",
        wait("replica-not-signing"),
        KEEPS,
        check="replica_report_unreadable",
    ),
    Row(
        "replica-report",
        "out-of-bounds",
        wait("replica-not-signing"),
        KEEPS,
        check="replica_report_unreadable",
    ),
    Row(
        "replica-report",
        "foreign",
        "trusted as the replica's",
        KEEPS,
        why="RBAC: only the signer's ServiceAccount writes Leases in its namespace "
        "(docs/managed-ca.md 'Who can write the Leases the gates read')",
    ),
    Row("replica-report", "restored", wait("replica-not-loaded"), KEEPS, check="replica_behind"),
    Row("replica-report", "unreadable", FAILING, KEEPS, check="reports_unreadable"),
    # the injector's convergence report ------------------------------------------------
    Row(
        "injector-report",
        "absent",
        wait("injector-report-missing"),
        FOLLOWS,
        check="injector_never_seen",
    ),
    Row(
        "injector-report",
        "deleted",
        wait("injector-report-missing"),
        FOLLOWS,
        check="injector_deleted",
    ),
    Row("injector-report", "stale", wait("injector-report-stale"), FOLLOWS, check="injector_stale"),
    Row(
        "injector-report",
        "unparseable",
        wait("injector-not-converged"),
        FOLLOWS,
        check="injector_unparseable",
    ),
    Row(
        "injector-report",
        "out-of-bounds",
        wait("injector-not-converged"),
        FOLLOWS,
        check="injector_out_of_bounds",
    ),
    Row(
        "injector-report",
        "foreign",
        "trusted as the injector's",
        FOLLOWS,
        why="RBAC: the injector's Role updates its two Leases by name, no create; a stolen "
        "injector token can patch every caBundle, which is worse than a forged report",
    ),
    Row(
        "injector-report",
        "restored",
        wait("injector-not-converged"),
        FOLLOWS,
        check="injector_old_copy",
    ),
    Row("injector-report", "unreadable", FAILING, FOLLOWS, check="injector_unreadable"),
    # the CA Secret --------------------------------------------------------------------
    Row("secret-current", "absent", "Bootstrap", FOLLOWS, check="secret_absent"),
    Row("secret-current", "deleted", "Bootstrap", KEEPS, check="secret_deleted"),
    Row("secret-current", "stale", "(the newest state)", KEEPS, check="secret_older_event"),
    Row("secret-current", "unparseable", FAILING, KEEPS, check="secret_unparseable"),
    Row("secret-current", "out-of-bounds", "Stage", KEEPS, check="current_expired"),
    Row("secret-current", "foreign", "(trusted)", FOLLOWS, why=SECRET_SCOPE),
    Row("secret-current", "restored", "Adopt", KEEPS, check="staged_backup"),
    Row("secret-current", "unreadable", FAILING, KEEPS, check="secret_unreadable"),
    Row(
        "secret-next",
        "absent",
        "(the Stable phase)",
        FOLLOWS,
        why="no next CA is the Stable phase, not a fault",
    ),
    Row("secret-next", "deleted", "Adopt", FOLLOWS, check="next_deleted"),
    Row("secret-next", "stale", "(the newest state)", KEEPS, why=QUORUM),
    Row("secret-next", "unparseable", FAILING, KEEPS, check="next_key_missing"),
    Row("secret-next", "out-of-bounds", wait("next-ca-expired"), FOLLOWS, check="next_expiring"),
    Row("secret-next", "foreign", "(trusted)", FOLLOWS, why=SECRET_SCOPE),
    Row("secret-next", "restored", "Adopt", FOLLOWS, check="next_replaced"),
    Row("secret-next", "unreadable", FAILING, KEEPS, check="secret_unreadable"),
    Row(
        "secret-previous",
        "absent",
        "(no rotation to finish)",
        FOLLOWS,
        why="no previous root is the Stable phase, not a fault",
    ),
    Row("secret-previous", "deleted", "Adopt", KEEPS, check="previous_deleted"),
    Row("secret-previous", "stale", "(the newest state)", KEEPS, why=QUORUM),
    Row("secret-previous", "unparseable", FAILING, KEEPS, check="previous_unparseable"),
    Row(
        "secret-previous",
        "out-of-bounds",
        "ScheduleRetire",
        FOLLOWS,
        check="previous_endless_lifetime",
    ),
    Row("secret-previous", "foreign", "(trusted)", FOLLOWS, why=SECRET_SCOPE),
    Row(
        "secret-previous",
        "restored",
        wait("replica-not-signing"),
        FOLLOWS,
        check="previous_unscheduled",
    ),
    Row("secret-previous", "unreadable", FAILING, KEEPS, check="secret_unreadable"),
    Row("secret-retired", "absent", "Adopt", FOLLOWS, check="retired_forgotten"),
    Row("secret-retired", "deleted", "Adopt", FOLLOWS, check="retired_forgotten"),
    Row("secret-retired", "stale", "(the newest state)", KEEPS, why=QUORUM),
    Row(
        "secret-retired",
        "unparseable",
        "Adopt",
        FOLLOWS,
        check="retired_forgotten",
    ),
    Row(
        "secret-retired",
        "out-of-bounds",
        "(the newest 16 kept)",
        FOLLOWS,
        why="bounded on write (RETIRED_KEPT); an older retired root still published is "
        "adopted back and retired again: kept longer, never dropped early",
    ),
    Row("secret-retired", "foreign", "(trusted)", FOLLOWS, why=SECRET_SCOPE),
    Row("secret-retired", "restored", "Adopt", FOLLOWS, check="retired_forgotten"),
    Row("secret-retired", "unreadable", FAILING, KEEPS, check="secret_unreadable"),
    Row(
        "secret-emergency",
        "absent",
        "MarkPublished",
        KEEPS,
        check="emergency_flag_lost",
    ),
    Row("secret-emergency", "deleted", "MarkPublished", KEEPS, check="emergency_flag_lost"),
    Row("secret-emergency", "stale", "(the newest state)", KEEPS, why=QUORUM),
    Row("secret-emergency", "unparseable", "MarkPublished", KEEPS, check="emergency_flag_lost"),
    Row(
        "secret-emergency",
        "out-of-bounds",
        "(ignored on a confirmed CA)",
        FOLLOWS,
        check="emergency_flag_on_confirmed",
    ),
    Row("secret-emergency", "foreign", "(trusted)", FOLLOWS, why=SECRET_SCOPE),
    Row("secret-emergency", "restored", "MarkPublished", KEEPS, check="emergency_backup"),
    Row("secret-emergency", "unreadable", FAILING, KEEPS, check="secret_unreadable"),
    Row("secret-revoked", "absent", "Emergency", SIGNS_NOTHING_NEW, check="revoked_forgotten"),
    Row("secret-revoked", "deleted", "Emergency", SIGNS_NOTHING_NEW, check="revoked_forgotten"),
    Row("secret-revoked", "stale", "(the newest state)", KEEPS, why=QUORUM),
    Row(
        "secret-revoked",
        "unparseable",
        "Emergency",
        SIGNS_NOTHING_NEW,
        check="revoked_forgotten",
    ),
    Row(
        "secret-revoked",
        "out-of-bounds",
        "(a name that is no fingerprint revokes nothing)",
        FOLLOWS,
        why="the other two records (the stable bundle's, each replica's memory) still revoke",
    ),
    Row("secret-revoked", "foreign", "(trusted)", FOLLOWS, why=SECRET_SCOPE),
    Row("secret-revoked", "restored", "Emergency", SIGNS_NOTHING_NEW, check="revoked_forgotten"),
    Row("secret-revoked", "unreadable", FAILING, KEEPS, check="secret_unreadable"),
    # the ClusterTrustBundles ----------------------------------------------------------
    Row("hash-bundles", "absent", wait("bundle-not-published"), KEEPS, check="nothing_published"),
    Row("hash-bundles", "deleted", wait("bundle-not-published"), KEEPS, check="nothing_published"),
    Row("hash-bundles", "stale", "(a retired root is not adopted)", KEEPS, check="bundle_lagging"),
    Row(
        "hash-bundles",
        "unparseable",
        wait("bundle-not-published"),
        KEEPS,
        check="bundle_unparseable",
    ),
    Row(
        "hash-bundles",
        "out-of-bounds",
        "(an expired root is not adopted)",
        KEEPS,
        check="bundle_expired_root",
    ),
    Row(
        "hash-bundles",
        "foreign",
        "Adopt",
        KEEPS,
        why="a ClusterTrustBundle naming the signer needs the `attest` verb on it; a root "
        "planted so is adopted as a previous root (kept published, never signed with)",
    ),
    Row(
        "hash-bundles", "restored", "(a retired root is not adopted)", KEEPS, check="bundle_lagging"
    ),
    Row("hash-bundles", "unreadable", FAILING, KEEPS, check="bundles_unreadable"),
    Row("stable-bundle", "absent", wait("bundle-not-published"), FOLLOWS, check="stable_absent"),
    Row("stable-bundle", "deleted", wait("bundle-not-published"), KEEPS, check="stable_deleted"),
    Row("stable-bundle", "stale", "(the newest)", KEEPS, why=QUORUM),
    Row(
        "stable-bundle",
        "unparseable",
        wait("bundle-not-published"),
        KEEPS,
        why="a PEM that does not parse publishes nothing: a CA only there is not published, "
        "so no replica switches to it",
    ),
    Row(
        "stable-bundle",
        "out-of-bounds",
        "(an expired root is not adopted)",
        KEEPS,
        why="a replica never switches to an expired CA (validated: valid now and for the "
        "lead time)",
    ),
    Row(
        "stable-bundle",
        "foreign",
        "(trusted)",
        KEEPS,
        why="written by the signer's publisher; others need `attest` on the signer",
    ),
    Row("stable-bundle", "restored", "Adopt", KEEPS, check="stable_restored"),
    Row("stable-bundle", "unreadable", FAILING, SIGNS_NOTHING_NEW, check="record_unreadable"),
    Row(
        "revocation-record",
        "absent",
        "Emergency",
        SIGNS_NOTHING_NEW,
        check="record_absent",
    ),
    Row("revocation-record", "deleted", "Emergency", SIGNS_NOTHING_NEW, check="record_absent"),
    Row("revocation-record", "stale", "(the newest)", KEEPS, why=QUORUM),
    Row(
        "revocation-record",
        "unparseable",
        "Emergency",
        SIGNS_NOTHING_NEW,
        check="record_absent",
    ),
    Row(
        "revocation-record",
        "out-of-bounds",
        "(a name that is no fingerprint revokes nothing)",
        FOLLOWS,
        why="the Secret's `ca-revoked` and each replica's memory still revoke",
    ),
    Row(
        "revocation-record",
        "foreign",
        OPERATOR + "un-revoke (documented: never edit it)",
        FOLLOWS,
        why="removing a fingerprint is the one way to un-revoke; the Secret's `ca-revoked` "
        "puts it back unless it was restored too",
    ),
    Row(
        "revocation-record",
        "restored",
        OPERATOR + "a whole-cluster restore (the stated limit)",
        FOLLOWS,
        why="restored with the Secret from the same backup, the revocation after it is lost "
        "with both: `ca rotate --emergency` again",
    ),
    Row(
        "revocation-record",
        "unreadable",
        FAILING,
        SIGNS_NOTHING_NEW,
        check="record_unreadable",
    ),
    # the API server's clock: a retire needs it past the retire time too ------------------
    Row("server-clock", "absent", wait("retire-time"), NOT_READ, check="server_clock_unknown"),
    Row(
        "server-clock",
        "deleted",
        wait("retire-time"),
        NOT_READ,
        why="not an object: every answer carries a Date (a proxy that strips it: absent)",
    ),
    Row("server-clock", "stale", wait("retire-time"), NOT_READ, check="server_clock_behind"),
    Row(
        "server-clock",
        "unparseable",
        wait("retire-time"),
        NOT_READ,
        check="server_clock_unparseable",
    ),
    Row("server-clock", "out-of-bounds", wait("retire-time"), NOT_READ, check="server_clock_ahead"),
    Row(
        "server-clock",
        "foreign",
        wait("retire-time"),
        NOT_READ,
        why="a proxy rewriting Date stands between the leader and the API server: the "
        "leader's wall and monotonic clocks still hold the retire (as out of bounds)",
    ),
    Row(
        "server-clock",
        "restored",
        "(not stored)",
        NOT_READ,
        why="read from each answer, never stored: nothing to restore",
    ),
    Row(
        "server-clock",
        "unreadable",
        FAILING,
        NOT_READ,
        why="no answer, no step: the step's reads fail first (sync-failing)",
    ),
)


def row(source: str, fault: str) -> Row:
    """The row of `source` and `fault` (KeyError: none, which a test forbids)."""
    for r in ROWS:
        if (r.source, r.fault) == (source, fault):
            return r
    raise KeyError((source, fault))


def render() -> str:
    """The table as docs/managed-ca.md carries it (between its markers)."""
    names = dict(SOURCES)
    faults = dict(FAULTS)
    lines = [
        "| source | fault | the leader | each replica | checked by |",
        "|---|---|---|---|---|",
    ]
    for r in ROWS:
        checked = f"`{r.check}`" if r.check else f"— ({r.why})"
        lines.append(
            f"| {names[r.source]} | {faults[r.fault]} | {r.leader} | {r.replica} | {checked} |"
        )
    return "\n".join(lines) + "\n"


def render_wait_kinds() -> str:
    """Which waits are the calendar, which pass by themselves, which are held
    (`decide.WAIT_KINDS`), as docs/managed-ca.md carries it."""
    from managedca import decide as d

    def names(kind: str) -> str:
        return ", ".join(f"`{r}`" for r in d.waits(kind))

    return (
        f"- **The calendar** ({names(d.CALENDAR)}): nothing to mend; no Warning, never "
        "alerted on.\n"
        f"- **Passing** ({names(d.PASSING)}): opens by itself (the publisher, kubelet's "
        "refresh); no Warning when it starts, alerted on (`ServiceServingSignerManagedCAWaiting`) "
        "only if it lasts an hour.\n"
        f"- **Held** ({names(d.HELD)}): held until something is mended; a Warning Event "
        "`ManagedCAWaiting` when it starts (and for each object it names later), alerted on "
        "when it lasts an hour.\n"
    )


MARKERS = {"fault-table": render, "wait-kinds": render_wait_kinds}


def write_docs(path: str = "docs/managed-ca.md") -> None:
    """Put each generated part between its markers in the doc (`MARKERS`)."""
    import re
    from pathlib import Path

    doc = Path(path).read_text()
    for name, make in MARKERS.items():
        doc = re.sub(
            rf"(<!-- {name} -->\n).*?(<!-- /{name} -->)",
            lambda m, make=make: m.group(1) + make() + m.group(2),  # type: ignore[misc]
            doc,
            flags=re.S,
        )
    Path(path).write_text(doc)


if __name__ == "__main__":
    write_docs()
