"""One node's verdict on one Service, as `/explain` serves it to `ironlb status --explain`. Pure.

The pass already decided everything: which addresses this node answers for and why not the
others (`desired.L2Plan.reasons`/`messages`), which Services it announces over BGP and to which
peers, and why not the others (`desired.BGPPlan.reasons`/`messages`); in both modes a node's
checks speak through the one walk of them, `desired.node_verdict`. This module only puts one
Service's part of that into the JSON the CLI reads, so every speaker states its own node's
verdict in the same words as its logs, metrics and Events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ironlb import configuration_state, model
from speaker import desired


@dataclass(frozen=True, slots=True)
class Seen:
    """What the latest pass decided (replaced whole after each pass)."""

    services: Mapping[str, desired.Service]
    l2: desired.L2Plan | None  # None: this speaker does no layer 2
    bgp: desired.BGPPlan | None  # None: this speaker does no BGP
    reached: Mapping[str, tuple[model.PeerName, ...]]
    datapath: configuration_state.Verdict | None


PEER_DOWN = "noPeerEstablished"


def explained(
    node: str, seen: Seen, key: str, conflicts: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any] | None:
    """The `/explain` body for Service `key`; None when this node does not know the Service.

    `conflicts`: rogue answers seen for this Service's addresses (already as JSON objects)."""
    service = seen.services.get(key)
    if service is None:
        return None
    ips = [str(ip) for ip in service.ips]
    verdicts: list[dict[str, Any]] = []
    if seen.l2 is not None:
        mine = [str(e.address) for e in seen.l2.mine if key in e.services]
        if mine:
            verdicts.append(_verdict("layer2", True, None, "answering ARP/NDP", mine))
        else:
            why = seen.l2.reasons.get(key, desired.Reason.NOT_OWNER)
            verdicts.append(_verdict("layer2", False, str(why), seen.l2.messages.get(key, ""), ips))
    if seen.bgp is not None:
        peers = seen.reached.get(key)
        planned = any(entry.service == key for entry in seen.bgp.mine)
        if peers:
            message = f"to peers {', '.join(sorted(peers))}"
            verdicts.append(_verdict("bgp", True, None, message, ips))
        elif planned:
            message = "selected here, but no BGP session to a selected peer is established"
            verdicts.append(_verdict("bgp", False, PEER_DOWN, message, ips))
        else:
            why = seen.bgp.reasons.get(key, desired.Reason.NOT_OWNER)
            verdicts.append(_verdict("bgp", False, str(why), seen.bgp.messages.get(key, ""), ips))
    path = seen.datapath
    return {
        "node": node,
        "service": key,
        "datapath": {
            "ready": path is None or path.status == "True",
            "reason": None if path is None or path.status == "True" else path.reason,
            "message": "" if path is None else path.message,
        },
        "verdicts": verdicts,
        "conflicts": [dict(c) for c in conflicts if c.get("ip") in ips],
    }


def _verdict(
    protocol: str, announcing: bool, reason: str | None, message: str, ips: list[str]
) -> dict[str, Any]:
    return {
        "protocol": protocol,
        "announcing": announcing,
        "reason": reason,
        "message": message,
        "ips": ips,
    }
