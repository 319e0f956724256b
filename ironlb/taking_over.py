"""Taking a node over from the load balancer that served it before (MetalLB), without a gap.

A speaker started with `--take-over-from SELECTOR` watches the Pods of its namespace that match
the selector and are bound to its node: the other load balancer's speaker there. While one of
them runs, this node's ironlb speaker stands by: its membership runs (so that it knows every
other member before it is needed), but it answers no ARP/NDP, opens no BGP session, and writes
no status object or ConfigurationState (that speaker writes them, with the same labels and
name), removing those it wrote itself. What the node does follows the Pod:

* `STANDING_BY`: a Ready Pod that is not being deleted. Its speaker answers for the node;
  a second speaker there would send a second set of gratuitous ARPs and collide with its BGP
  sessions (the router keeps one session per address).
* `LAYER2_ONLY`: no such Pod, but one being deleted. Its speaker is stopping: this node answers
  in layer 2 at once. Both speakers of one node answer an address with the same MAC, and the
  election is MetalLB's, so a client's ARP cache stays right whoever answers. BGP waits: the
  old speaker's sessions may still be open, and the router would refuse a second one from the
  same address (a connection collision) and back it off.
* `EVERYTHING`: no such Pod on this node (gone: its containers have stopped, so have its
  sessions), only Pods not Ready yet (a speaker starting: this one serves until that one can),
  or `--take-over-from` not given.

The rule is level-triggered on the Pods alone: going back (MetalLB installed again) stands the
node down once MetalLB's speaker Pod there is Ready, before ironlb is uninstalled.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The labels MetalLB's chart gives its speaker Pods: the selector the docs and chart suggest.
METALLB_SPEAKER_SELECTOR = "app.kubernetes.io/name=metallb,app.kubernetes.io/component=speaker"
_FINISHED_PHASES = ("Succeeded", "Failed")
# A label key (optional DNS prefix, then a name) and value, as the apiserver checks them.
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*"
_REQUIREMENT = re.compile(rf"(({_PREFIX})/)?{_NAME}(==?|!=)({_NAME})?")


def selector(text: str) -> str:
    """A `--take-over-from` selector checked at start: comma-separated `key=value`, `key==value`
    or `key!=value` (what a Pod watch's labelSelector takes, without set-based forms).
    Raises ValueError with the part that is wrong; an empty text is no selector."""
    parts = [p.strip() for p in text.split(",")] if text.strip() else []
    for part in parts:
        if not _REQUIREMENT.fullmatch(part) or len(part.split("/")[0]) > 253:
            raise ValueError(
                f"--take-over-from: {part!r} is not key=value (a label selector such as "
                f"{METALLB_SPEAKER_SELECTOR!r})"
            )
    return ",".join(parts)


class Standing(enum.Enum):
    STANDING_BY = "standingBy"
    LAYER2_ONLY = "layer2Only"
    EVERYTHING = "everything"

    @property
    def layer2(self) -> bool:
        return self is not Standing.STANDING_BY

    @property
    def bgp(self) -> bool:
        return self is Standing.EVERYTHING

    @property
    def writes(self) -> bool:
        """Whether this node writes its status objects, ConfigurationState and Events."""
        return self is not Standing.STANDING_BY


@dataclass(frozen=True, slots=True)
class Predecessor:
    """One Pod of the load balancer being replaced, as far as the rule reads it."""

    name: str
    deleting: bool  # metadata.deletionTimestamp set: its containers are being stopped
    ready: bool  # its Ready condition is True
    finished: bool  # phase Succeeded or Failed: no container runs

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> Predecessor:
        """From a Pod object; any part missing or malformed reads as absent (not Ready)."""
        meta = pod.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        status = pod.get("status")
        status = status if isinstance(status, Mapping) else {}
        conditions = status.get("conditions")
        ready = isinstance(conditions, list) and any(
            isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
            for c in conditions
        )
        return cls(
            name=str(meta.get("name", "")),
            deleting=bool(meta.get("deletionTimestamp")),
            ready=ready,
            finished=status.get("phase") in _FINISHED_PHASES,
        )


def standing(predecessors: Iterable[Predecessor]) -> Standing:
    """What this node does, given the predecessor's Pods bound to it."""
    running = [p for p in predecessors if not p.finished]
    if any(p.ready and not p.deleting for p in running):
        return Standing.STANDING_BY
    if any(p.deleting for p in running):
        return Standing.LAYER2_ONLY
    return Standing.EVERYTHING
