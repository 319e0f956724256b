"""speaker.joining: membership waits for its key, its address and its seeds, never dies of them.

Real members on 127.0.0.1 (their own loop threads, as in the speaker); the DNS answers are a fake
lookup, so that a test decides when a name starts to resolve. Waits are bounded polls.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from ironlb import backoff
from ironlb_io import prometheus
from speaker import joining, seeds
from speaker.membership import sealing

EVENTUALLY_S = 20.0


def quick() -> backoff.Backoff:
    return backoff.Backoff(first=0.01, cap=0.05)


class Dns:
    """A lookup that fails until told otherwise, counting the questions."""

    def __init__(self) -> None:
        self.answer: list[str] | None = None
        self.asked = 0

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked += 1
        if self.answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(self.answer)


async def eventually(predicate: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + EVENTUALLY_S
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"not within {EVENTUALLY_S:.0f}s: {what}")
        await asyncio.sleep(0.01)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def settings(name: str, seed_text: str = "", key_dir: str = "") -> joining.Settings:
    """A seed without a port gets the member's own, as in the speaker (`--ml-bind-port`)."""
    port = free_port()
    return joining.Settings(
        name=name,
        bind="127.0.0.1",
        port=port,
        seeds=tuple(seeds.parse(seed_text, port)),
        key_dir=key_dir,
    )


@pytest.fixture
async def running() -> AsyncIterator[Callable[[joining.Membership], joining.Membership]]:
    started: list[tuple[joining.Membership, asyncio.Future[None]]] = []

    def start(member: joining.Membership) -> joining.Membership:
        started.append((member, asyncio.ensure_future(member.run())))
        return member

    try:
        yield start
    finally:
        for member, task in started:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await member.leave()


def lines(caplog: pytest.LogCaptureFixture, message: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == message]


async def test_unresolved_seeds_are_retried_logged_once_and_block_readiness(
    running: Callable[[joining.Membership], joining.Membership],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="speaker.joining")
    dns = Dns()
    member = running(
        joining.Membership(
            settings("a", "members.metallb-system.svc"),
            prometheus.Registry(),
            lookup=dns,
            new_backoff=quick,
            rejoin_every=0.05,
        )
    )
    assert member.reasons() == (joining.SEEDS_UNRESOLVED,)
    await eventually(lambda: dns.asked >= 5, "several retries")
    # Running, but not deciding liveness: the agent falls back to Node Ready.
    assert member.member is not None
    assert member.members() is None
    assert member.reasons() == (joining.SEEDS_UNRESOLVED,)
    failures = lines(caplog, "membership seeds do not resolve; retrying")
    assert len(failures) == 1
    record = failures[0].__dict__
    assert record["seeds"] == "members.metallb-system.svc"
    assert "Name or service not known" in record["error"]

    member.changed.clear()
    dns.answer = ["127.0.0.1"]
    await eventually(lambda: member.members() == frozenset({"a"}), "membership decides")
    assert member.reasons() == ()
    assert member.changed.is_set()  # the agent runs a pass with membership's view
    assert len(lines(caplog, "membership seeds resolved")) == 1
    # A later failure keeps membership in charge and the speaker ready.
    dns.answer = None
    asked = dns.asked
    await eventually(lambda: dns.asked > asked + 2, "retries after a success")
    assert member.members() == frozenset({"a"})
    assert member.reasons() == ()
    assert len(lines(caplog, "membership seeds do not resolve; retrying")) == 2


async def test_a_member_that_found_us_ends_the_wait_for_seeds(
    running: Callable[[joining.Membership], joining.Membership],
) -> None:
    lonely = running(
        joining.Membership(
            settings("lonely", "no-such-host.invalid"),
            prometheus.Registry(),
            lookup=Dns(),
            new_backoff=quick,
        )
    )
    await eventually(lambda: lonely.member is not None, "lonely started")
    assert lonely.member is not None
    port = lonely.member.node.bind.port
    dns = Dns()
    dns.answer = ["127.0.0.1"]
    running(
        joining.Membership(
            settings("finder", f"finder-seed:{port}"),
            prometheus.Registry(),
            lookup=dns,
            new_backoff=quick,
        )
    )
    await eventually(
        lambda: lonely.members() == frozenset({"lonely", "finder"}), "lonely sees finder"
    )
    assert lonely.reasons() == ()


async def test_seeds_that_nobody_answers_leave_liveness_to_node_ready(
    running: Callable[[joining.Membership], joining.Membership],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """UDP filtered or keys that differ: alone in its own membership, a speaker would take (and
    gratuitously ARP) every address; it stays on Node Ready until another member is heard."""
    caplog.set_level(logging.INFO, logger="speaker.joining")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))  # receives the joins, never answers
        dns = Dns()
        dns.answer = ["127.0.0.1"]
        member = running(
            joining.Membership(
                settings("a", f"members.metallb-system.svc:{silent.getsockname()[1]}"),
                prometheus.Registry(),
                lookup=dns,
                new_backoff=quick,
                rejoin_every=0.05,
            )
        )
        await eventually(lambda: dns.asked >= 5, "several joins")
        assert member.member is not None
        assert member.members() is None
        assert member.reasons() == (joining.NO_MEMBER_ANSWERED,)
        unanswered = lines(
            caplog, "membership seeds resolved but no member answered; liveness from Node Ready"
        )
        assert len(unanswered) == 1
        assert unanswered[0].levelname == "WARNING"
        assert unanswered[0].__dict__["addresses"] == f"127.0.0.1:{silent.getsockname()[1]}"
        assert not taking_over(caplog, "a")

        # Another member is heard: membership speaks for the cluster from then on.
        member.changed.clear()
        port = member.member.node.advertise.port
        running(joining.Membership(settings("b", f"127.0.0.1:{port}"), prometheus.Registry()))
        await eventually(lambda: member.members() == frozenset({"a", "b"}), "a hears b")
        assert member.reasons() == ()
        assert member.changed.is_set()
        # Once, by a; b takes over too, when it hears a (sooner or later: not counted here).
        assert len(taking_over(caplog, "a")) == 1


def taking_over(caplog: pytest.LogCaptureFixture, node: str) -> list[logging.LogRecord]:
    return [
        r
        for r in lines(caplog, "membership now decides which speakers are alive")
        if r.__dict__.get("node") == node
    ]


async def test_seeds_that_name_only_this_member_are_a_cluster_of_one(
    running: Callable[[joining.Membership], joining.Membership],
) -> None:
    dns = Dns()
    dns.answer = ["127.0.0.1"]  # the headless Service of a one-node cluster: ourselves
    member = running(
        joining.Membership(
            settings("only", "members.metallb-system.svc"), prometheus.Registry(), lookup=dns
        )
    )
    await eventually(lambda: member.members() == frozenset({"only"}), "decides at once")
    assert dns.asked == 1  # on the first resolution, not after a wait for an answer
    assert member.reasons() == ()


async def test_no_seeds_means_alone_on_purpose(
    running: Callable[[joining.Membership], joining.Membership],
) -> None:
    member = running(joining.Membership(settings("solo"), prometheus.Registry()))
    assert member.reasons() == ()
    await eventually(lambda: member.members() == frozenset({"solo"}), "started")


async def test_a_missing_key_holds_membership_back_until_it_appears(
    running: Callable[[joining.Membership], joining.Membership],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="speaker.joining")
    key_dir = tmp_path / "ml"
    registry = prometheus.Registry()
    member = running(
        joining.Membership(settings("keyed", key_dir=str(key_dir)), registry, new_backoff=quick)
    )
    await eventually(lambda: joining.KEY_MISSING in member.reasons(), "key missing reported")
    await asyncio.sleep(0.2)  # many retries
    assert member.member is None
    assert member.members() is None  # never plain text in the meantime
    missing = lines(
        caplog, "membership key missing; membership waits for it, liveness from Node Ready"
    )
    assert len(missing) == 1
    key_dir.mkdir()
    (key_dir / "secretkey").write_text("")  # an empty key is no key
    await eventually(
        lambda: (
            len(
                lines(
                    caplog,
                    "membership key missing; membership waits for it, liveness from Node Ready",
                )
            )
            == 2
        ),
        "the empty key noticed",
    )
    assert member.member is None
    (key_dir / "secretkey").write_text("s3cret\n")
    await eventually(lambda: member.members() == frozenset({"keyed"}), "started with the key")
    assert member.reasons() == ()
    started = getattr(member, "member")  # noqa: B009 - not narrowed by the None check above
    assert started is not None and not started.node._sealer.keyring.plain
    assert registry.get_sample_value("ironlb_memberlist_members", {"state": "alive"}) == 1


async def test_an_address_that_cannot_be_bound_yet_is_retried(
    running: Callable[[joining.Membership], joining.Membership],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="speaker.joining")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        member = running(
            joining.Membership(
                joining.Settings(name="late", bind="127.0.0.1", port=port),
                prometheus.Registry(),
                new_backoff=quick,
            )
        )
        await eventually(lambda: joining.BIND_FAILED in member.reasons(), "bind failure reported")
        await asyncio.sleep(0.2)
        assert member.member is None
        assert len(lines(caplog, "membership cannot bind its address; retrying")) == 1
    await eventually(lambda: member.members() == frozenset({"late"}), "bound once free")
    assert member.reasons() == ()
    assert len(lines(caplog, "membership bound its address")) == 1


async def test_a_rotated_key_read_at_different_moments_drops_no_datagram(
    running: Callable[[joining.Membership], joining.Membership],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Secret rotated by GitOps reaches the speakers' files minutes apart: each keeps sealing
    with the old key a while, so nobody drops the other's datagrams and both end on the new
    key alone."""
    caplog.set_level(logging.INFO, logger="speaker.joining")
    dirs = {name: tmp_path / name for name in ("a", "b")}
    for d in dirs.values():
        d.mkdir()
        (d / "secretkey").write_text("first key\n")
    first = running(
        joining.Membership(
            settings("a", key_dir=str(dirs["a"])),
            prometheus.Registry(),
            new_backoff=quick,
            key_poll_s=0.05,
            key_seal_old_s=1.0,
        )
    )
    await eventually(lambda: first.member is not None, "a started")
    assert first.member is not None
    dns = Dns()
    dns.answer = ["127.0.0.1"]
    second = running(
        joining.Membership(
            settings("b", f"a-seed:{first.member.node.bind.port}", key_dir=str(dirs["b"])),
            prometheus.Registry(),
            lookup=dns,
            new_backoff=quick,
            key_poll_s=0.05,
            key_seal_old_s=1.0,
        )
    )
    both = frozenset({"a", "b"})
    await eventually(lambda: first.members() == both == second.members(), "a and b joined")
    assert second.member is not None
    nodes = (first.member.node, second.member.node)
    new = sealing.Keyring.from_secrets([b"second key"])

    (dirs["a"] / "secretkey").write_text("second key\n")
    loop = asyncio.get_running_loop()
    end = loop.time() + 0.7
    while loop.time() < end:  # b reads the new key 0.7 s after a
        assert first.members() == both == second.members()
        await asyncio.sleep(0.05)
    (dirs["b"] / "secretkey").write_text("second key\n")
    await eventually(
        lambda: all(n._sealer.keyring == new for n in nodes), "both on the new key alone"
    )
    assert first.members() == both == second.members()
    for n in nodes:
        assert not n.drops, n.drops
    assert (
        len(lines(caplog, "membership key changed; sealing with the previous one a while longer"))
        == 2
    )
