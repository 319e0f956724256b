"""What ExaBGP tells its API process, as values. Pure: one line in, one event out, never raises.

With `encoder json`, `neighbor-changes` and `send { parsed; update; }` ExaBGP writes one line per
event: acknowledgements (`done` / `error`, one per command because `exabgp.api.ack=true`), JSON
session state changes (`connected`, `up`, `down` with a reason) and JSON reports of each UPDATE
it sent (announced and withdrawn prefixes, or an End-of-RIB marker). Anything else (for example
"shutdown in progress", or a JSON type we did not ask for) becomes `Other` and is only logged.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any, Literal

from speaker.bgp import routes as routes_module

SessionState = Literal["connected", "up", "down"]
_STATES: frozenset[str] = frozenset({"connected", "up", "down"})


@dataclass(frozen=True, slots=True)
class Ack:
    ok: bool


@dataclass(frozen=True, slots=True)
class StateChange:
    peer: str  # the peer's address as ExaBGP prints it
    state: SessionState
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Sent:
    """One UPDATE (or End-of-RIB) that ExaBGP wrote to the peer's socket."""

    peer: str
    announced: frozenset[routes_module.Prefix] = frozenset()
    withdrawn: frozenset[routes_module.Prefix] = frozenset()
    end_of_rib: bool = False


@dataclass(frozen=True, slots=True)
class Other:
    text: str


Event = Ack | StateChange | Sent | Other


def parse(line: str) -> Event:
    text = line.strip()
    if text == "done":
        return Ack(True)
    if text == "error":
        return Ack(False)
    if not text.startswith("{"):
        return Other(text)
    try:
        message = json.loads(text)
    except ValueError:
        return Other(text)
    try:
        return _parse_json(message) or Other(text)
    except (TypeError, ValueError, KeyError, AttributeError):
        return Other(text)


def _parse_json(message: Any) -> Event | None:
    if not isinstance(message, dict):
        return None
    neighbor = message.get("neighbor")
    if not isinstance(neighbor, dict):
        return None
    peer = str(neighbor["address"]["peer"])
    kind = message.get("type")
    if kind == "state":
        state = neighbor.get("state")
        if state not in _STATES:
            return None
        return StateChange(peer, state, str(neighbor.get("reason", "")))
    if kind == "update" and neighbor.get("direction") == "send":
        body = neighbor.get("message", {})
        if "eor" in body:
            return Sent(peer, end_of_rib=True)
        update = body.get("update")
        if not isinstance(update, dict):
            return None
        return Sent(
            peer,
            announced=frozenset(_announced(update.get("announce", {}))),
            withdrawn=frozenset(_withdrawn(update.get("withdraw", {}))),
        )
    return None


def _prefix(entry: Any) -> routes_module.Prefix:
    return ipaddress.ip_network(str(entry["nlri"]), strict=False)


def _announced(by_family: Any) -> list[routes_module.Prefix]:
    # {"ipv4 unicast": {"<next hop>": [{"nlri": "10.0.0.1/32"}, ...]}}
    out: list[routes_module.Prefix] = []
    for by_next_hop in by_family.values():
        for entries in by_next_hop.values():
            out.extend(_prefix(e) for e in entries)
    return out


def _withdrawn(by_family: Any) -> list[routes_module.Prefix]:
    # {"ipv4 unicast": [{"nlri": "10.0.0.1/32"}, ...]}
    out: list[routes_module.Prefix] = []
    for entries in by_family.values():
        out.extend(_prefix(e) for e in entries)
    return out
