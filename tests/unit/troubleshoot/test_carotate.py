"""`ca rotate --emergency` as an on-call engineer runs it at 3 a.m.: against a Secret API
with resourceVersion preconditions, with the leader's real decide/apply/encode acting in
between. Safe to run twice; requests merge; any unique prefix `ca status` prints works;
what breaks is shown and confirmed; an unreadable Secret is one line."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner, Result

import cli.ca
from cli.main import main
from kube.client import ApiError
from managedca import decide as d
from managedca import step
from managedca.codec import EMERGENCY_REQUESTED_AT, REVOKE, ca_info, decode, encode
from trust.ca import cert_pem, generate_ca, key_pem

NOW = datetime.now(UTC).replace(microsecond=0)
H = timedelta(hours=1)
CFG = d.Config(ca_lifetime=timedelta(days=100), max_leaf_lifetime=24 * H, retire_margin=H)


def _ca(name: str) -> tuple[bytes, bytes]:
    ca = generate_ca(name, validity=timedelta(days=100), not_before=NOW - timedelta(days=1))
    return key_pem(ca.key), cert_pem(ca.cert)


class SecretApi:
    """One Secret: get, and merge patches with a resourceVersion precondition."""

    def __init__(self, secret: dict[str, Any]) -> None:
        self.secret = secret
        self.patches = 0

    def get(self, path: str, params: Any = None) -> dict[str, Any]:
        return copy.deepcopy(self.secret)

    def patch(self, path: str, body: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        meta = body["metadata"]
        if meta.get("resourceVersion") != self.secret["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict")
        self.secret["metadata"].setdefault("annotations", {}).update(meta["annotations"])
        self._bump()
        self.patches += 1
        return copy.deepcopy(self.secret)

    def _bump(self) -> None:
        rv = self.secret["metadata"]["resourceVersion"]
        self.secret["metadata"]["resourceVersion"] = str(int(rv) + 1)

    def annotation(self, key: str) -> str | None:
        value = (self.secret["metadata"].get("annotations") or {}).get(key)
        return None if value is None else str(value)

    def leader_acts(self, made: tuple[bytes, bytes] | None = None) -> d.Action:
        """What the leader writes for the state it reads (decide + apply + encode)."""
        stored = decode(self.secret)
        action = d.decide(stored.state, d.Observations(frozenset()), NOW, CFG)
        info = ca_info(made[1]) if made else None
        new = step.apply(stored.state, action, info)
        assert new is not None
        certs = dict(stored.certs)
        key = stored.current_key
        if info is not None and made is not None:
            certs[info.fingerprint] = made[1]
            key = made[0]
        body = encode("ns", "ca", new, certs, key, None, existing=self.secret["metadata"])
        body["metadata"]["resourceVersion"] = self.secret["metadata"]["resourceVersion"]
        self.secret = body
        self._bump()
        return action


def _stable(previous: bool = False) -> tuple[SecretApi, str, str | None]:
    a_key, a = _ca("a")
    info = ca_info(a)
    certs = {info.fingerprint: a}
    prev: tuple[d.Previous, ...] = ()
    prev_fp = None
    if previous:
        _, p = _ca("p")
        pinfo = ca_info(p)
        certs[pinfo.fingerprint] = p
        prev = (d.Previous(pinfo, NOW - H, NOW + 25 * H, 24 * H),)
        prev_fp = pinfo.fingerprint
    state = d.State(
        current=info,
        confirmed_at=NOW - H,
        issued_lifetime=24 * H,
        previous=prev,
        swapped_at=NOW - H,
    )
    secret = encode("ns", "ca", state, certs, a_key, None)
    secret["metadata"]["resourceVersion"] = "10"
    return SecretApi(secret), info.fingerprint, prev_fp


def rotate(monkeypatch: pytest.MonkeyPatch, api: SecretApi, *args: str, answer: str = "") -> Result:
    monkeypatch.setattr(cli.ca, "connect", lambda *_: SimpleNamespace(client=api, problem=str))
    # Through the group, as a user runs it (a command invoked on its own first caches a
    # help option without -h).
    return CliRunner().invoke(main, ["ca", "rotate", "--emergency", *args], input=answer)


def test_running_it_twice_does_not_revoke_the_emergency_ca(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, compromised, _ = _stable()
    assert rotate(monkeypatch, api, "--yes").exit_code == 0
    clean = _ca("clean")
    assert isinstance(api.leader_acts(clean), d.Emergency)
    second = rotate(monkeypatch, api, "--yes")
    assert second.exit_code != 0
    assert "an emergency rotation is in progress" in second.output
    assert "--force" in second.output
    assert api.annotation(EMERGENCY_REQUESTED_AT) is None, "nothing requested"
    assert decode(api.secret).state.current.fingerprint == ca_info(clean[1]).fingerprint
    assert compromised in decode(api.secret).state.revoked
    forced = rotate(monkeypatch, api, "--yes", "--force")
    assert forced.exit_code == 0, forced.output
    assert api.annotation(REVOKE) == ca_info(clean[1]).fingerprint


def test_running_it_twice_before_the_leader_acts_asks_nothing_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, current, _ = _stable()
    assert rotate(monkeypatch, api, "--yes").exit_code == 0
    again = rotate(monkeypatch, api)  # no --yes: nothing to confirm, nothing written
    assert again.exit_code == 0, again.output
    assert "already requested" in again.output
    assert api.patches == 1
    assert api.annotation(REVOKE) == current


def test_a_second_request_merges_with_a_pending_one(monkeypatch: pytest.MonkeyPatch) -> None:
    api, current, previous = _stable(previous=True)
    assert previous is not None
    assert rotate(monkeypatch, api, "--yes", "--revoke", current[:16]).exit_code == 0
    first_at = api.annotation(EMERGENCY_REQUESTED_AT)
    result = rotate(monkeypatch, api, "--yes", "--revoke", previous[:16])
    assert result.exit_code == 0, result.output
    assert set((api.annotation(REVOKE) or "").split(",")) == {current, previous}
    assert api.annotation(EMERGENCY_REQUESTED_AT) == first_at


@pytest.mark.parametrize(
    "spelling",
    [
        lambda fp: fp[:16] + "…",  # exactly what `ca status` prints
        lambda fp: fp[:16],
        lambda fp: fp[:8].upper(),
        lambda fp: "sha256:" + fp,
        lambda fp: ":".join(fp[i : i + 2] for i in range(0, 20, 2)),
    ],
)
def test_any_unique_prefix_ca_status_prints_names_a_root(
    monkeypatch: pytest.MonkeyPatch, spelling: Any
) -> None:
    api, current, _ = _stable()
    result = rotate(monkeypatch, api, "--yes", "--revoke", spelling(current))
    assert result.exit_code == 0, result.output
    assert api.annotation(REVOKE) == current


@pytest.mark.parametrize(
    ("given", "says"),
    [("abc", "at least 8 hex digits"), ("00000000", "is not a root"), ("zzzzzzzz", "hex")],
)
def test_a_bad_prefix_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, given: str, says: str
) -> None:
    api, _, _ = _stable()
    result = rotate(monkeypatch, api, "--yes", "--revoke", given)
    assert result.exit_code == 1
    assert says in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert api.patches == 0


def test_it_shows_what_breaks_and_asks_before_writing(monkeypatch: pytest.MonkeyPatch) -> None:
    api, current, _ = _stable()
    declined = rotate(monkeypatch, api, answer="n\n")
    assert declined.exit_code != 0
    assert api.patches == 0
    out = declined.output
    assert f"revoke current   {current}" in out
    assert "stop verifying" in out and "kubelet-projected bundles within 6.5 min" in out
    assert "leaves of up to 1 day, 0:00:00 were signed with it" in out
    assert "nothing is issued until the ClusterTrustBundle read back holds it" in out
    assert "Request it now? [y/N]" in out
    accepted = rotate(monkeypatch, api, answer="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert api.annotation(REVOKE) == current


def test_revoking_only_a_previous_root_says_the_signing_ca_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, current, previous = _stable(previous=True)
    assert previous is not None
    result = rotate(monkeypatch, api, "--revoke", previous[:16], answer="y\n")
    assert result.exit_code == 0, result.output
    assert f"the signing CA {current[:16]}… is kept: no new CA" in result.output
    assert "a new CA is made" not in result.output


def test_a_secret_that_does_not_decode_still_takes_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hand edit deleted `ca.key` (the leader reports sync-failing): exactly when the
    emergency is needed; the request is recorded, the damage noted, no traceback."""
    api, current, _ = _stable()
    del api.secret["data"]["ca.key"]
    result = rotate(monkeypatch, api, "--yes")
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 0, result.output
    assert "ca.key is missing" in result.output
    assert api.annotation(REVOKE) == current


def test_a_secret_without_a_readable_current_ca_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, _, _ = _stable()
    api.secret["data"]["ca.crt"] = "bm90IGEgY2VydA=="  # "not a cert"
    result = rotate(monkeypatch, api, "--yes")
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    assert "current CA (ca.crt) cannot be read" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_root_already_revoked_is_not_requested_again(monkeypatch: pytest.MonkeyPatch) -> None:
    api, compromised, _ = _stable()
    assert rotate(monkeypatch, api, "--yes").exit_code == 0
    api.leader_acts(_ca("clean"))
    result = rotate(monkeypatch, api, "--yes", "--revoke", compromised[:16])
    assert result.exit_code == 0, result.output
    assert "already revoked" in result.output
    assert api.annotation(EMERGENCY_REQUESTED_AT) is None


def test_a_request_racing_the_leader_is_planned_again_on_the_new_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The leader writes between the command's read and its patch (409): the command
    reads again and plans on what the leader wrote — never a stale merge."""
    api, current, previous = _stable(previous=True)
    assert previous is not None
    assert rotate(monkeypatch, api, "--yes").exit_code == 0
    real_get = api.get
    acted: list[d.Action] = []

    def get_then_leader_acts(path: str, params: Any = None) -> dict[str, Any]:
        read = real_get(path, params)
        if not acted:
            acted.append(api.leader_acts(_ca("clean")))
        return read

    api.get = get_then_leader_acts  # type: ignore[method-assign]
    result = rotate(monkeypatch, api, "--yes", "--revoke", previous[:16])
    assert result.exit_code == 0, result.output
    assert api.annotation(REVOKE) == previous, "the acted-on request is not asked again"
    assert dataclasses.replace(decode(api.secret).state).revoked == {current}


def test_json_output_asks_nothing_so_it_wants_yes(monkeypatch: pytest.MonkeyPatch) -> None:
    api, current, _ = _stable()
    refused = rotate(monkeypatch, api, "-o", "json")
    assert refused.exit_code == 1 and "add --yes" in refused.output
    assert api.patches == 0
    done = rotate(monkeypatch, api, "-o", "json", "--yes")
    assert done.exit_code == 0, done.output
    assert '"revoke": [' in done.output and current in done.output


class AdminApi(SecretApi):
    """Also answers SelfSubjectReview (the caller is `alice`) and records Events."""

    def __init__(self, secret: dict[str, Any]) -> None:
        super().__init__(secret)
        self.events: list[dict[str, Any]] = []

    def create(self, path: str, body: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        if path.endswith("/selfsubjectreviews"):
            return {"status": {"userInfo": {"username": "alice"}}}
        assert path.endswith("/events"), path
        self.events.append(dict(body))
        return dict(body)


def _staged() -> tuple[AdminApi, str]:
    a_key, a = _ca("a")
    n_key, n = _ca("n")
    current, nxt = ca_info(a), ca_info(n)
    state = d.State(current=current, confirmed_at=NOW - H, issued_lifetime=24 * H, next=nxt)
    certs = {current.fingerprint: a, nxt.fingerprint: n}
    secret = encode("ns", "ca", state, certs, a_key, n_key)
    secret["metadata"]["resourceVersion"] = "10"
    return AdminApi(secret), nxt.fingerprint


def skip(monkeypatch: pytest.MonkeyPatch, api: SecretApi, *args: str, answer: str = "") -> Result:
    monkeypatch.setattr(cli.ca, "connect", lambda *_: SimpleNamespace(client=api, problem=str))
    return CliRunner().invoke(main, ["ca", "skip-consumers", *args], input=answer)


def test_skipping_the_consumers_is_asked_recorded_with_who_and_for_this_rotation_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, nxt = _staged()
    declined = skip(monkeypatch, api, answer="n\n")
    assert declined.exit_code != 0 and api.patches == 0
    assert "keep trusting the old root only" in declined.output
    done = skip(monkeypatch, api, answer="y\n")
    assert done.exit_code == 0, done.output
    state = decode(api.secret).state
    assert (state.consumers_skipped_for, state.consumers_skipped_by) == (nxt, "alice")
    [event] = api.events
    assert event["reason"] == "ManagedCAConsumersSkipped" and event["type"] == "Warning"
    assert "alice" in event["note"] and nxt in event["note"]
    again = skip(monkeypatch, api, "--yes")
    assert again.exit_code == 0 and "already skips" in again.output and api.patches == 1


def test_nothing_to_skip_without_a_rotation_under_way(monkeypatch: pytest.MonkeyPatch) -> None:
    stable, _, _ = _stable()
    api = AdminApi(stable.secret)
    result = skip(monkeypatch, api, "--yes")
    assert result.exit_code == 1 and "no rotation is under way" in result.output
    assert api.patches == 0
