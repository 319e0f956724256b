"""The one IP rule (`addresses.parse_ip`, Go's net.ParseIP) and every reader that relies on it.

One table: an address as written -> how MetalLB reads it (None: not an address). Each caller that
reads an address from the API is checked against the same rows, so a second spelling of the rule
cannot creep back in unnoticed.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller import requests
from ironlb import addresses, parsing, services
from ironlb import annotations as keys
from speaker import election
from speaker import snapshot as speaker_snapshot

IPS: list[tuple[str, str | None]] = [
    ("10.0.0.1", "10.0.0.1"),
    ("2001:DB8:0::1", "2001:db8::1"),  # printed as RFC 5952, as Go's String() does
    ("::", "::"),
    ("::ffff:10.0.0.1", "10.0.0.1"),  # IPv4-mapped is IPv4 (Go's To4)
    ("::FFFF:a00:1", "10.0.0.1"),
    ("::10.0.0.1", "::a00:1"),  # IPv4-compatible is not mapped: it stays IPv6
    (" 10.0.0.1", None),  # Go trims nothing
    ("10.0.0.1 ", None),
    ("10.0.0.1\n", None),
    ("fe80::1%eth0", None),  # Go refuses zones; Python's ip_address would accept this
    ("010.0.0.1", None),  # leading zeros are ambiguous (octal?), refused by both
    ("10.0.0", None),
    ("10.0.0.1/32", None),
    ("[2001:db8::1]", None),
    ("host.example", None),
    ("", None),
]


def printed(ip: addresses.IPAddress | None) -> str | None:
    return None if ip is None else str(ip)


@pytest.mark.parametrize(("text", "expected"), IPS)
def test_parse_ip(text: str, expected: str | None) -> None:
    assert printed(addresses.parse_ip(text)) == expected


@pytest.mark.parametrize("value", [None, 167772161, b"10.0.0.1", ["10.0.0.1"]])
def test_only_text_is_an_address(value: object) -> None:
    assert addresses.parse_ip(value) is None


def with_ingress(text: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "app", "name": "web"},
        "spec": {"type": "LoadBalancer"},
        "status": {"loadBalancer": {"ingress": [{"ip": text}]}},
    }


@pytest.mark.parametrize(("text", "expected"), [row for row in IPS if row[0]])
def test_status_ingress_reads_by_the_rule(text: str, expected: str | None) -> None:
    ingress = services.ingress(with_ingress(text))
    assert tuple(map(str, ingress.ips)) == ((expected,) if expected else ())
    assert ingress.invalid == (() if expected else (text,))


@pytest.mark.parametrize(("text", "expected"), [row for row in IPS if row[0]])
def test_the_speaker_withdraws_a_service_whose_ingress_does_not_parse(
    text: str, expected: str | None
) -> None:
    view = speaker_snapshot.service_view(with_ingress(text), [])
    assert (None if view is None else tuple(map(str, view.ips))) == (
        (expected,) if expected else None
    )


@pytest.mark.parametrize(("text", "expected"), [row for row in IPS if row[0]])
def test_spec_load_balancer_ip_reads_by_the_rule(text: str, expected: str | None) -> None:
    request = requests.requested_ips({}, text)
    assert tuple(map(str, request.ips)) == ((expected,) if expected else ())
    assert (request.error is None) == (expected is not None)


@pytest.mark.parametrize(("text", "expected"), [row for row in IPS if row[0].strip()])
def test_the_annotation_trims_each_entry_first(text: str, expected: str | None) -> None:
    # MetalLB: net.ParseIP(strings.TrimSpace(entry)); so " 10.0.0.1" is accepted here only.
    trimmed = addresses.parse_ip(text.strip())
    request = requests.requested_ips({keys.LOAD_BALANCER_IPS.name: f" {text} "})
    assert tuple(map(str, request.ips)) == ((str(trimmed),) if trimmed else ())


@pytest.mark.parametrize(("text", "expected"), [row for row in IPS if row[0]])
def test_bgp_peer_address_reads_by_the_rule(text: str, expected: str | None) -> None:
    peer = {
        "apiVersion": "metallb.io/v1beta2",
        "kind": "BGPPeer",
        "metadata": {"name": "tor", "namespace": "metallb-system"},
        "spec": {"myASN": 64500, "peerASN": 64501, "peerAddress": text},
    }
    parsed, problems = parsing.parse_bgppeer(peer)
    assert printed(parsed.peer_address if parsed else None) == expected
    assert bool(problems) == (expected is None)


@pytest.mark.parametrize(("text", "expected"), [row for row in IPS if row[1]])
def test_the_election_hashes_the_printed_address(text: str, expected: str) -> None:
    nodes = [f"n{i}" for i in range(16)]
    assert election.order(text, nodes) == election.order(expected, nodes)
