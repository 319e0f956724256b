"""Text for ExaBGP: one configuration file per peer, and API command lines.

Configuration: one ExaBGP process serves exactly one peer (docs/bgp.md explains why), so a file
holds one `process` (the API bridge) and one `neighbor`. Mapping from BGPPeer fields:

- peerAddress -> `neighbor <ip>`; peerPort -> `connect <port>` (when not 179);
  sourceAddress -> `local-address` (else `auto`: the kernel picks, as MetalLB's native dialer);
- myASN/peerASN -> `local-as`/`peer-as` (`auto` when the ASN is learned from the peer);
  localASN, when set, is the `local-as` instead of myASN: the OPEN carries it and, as under
  FRR's `local-as N no-prepend replace-as` (MetalLB's rendering), the AS_PATH holds it alone
  (ExaBGP puts its local-as alone on the path of a route of ours on eBGP);
- routerID -> `router-id` (else the source address if IPv4, else MetalLB's CRC32-of-node-name
  fallback: ExaBGP insists on a router ID in the file when the local address is `auto`);
- holdTime -> `hold-time` (90 s when unset, MetalLB's default). ExaBGP has no keepalive setting:
  it sends keepalives every negotiated hold time / 3 (`peers.check` reports a differing value);
- ebgpMultiHop -> `outgoing-ttl 255`; a single-hop eBGP session sends TTL 1 and iBGP 255, as FRR
  does (MetalLB's default backend), instead of the kernel default 64;
- password -> `md5-password` in base64 with `md5-base64 true`, so that no byte of a password can
  break the configuration syntax (ExaBGP's tokenizer has no escape for a quote inside quotes);
- enableGracefulRestart -> `capability { graceful-restart 120; }` (FRR's default restart time)
  and `manual-eor true`: after a restart the peer keeps our routes as stale until our End-of-RIB,
  which must therefore follow the routes the speaker computed, not ExaBGP's empty start (see
  `speaking`);
- address families: the session's own, or both for dualStackAddressFamily (the other family's
  routes then name the peer's `ipv4_next_hop`/`ipv6_next_hop` instead of `self`; the speaker
  fills them in from this node's addresses, see `next_hops`).

API commands: `announce route P next-hop self origin igp [local-preference N]
[community [..]] [large-community [..]]`, or `announce attributes ... nlri P1 P2 ...` for several
prefixes sharing their attributes (half the cost per prefix for bulk changes); withdrawals need
no attributes (`withdraw route P`, `withdraw attributes nlri P1 P2 ...`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass

from speaker.bgp import peers as peers_module
from speaker.bgp import routes as routes_module

PROCESS_NAME = "ironlb"
# Prefixes per `attributes ... nlri` line. Commands are sent one at a time, each waiting for
# its acknowledgement, and on a loaded machine each of those round trips waits for both
# processes to be scheduled again: fewer, bigger lines (ExaBGP reads a long line over several
# turns of its loop and applies 50 routes a turn, so it keeps sending meanwhile).
BATCH = 2000
# The first announcement line of a change is short, so that the first routes are on the wire
# after ExaBGP parsed a few of them rather than thousands.
FIRST_BATCH = 100

_SAFE_WORD = re.compile(r"^[^\s;{}\[\]\"'#]+$")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


def _word(text: str) -> str:
    if not _SAFE_WORD.match(text):
        raise ValueError(f"{text!r} cannot be written into an ExaBGP configuration")
    return text


def config(peer: peers_module.Peer, helper: Sequence[str], node_name: str) -> str:
    """The ExaBGP configuration for `peer`; `helper` is the bridge's argv (absolute paths)."""
    if not helper or not helper[0].startswith("/"):
        raise ValueError("the helper command must start with an absolute path")
    lines = [
        f"# ironlb: BGPPeer {_SAFE_NAME.sub('_', peer.name)}, rendered by the speaker.",
        f"process {PROCESS_NAME} {{",
        f"    run {' '.join(_word(arg) for arg in helper)};",
        "    encoder json;",
        "}",
        "",
        f"neighbor {peer.peer_address} {{",
        f"    description {_SAFE_NAME.sub('_', peer.name)};",
    ]
    lines.append(f"    router-id {peers_module.router_id(peer, node_name)};")
    lines.append(f"    local-address {peer.source_address or 'auto'};")
    lines.append(f"    local-as {peer.local_as};")
    lines.append(f"    peer-as {'auto' if peer.peer_asn is None else peer.peer_asn};")
    if peer.peer_port != peers_module.DEFAULT_PORT:
        lines.append(f"    connect {peer.peer_port};")
    lines.append(f"    hold-time {peer.effective_hold_time};")
    ttl = 1 if not peer.is_ibgp and not peer.ebgp_multi_hop else 255
    lines.append(f"    outgoing-ttl {ttl};")
    if peer.password:
        encoded = base64.b64encode(peer.password.encode()).decode()
        lines.append(f"    md5-password {encoded};")
        lines.append("    md5-base64 true;")
    if peer.graceful_restart:
        lines += [
            "    manual-eor true;",
            "    capability {",
            f"        graceful-restart {peers_module.GRACEFUL_RESTART_TIME};",
            "    }",
        ]
    lines.append("    family {")
    for family in peer.families:
        lines.append(f"        ipv{family} unicast;")
    lines.append("    }")
    lines += [
        "    api {",
        f"        processes [ {PROCESS_NAME} ];",
        "        neighbor-changes;",
        # Every UPDATE put on the wire is reported: how shutdown knows its withdrawals left.
        "        send { parsed; update; }",
        "    }",
        "}",
        "",
    ]
    return "\n".join(lines)


# --- API commands ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Command:
    """One API line and the routes it changes once ExaBGP acknowledges it."""

    text: str
    announce: tuple[routes_module.Prefix, ...] = ()
    attributes: routes_module.RouteAttributes | None = None
    withdraw: tuple[routes_module.Prefix, ...] = ()


def attributes_text(attrs: routes_module.RouteAttributes) -> str:
    parts = ["origin igp"]
    if attrs.local_pref is not None:
        parts.append(f"local-preference {attrs.local_pref}")
    if attrs.communities:
        parts.append("community [ " + " ".join(str(c) for c in sorted(attrs.communities)) + " ]")
    if attrs.large_communities:
        values = " ".join(str(c) for c in sorted(attrs.large_communities))
        parts.append(f"large-community [ {values} ]")
    return " ".join(parts)


def _next_hop(peer: peers_module.Peer, prefix: routes_module.Prefix) -> str:
    explicit = peer.next_hop(prefix.version)
    if explicit is not None:
        return str(explicit)
    if prefix.version != peer.family:
        raise ValueError(f"{prefix}: no next hop for this family on peer {peer.name}")
    return "self"


def _sort_key(prefix: routes_module.Prefix) -> tuple[int, int, int]:
    return (prefix.version, int(prefix.network_address), prefix.prefixlen)


def _chunks(
    items: Sequence[routes_module.Prefix], size: int, first: int | None = None
) -> list[Sequence[routes_module.Prefix]]:
    """`items` cut into runs of `size`, the first of which has at most `first`."""
    head = size if first is None else min(first, size)
    out = [items[:head]] if items else []
    return out + [items[i : i + size] for i in range(head, len(items), size)]


def commands(
    peer: peers_module.Peer,
    change: routes_module.Change,
    batch: int = BATCH,
    first_batch: int = FIRST_BATCH,
) -> list[Command]:
    """API lines carrying out `change` for `peer`: withdrawals first, then announcements
    grouped by (next hop, attributes), in a deterministic order, at most `batch` prefixes a
    line and `first_batch` in the first announcement line."""
    out: list[Command] = []
    first: int | None = first_batch
    for chunk in _chunks(sorted(change.withdraw, key=_sort_key), batch):
        if len(chunk) == 1:
            text = f"withdraw route {chunk[0]}"
        else:
            text = "withdraw attributes nlri " + " ".join(str(p) for p in chunk)
        out.append(Command(text, withdraw=tuple(chunk)))
    groups: dict[tuple[str, routes_module.RouteAttributes], list[routes_module.Prefix]] = {}
    for prefix, attrs in change.announce.items():
        groups.setdefault((_next_hop(peer, prefix), attrs), []).append(prefix)
    ordered = sorted(groups.items(), key=lambda item: _sort_key(min(item[1], key=_sort_key)))
    for (next_hop, attrs), prefixes in ordered:
        attr_text = attributes_text(attrs)
        for chunk in _chunks(sorted(prefixes, key=_sort_key), batch, first):
            first = None
            if len(chunk) == 1:
                text = f"announce route {chunk[0]} next-hop {next_hop} {attr_text}"
            else:
                nlri = " ".join(str(p) for p in chunk)
                text = f"announce attributes next-hop {next_hop} {attr_text} nlri {nlri}"
            out.append(Command(text, announce=tuple(chunk), attributes=attrs))
    return out


def end_of_rib(family: int) -> str:
    """The End-of-RIB marker for one address family (sent by hand with `manual-eor`)."""
    return f"announce eor ipv{family} unicast"


def teardown(peer: peers_module.Peer, code: int = 6) -> str:
    """Close the session with a NOTIFICATION (6 = Cease); ExaBGP reconnects by itself."""
    return f"neighbor {peer.peer_address} teardown {code}"
