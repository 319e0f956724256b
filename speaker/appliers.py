"""The data planes behind the agent's two small interfaces (`speaker.planes`' `Layer2`, `BGP`).

Kept apart from the agent so that the agent can be driven in tests with fakes, and so that a
node that only does L2 never starts ExaBGP (sessions exist only for selected BGPPeers).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import yaml

from ironlb import model
from ironlb.problems import Problem
from ironlb_io import prometheus
from speaker import bgp_intent, desired
from speaker.bgp import exabgp, local_addresses, next_hops, routes, speaking
from speaker.bgp import metrics as bgp_metrics
from speaker.layer2 import announcing, interfaces
from speaker.layer2 import metrics as layer2_metrics
from speaker.layer2 import threaded as layer2_threaded

log = logging.getLogger(__name__)

# A pass waits at most this long for the sessions to take up its routes (normally a few ms).
HANDOVER_WAIT_S = 1.0


async def layer2(
    registry: prometheus.Registry,
    exclude: Iterable[str] = interfaces.DEFAULT_EXCLUDE,
    gratuitous_interval: float = 0.0,
) -> layer2_threaded.ThreadedLayer2:
    """`gratuitous_interval` > 0: announce every owned address again that often (seconds)."""
    announcer = layer2_threaded.ThreadedLayer2(
        announcing.Layer2Announcer(exclude=exclude, gratuitous_interval=gratuitous_interval)
    )
    registry.register(layer2_metrics.Collector(announcer.stats))
    await announcer.start()
    return announcer


class BGPApplier:
    """Peers and routes for `speaker.bgp.speaking.Speaker`, from this node's BGP plan."""

    def __init__(self, node_name: str, registry: prometheus.Registry) -> None:
        self.speaker = speaking.Speaker(exabgp.Options(node_name=node_name))
        registry.register(bgp_metrics.Collector(self.speaker))
        self._problems: tuple[str, ...] = ()
        # What the latest pass could not honour on this node (the agent reports it).
        self.problems: tuple[Problem, ...] = ()
        # `announce`'s plan, intent and routes, until `apply` takes them up.
        self._announced: tuple[desired.BGPPlan, bgp_intent.Intent, routes.Desired] | None = None

    def announce(
        self,
        config: model.Config,
        node: desired.Node | None,
        plan: desired.BGPPlan,
        passwords: Mapping[str, str],
        complete: bool = True,
    ) -> None:
        """This node's routes, handed to the sessions' runners now (each writes its first
        command at the next await of the loop); `apply` with the same plan then does the rest.
        Routes before sessions: a session that starts now starts with them (with graceful
        restart, its End-of-RIB must follow the routes, not an empty start)."""
        intent = bgp_intent.intent(config, node, plan, passwords, _addresses(config))
        wanted = routes.desired(intent.announcements, intent.sessions)
        self.speaker.set_routes(wanted.routes, complete=complete)
        self._announced = (plan, intent, wanted)

    async def handed_over(self, timeout: float) -> None:
        """Until the running sessions have taken up the announced routes, at most `timeout`."""
        await self.speaker.handed_over(timeout)

    async def apply(
        self,
        config: model.Config,
        node: desired.Node | None,
        plan: desired.BGPPlan,
        passwords: Mapping[str, str],
        complete: bool = True,
        handing_over: bool = False,
    ) -> Mapping[str, tuple[model.PeerName, ...]]:
        if self._announced is None or self._announced[0] is not plan:
            self.announce(config, node, plan, passwords, complete)
        assert self._announced is not None
        _, intent, wanted = self._announced
        self._announced = None
        problems = [
            *intent.problems,
            *await self.speaker.set_peers(intent.sessions, handing_over=handing_over),
        ]
        problems += wanted.problems
        # The agent's bookkeeping after this (logs, metrics, Events, status wishes: ~1 s at
        # 10,000 Services) would otherwise run before ExaBGP hears of the first route.
        await self.speaker.handed_over(HANDOVER_WAIT_S)
        self.problems = tuple(dict.fromkeys(problems))
        text = tuple(str(p) for p in self.problems)
        if text != self._problems:
            for line in text:
                log.warning("bgp problem", extra={"problem": line})
            self._problems = text
        return intent.reach

    async def wait_synced(self, timeout: float) -> bool:
        return await self.speaker.wait_synced(timeout)

    async def close(self, restarting: bool = False) -> None:
        await self.speaker.close(restarting=restarting)


def _addresses(config: model.Config) -> next_hops.Facts:
    """What `next_hops` needs, read only when some BGPPeer is dual-stack (a few system calls;
    every pass, so that a readdressed interface is seen within a tick)."""
    dual = [p for p in config.bgp_peers if p.dual_stack_address_family]
    if not dual:
        return bgp_intent.NO_FACTS
    # The kernel's choice of local address is asked for only where sourceAddress does not say.
    return local_addresses.read(
        p.peer_address for p in dual if p.peer_address is not None and p.source_address is None
    )


def layer2_excludes(path: str) -> tuple[str, ...]:
    """The interfaces left out of layer 2, from MetalLB's `excludel2.yaml` (its
    `metallb-excludel2` ConfigMap, mounted; an empty list excludes nothing, as in MetalLB).
    Without the file, MetalLB's chart default list. A file that cannot be read or parsed keeps
    the default list and says so: a bad ConfigMap must not stop the speaker."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        log.info("no layer 2 exclusion file; MetalLB's default list", extra={"path": path})
        return interfaces.DEFAULT_EXCLUDE
    except (OSError, yaml.YAMLError) as e:
        log.error(
            "layer 2 exclusion file unreadable; MetalLB's default list instead",
            extra={"path": path, "error": str(e)},
        )
        return interfaces.DEFAULT_EXCLUDE
    try:
        patterns = interfaces.parse_exclude_config(data)
    except ValueError as e:
        log.error(
            "layer 2 exclusion file invalid; MetalLB's default list instead",
            extra={"path": path, "error": str(e)},
        )
        return interfaces.DEFAULT_EXCLUDE
    log.info("layer 2 exclusions read", extra={"path": path, "patterns": list(patterns)})
    return patterns


def bgp(node_name: str, registry: prometheus.Registry) -> BGPApplier:
    return BGPApplier(node_name, registry)
