"""Taking a node over from the load balancer that served it before (MetalLB), without a gap.

A speaker started with `--take-over-from SELECTOR` watches the Pods of its namespace that match
the selector and are bound to its node: the other load balancer's speaker there. While one of
them runs, this node's ironlb speaker stands by: its membership runs (so that it knows every
other member before it is needed), but it answers no ARP/NDP, opens no BGP session, and writes
no status object or ConfigurationState (that speaker writes them, with the same labels and
name), removing those it wrote itself. What the node does follows the Pod:

* `STANDING_BY`: a Ready Pod that is not being deleted. Its speaker answers for the node;
  a second speaker there would send a second set of gratuitous ARPs and collide with its BGP
  sessions (the router keeps one session per address pair).
* `LAYER2_ONLY`: a Pod not Ready yet and not being deleted: that speaker is starting (the way
  back). This node keeps answering in layer 2 (both speakers of a node answer an address with
  the same MAC), but closes its BGP sessions now: the router would refuse the new speaker's
  first connection while ours is up (a connection collision), and MetalLB's FRR then waits its
  connect timer, 120 s by default, before trying again (measured: docs/migration.md). Closed as
  for a restart, so a router with graceful restart keeps our routes, which name this node as
  next hop, until the new speaker's End-of-RIB.
* `SERVING`: no such Pod on this node, or every one there is being deleted (its containers
  are being stopped), or `--take-over-from` was not given. The node answers in layer 2 at
  once, and its BGP sessions start at once: the old speaker's FRR closes its sessions as it
  gets SIGTERM, about when the Pod is marked, while an ExaBGP takes about a second to connect.
  Should the old session still be up, the router refuses ours and ExaBGP connects again by
  itself. Waiting for the Pod to be gone instead measured 1.2 s more without a route in the
  lab; in a cluster it waits for the kubelet to report the containers stopped.

The rule is level-triggered on the Pods alone: going back (MetalLB installed again), the node
gives up BGP once MetalLB's speaker Pod there exists and stands down once it is Ready, before
ironlb is uninstalled.
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
    SERVING = "serving"

    @property
    def layer2(self) -> bool:
        return self is not Standing.STANDING_BY

    @property
    def bgp(self) -> bool:
        return self is Standing.SERVING

    @property
    def writes(self) -> bool:
        """Whether this node writes its status objects and ConfigurationState."""
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
    running = [p for p in predecessors if not p.finished and not p.deleting]
    if any(p.ready for p in running):
        return Standing.STANDING_BY
    return Standing.LAYER2_ONLY if running else Standing.SERVING
