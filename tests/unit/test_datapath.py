"""ironlb.datapath: the gossiped readiness survives the wire; drain reads the Node's fields."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ironlb import datapath

keys = st.text(st.characters(codec="utf-8", exclude_characters="\n"), min_size=1, max_size=60)


@given(st.booleans(), st.frozensets(keys, max_size=30))
def test_round_trip_within_the_size_bound(ready: bool, lagging: frozenset[str]) -> None:
    sent = datapath.NodeReadiness(ready, lagging)
    data = sent.encode()
    assert len(data) <= datapath.MAX_ENCODED
    got = datapath.decode(data)
    assert got is not None and got.proxy_ready == ready
    if got.overflow:
        # What did not fit is left out, said so, and nothing is invented.
        assert got.unready_local < lagging
    else:
        assert got.unready_local == lagging


@given(st.binary(max_size=600))
def test_decode_never_raises(data: bytes) -> None:
    datapath.decode(data)


def test_older_speakers_send_nothing() -> None:
    assert datapath.decode(b"") is None
    assert datapath.decode(b"\x09\x01") is None  # a version we do not know


def test_overflow_keeps_the_check_for_listed_services_only() -> None:
    many = frozenset(f"namespace-{i}/service-{i}" for i in range(100))
    got = datapath.decode(datapath.NodeReadiness(True, many).encode())
    assert got is not None and got.overflow
    listed = next(iter(got.unready_local))
    assert not got.ready_for(listed, local=True)
    assert got.ready_for(listed, local=False)


def test_drain_reasons_in_order() -> None:
    taint = datapath.TO_BE_DELETED_TAINTS[0]
    assert (
        datapath.drain(deleting=False, taints=(), unschedulable=False, drain_on_cordon=True) is None
    )
    got = datapath.drain(deleting=True, taints=(taint,), unschedulable=True, drain_on_cordon=True)
    assert got is not None and got.reason == datapath.Reason.NODE_DELETING
    got = datapath.drain(
        deleting=False, taints=("other", taint), unschedulable=False, drain_on_cordon=False
    )
    assert got is not None and got.reason == datapath.Reason.NODE_TO_BE_DELETED
    assert (
        datapath.drain(deleting=False, taints=(), unschedulable=True, drain_on_cordon=False) is None
    )
    got = datapath.drain(deleting=False, taints=(), unschedulable=True, drain_on_cordon=True)
    assert got is not None and got.reason == datapath.Reason.NODE_CORDONED


@given(st.booleans(), st.frozensets(keys, max_size=60))
def test_as_gossiped_is_what_the_others_decode(ready: bool, lagging: frozenset[str]) -> None:
    verdict = datapath.NodeReadiness(ready, lagging)
    seen = verdict.as_gossiped()
    assert seen == datapath.decode(verdict.encode())
    assert seen.as_gossiped() == seen  # cutting again changes nothing
