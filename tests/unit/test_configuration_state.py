"""MetalLB's ConfigurationState: the status each component wants, and the writer that keeps it.

Tables for the pure rules (`ironlb.configuration_state`): problems -> condition, conditions ->
result and errorSummary, and when a write is due at all; then the writer
(`ironlb_io.configuration_states`) against an in-memory apiserver: it creates the object once,
writes only on change, and puts back a deleted one when asked to read it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from controller import config_report
from ironlb import configuration_state as cs
from ironlb.problems import Problem
from ironlb_io import configuration_states, kube

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"
BAD = Problem("IPAddressPool", "p", "spec.addresses", "overlaps with pool q")
BAD2 = Problem("IPAddressPool", "q", "spec.addresses", "overlaps with pool p")
DANGLING = Problem("L2Advertisement", "a", "spec.ipAddressPools[0]", "no pool", transient=True)
NO_PEER = Problem("BGPAdvertisement", "b", "spec.peers[1]", "no such peer", transient=True)
NO_ALIAS = Problem("BGPAdvertisement", "b", "spec.communities[0]", "no alias", transient=True)
NO_BFD = Problem("BGPPeer", "p", "spec.bfdProfile", "no such profile", transient=True)
NO_SECRET = Problem("BGPPeer", "p", "spec.passwordSecret.name", "no Secret", transient=True)


def cond(status: str, reason: str, message: str = "", type_: str = cs.SPEAKER_CONDITION) -> Any:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": T0,
    }


# --- problems -> the condition ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("problems", "want"),
    [
        ([], cs.Verdict("True", "Reconciled", "")),
        ([DANGLING, NO_PEER], cs.Verdict("True", "Reconciled", "")),
        # References MetalLB cannot resolve are errors there, although transient here.
        ([NO_ALIAS], cs.Verdict("False", "ConfigurationError", str(NO_ALIAS))),
        ([NO_BFD], cs.Verdict("False", "ConfigurationError", str(NO_BFD))),
        ([NO_SECRET, DANGLING], cs.Verdict("False", "ConfigurationError", str(NO_SECRET))),
        ([BAD], cs.Verdict("False", "ConfigurationError", str(BAD))),
        ([BAD, BAD2], cs.Verdict("False", "ConfigurationError", f"{BAD}; {BAD2}")),
        ([BAD, BAD], cs.Verdict("False", "ConfigurationError", str(BAD))),
        ([DANGLING, BAD], cs.Verdict("False", "ConfigurationError", str(BAD))),
    ],
    ids=[
        "none",
        "names selecting nothing",
        "community alias",
        "bfd profile",
        "password secret",
        "one",
        "two",
        "repeated",
        "transient and hard",
    ],
)
def test_verdict(problems: list[Problem], want: cs.Verdict) -> None:
    assert cs.verdict(problems) == want


# --- conditions -> result, errorSummary ---------------------------------------------------------


@pytest.mark.parametrize(
    ("conditions", "want"),
    [
        ([], ("Unknown", "")),
        ([cond("True", "Reconciled")], ("Valid", "")),
        ([cond("False", "ConfigurationError", "bad")], ("Invalid", "bad")),
        # Only a ConfigurationError makes it Invalid, as in MetalLB.
        ([cond("False", "UnknownError", "apiserver down")], ("Valid", "")),
        (
            [
                cond("False", "ConfigurationError", "bad", "a"),
                cond("True", "Reconciled", "", "b"),
                cond("False", "ConfigurationError", "worse", "c"),
            ],
            ("Invalid", "bad\nworse"),
        ),
    ],
    ids=["no conditions", "valid", "invalid", "unknown error", "several"],
)
def test_summary(conditions: list[dict[str, Any]], want: tuple[str, str]) -> None:
    assert cs.summary(conditions) == want


# --- components ----------------------------------------------------------------------------------


def test_components_are_named_and_labelled_as_metallb_names_them() -> None:
    assert (cs.CONTROLLER.name, cs.CONTROLLER.condition) == ("controller", "poolReconcilerValid")
    assert cs.CONTROLLER.labels == {"metallb.io/component-type": "controller"}
    s = cs.speaker("node-1")
    assert (s.name, s.condition) == ("speaker-node-1", "configReconcilerValid")
    assert s.labels == {"metallb.io/component-type": "speaker", "metallb.io/node-name": "node-1"}
    body = cs.body(s, "metallb-system")
    assert body["apiVersion"] == "metallb.io/v1beta1" and body["kind"] == "ConfigurationState"
    assert body["metadata"] == {
        "name": "speaker-node-1",
        "namespace": "metallb-system",
        "labels": s.labels,
    }


# --- when a write is due --------------------------------------------------------------------------


def obj(*conditions: Mapping[str, Any], result: str = "Valid", summary: str = "") -> Any:
    status: dict[str, Any] = {"result": result, "conditions": list(conditions)}
    if summary:
        status["errorSummary"] = summary
    return {"metadata": {"name": "speaker-n"}, "status": status}


SPEAKER = cs.speaker("n")


@pytest.mark.parametrize(
    ("current", "problems", "want"),
    [
        # Missing object or empty status: everything is written, the transition is now.
        (
            None,
            [],
            {
                "result": "Valid",
                "errorSummary": "",
                "conditions": [{**cond("True", "Reconciled"), "lastTransitionTime": T1}],
            },
        ),
        (
            {"metadata": {}},
            [BAD],
            {
                "result": "Invalid",
                "errorSummary": str(BAD),
                "conditions": [
                    {**cond("False", "ConfigurationError", str(BAD)), "lastTransitionTime": T1}
                ],
            },
        ),
        # Already says so: no write.
        (obj(cond("True", "Reconciled")), [], None),
        (obj(cond("True", "Reconciled")), [DANGLING], None),
        (
            obj(cond("False", "ConfigurationError", str(BAD)), result="Invalid", summary=str(BAD)),
            [BAD],
            None,
        ),
        # Another message, same status: the transition time stays.
        (
            obj(cond("False", "ConfigurationError", str(BAD)), result="Invalid", summary=str(BAD)),
            [BAD2],
            {
                "result": "Invalid",
                "errorSummary": str(BAD2),
                "conditions": [cond("False", "ConfigurationError", str(BAD2))],
            },
        ),
        # Fixed: the status flips, the transition is now.
        (
            obj(cond("False", "ConfigurationError", str(BAD)), result="Invalid", summary=str(BAD)),
            [],
            {
                "result": "Valid",
                "errorSummary": "",
                "conditions": [{**cond("True", "Reconciled"), "lastTransitionTime": T1}],
            },
        ),
        # Somebody edited the summary: put back.
        (
            obj(cond("True", "Reconciled"), result="Invalid"),
            [],
            {"result": "Valid", "errorSummary": "", "conditions": [cond("True", "Reconciled")]},
        ),
        # A condition of another type is kept and counts in the summary.
        (
            obj(
                cond("False", "ConfigurationError", "theirs", "otherValid"),
                cond("True", "Reconciled"),
                result="Invalid",
                summary="theirs",
            ),
            [],
            None,
        ),
        (
            obj(cond("False", "ConfigurationError", "theirs", "otherValid"), result="Invalid"),
            [],
            {
                "result": "Invalid",
                "errorSummary": "theirs",
                "conditions": [
                    cond("False", "ConfigurationError", "theirs", "otherValid"),
                    {**cond("True", "Reconciled"), "lastTransitionTime": T1},
                ],
            },
        ),
    ],
    ids=[
        "absent",
        "no status",
        "valid unchanged",
        "transient only unchanged",
        "invalid unchanged",
        "new message",
        "fixed",
        "summary edited",
        "other condition unchanged",
        "other condition kept",
    ],
)
def test_status_patch(current: Any, problems: list[Problem], want: Any) -> None:
    patch = cs.status_patch(SPEAKER, problems, current, T1)
    assert patch == (None if want is None else {"status": want})


def test_controller_problems_are_its_pools_and_communities_only() -> None:
    ns = "metallb-system"
    pools = [
        {"kind": "IPAddressPool", "metadata": {"name": n, "namespace": ns}, "spec": spec}
        for n, spec in (("p", {"addresses": ["10.0.0.0/24"]}), ("q", {"addresses": ["x"]}))
    ]
    ads = [
        {
            "kind": "BGPAdvertisement",
            "metadata": {"name": "a", "namespace": ns},
            "spec": {"communities": ["no-such-alias"]},
        }
    ]
    found = config_report.controller_problems({"IPAddressPool": pools, "BGPAdvertisement": ads})
    assert {(p.kind, p.name) for p in found} == {("IPAddressPool", "q")}
    assert cs.verdict(found).status == "False"


# --- the writer ----------------------------------------------------------------------------------


class FakeApi:
    """One namespace of ConfigurationStates, with resourceVersions and a status subresource."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.version = 0
        self.fail: kube.ApiError | None = None

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    def _check(self, call: str) -> None:
        self.calls.append(call)
        if self.fail is not None:
            raise self.fail

    async def get(self, path: str) -> dict[str, Any]:
        self._check("get")
        name = path.rsplit("/", 1)[1]
        if name not in self.objects:
            raise kube.ApiError(404, "NotFound", name)
        return dict(self.objects[name])

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check("create")
        name = body["metadata"]["name"]
        if name in self.objects:
            raise kube.ApiError(409, "AlreadyExists", name)
        stored = {k: v for k, v in body.items() if k != "status"}
        stored["metadata"] = dict(body["metadata"])
        self.objects[name] = self._bump(stored)
        return dict(self.objects[name])

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check("patch")
        name = path.rsplit("/", 2)[1]
        if name not in self.objects:
            raise kube.ApiError(404, "NotFound", name)
        obj = self.objects[name]
        obj["status"] = {**(obj.get("status") or {}), **body["status"]}
        self._bump(obj)
        return dict(obj)


def writer(api: FakeApi) -> configuration_states.Writer:
    times = iter([T0, T1, T1, T1, T1, T1, T1, T1, T1, T1])
    return configuration_states.Writer(
        api,  # type: ignore[arg-type]
        "metallb-system",
        cs.speaker("n"),
        now=lambda: next(times),
    )


def test_writer_creates_once_then_writes_only_on_change() -> None:
    api = FakeApi()
    w = writer(api)

    async def scenario() -> None:
        assert await w.sync([])
        assert api.calls == ["get", "create", "patch"]
        stored = api.objects["speaker-n"]
        assert stored["metadata"]["labels"]["metallb.io/node-name"] == "n"
        assert stored["status"]["result"] == "Valid"
        version = stored["metadata"]["resourceVersion"]
        for _ in range(5):
            assert await w.sync([DANGLING])
        assert api.calls == ["get", "create", "patch"]
        assert await w.sync([], refresh=True)  # a read, no write
        assert api.calls[-1] == "get" and stored["metadata"]["resourceVersion"] == version
        assert await w.sync([BAD])
        assert stored["status"]["result"] == "Invalid"
        assert stored["status"]["errorSummary"] == str(BAD)
        assert await w.sync([])
        assert stored["status"]["result"] == "Valid" and stored["status"]["errorSummary"] == ""
        assert w.writes == 4

    asyncio.run(scenario())


def test_writer_puts_back_a_deleted_object_when_it_reads_again() -> None:
    api = FakeApi()
    w = writer(api)

    async def scenario() -> None:
        assert await w.sync([BAD])
        del api.objects["speaker-n"]
        assert await w.sync([BAD])  # not read again: nothing known to be missing
        assert "speaker-n" not in api.objects
        assert await w.sync([BAD], refresh=True)
        assert api.objects["speaker-n"]["status"]["result"] == "Invalid"

    asyncio.run(scenario())


def test_writer_failure_is_reported_once_and_the_next_sync_reads_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = FakeApi()
    w = writer(api)

    async def scenario() -> None:
        # E.g. the CRD is not installed yet, then the apiserver is down: each kind of failure
        # is logged once, however many retries.
        api.fail = kube.ApiError(404, "NotFound", "the server could not find the resource")
        for _ in range(3):
            assert not await w.sync([], refresh=True)
        api.fail = kube.ApiError(503, "ServiceUnavailable", "down")
        for _ in range(3):
            assert not await w.sync([])
        warnings = [r for r in caplog.records if r.name == "ironlb_io.configuration_states"]
        assert [r.error for r in warnings] == [  # type: ignore[attr-defined]
            "404 NotFound: the server could not find the resource",
            "503 ServiceUnavailable: down",
        ]
        api.fail = None
        api.calls.clear()
        assert await w.sync([])
        assert api.calls == ["get", "create", "patch"]
        # Someone else created it meanwhile: a 409 on create reads it and patches it.
        del api.objects["speaker-n"]
        api.objects["speaker-n"] = {"metadata": {"name": "speaker-n", "resourceVersion": "99"}}
        w2 = writer(api)
        w2._known = True  # thinks it is absent, as after a 404 read just before the create
        assert await w2.sync([BAD])
        assert api.objects["speaker-n"]["status"]["result"] == "Invalid"

    asyncio.run(scenario())
