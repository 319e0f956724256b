"""Probing this node's kube-proxy: the shell that feeds `ironlb.datapath.NodeReadiness`.

What a cloud load balancer asks of a node (KEP-3836), asked from the node itself:
* `GET /healthz` on kube-proxy (default `http://{node_ip}:10256/healthz`): 200 once it has synced
  its rules and while it keeps up; 503 before the first sync, when it falls behind, and (1.28+)
  while its Node is being deleted or tainted for deletion. Refused or timed out: not ready.
* for each `externalTrafficPolicy: Local` Service for which the EndpointSlices name a ready
  endpoint on this node, `GET /` on its `healthCheckNodePort`: 200 only once kube-proxy itself
  counts a local endpoint. A Service not probed yet counts as not ready: nothing is announced
  before kube-proxy has programmed it (metallb#496).

Bounded whatever the Service count: /healthz once per `interval`; the Services' ports at most
`rate` probes per second, never-probed ones first, then those kube-proxy does not confirm yet
(each round), then confirmed ones every `recheck` seconds. A node goes
not ready after `fail_after` consecutive failed /healthz probes (one slow answer on a busy node
does not move addresses) and ready again at the first healthy one.

`Check.ENDPOINTS` turns probing off (clusters without kube-proxy, as MetalLB); `Check.URL` probes
only the given health URL (a kube-proxy replacement's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from ironlb import datapath
from ironlb_io import prometheus

log = logging.getLogger(__name__)

DEFAULT_HEALTHZ_URL = "http://{node_ip}:10256/healthz"
INTERVAL_S = 0.5
TIMEOUT_S = 1.0
RATE_PER_S = 100.0
RECHECK_S = 5.0  # a confirmed Local Service is asked again at most this often...
# ...and confirmed ones are asked again at most this many a second in all, oldest first: a
# safety net (a change of endpoints is seen in the EndpointSlices and probed at once), so it
# must not cost an idle speaker with thousands of Local Services more than a little CPU.
RECHECK_PER_S = 1.0
FAIL_AFTER = 2
NOT_PROBED = "kube-proxy not probed yet"  # the first failure says why at once
CONCURRENCY = 8


@dataclass(frozen=True, slots=True)
class Answer:
    status: int | None  # None: no HTTP answer (refused, timed out, garbage)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200

    def describe(self) -> str:
        return f"HTTP {self.status}" if self.status is not None else self.error


async def get(url: str, timeout: float) -> Answer:
    """One HTTP/1.0 GET, the status line only: no client library, no connection kept."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 80
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {parts.netloc}\r\n\r\n".encode())
            line = await reader.readline()
    except TimeoutError:
        return Answer(None, f"no answer within {timeout:g} s")
    except OSError as e:
        return Answer(None, e.strerror or type(e).__name__)
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
    fields = line.split()
    if len(fields) < 2 or not fields[0].startswith(b"HTTP/") or not fields[1].isdigit():
        return Answer(None, "not an HTTP answer")
    return Answer(int(fields[1]))


def url_for(template: str, node_ip: str | None) -> str:
    host = node_ip or "127.0.0.1"
    return template.replace("{node_ip}", f"[{host}]" if ":" in host else host)


@dataclass
class _Target:
    port: int
    ok: bool | None = None  # None: not probed yet
    probed_at: float = float("-inf")


@dataclass
class Prober:
    check: datapath.Check = datapath.Check.KUBE_PROXY
    healthz_url: str = DEFAULT_HEALTHZ_URL
    interval: float = INTERVAL_S
    timeout: float = TIMEOUT_S
    rate: float = RATE_PER_S
    recheck: float = RECHECK_S
    recheck_rate: float = RECHECK_PER_S
    fail_after: int = FAIL_AFTER
    registry: prometheus.Registry | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    node_ip: str | None = None
    proxy_ready: bool = False
    message: str = NOT_PROBED
    _failures: int = 0
    _targets: dict[str, _Target] = field(default_factory=dict)
    _budget: float = 0.0
    _recheck_budget: float = 0.0

    def __post_init__(self) -> None:
        if self.check == datapath.Check.ENDPOINTS:
            self.proxy_ready, self.message = True, "not checked (endpoints only)"
        registry = self.registry or prometheus.Registry()
        self._ready_gauge = prometheus.Gauge(
            "ironlb_speaker_datapath_ready",
            "1 while this node's data path (kube-proxy) answers healthy",
            registry=registry,
        )
        self._probes = prometheus.Counter(
            "ironlb_speaker_datapath_probes",
            "Probes of kube-proxy sent by this speaker, by target and result",
            ["target", "result"],
            registry=registry,
        )
        self._ready_gauge.set(1 if self.proxy_ready else 0)

    # --- what the agent reads and sets -------------------------------------------------------

    def readiness(self) -> datapath.NodeReadiness:
        lagging = frozenset(k for k, t in self._targets.items() if not t.ok)
        return datapath.NodeReadiness(self.proxy_ready, lagging)

    def verdicts_known(self) -> bool:
        """Whether kube-proxy and every Local Service listed here were asked at least once.
        Before that, what this node would announce is not yet its answer: a speaker that
        restarted with graceful restart holds its End-of-RIB until then (speaker.bgp.speaking),
        or the peer would drop the stale routes of a node that is in fact ready."""
        return self.message != NOT_PROBED and all(t.ok is not None for t in self._targets.values())

    def set_targets(self, node_ip: str | None, local: Mapping[str, int]) -> None:
        """This node's address, and the Local Services with a ready endpoint here (Service key
        -> healthCheckNodePort); targets are kept (with their last answer) while listed."""
        self.node_ip = node_ip
        if self.check != datapath.Check.KUBE_PROXY:
            return
        before = self.readiness()
        for key in [k for k in self._targets if k not in local]:
            del self._targets[key]
        for key, port in local.items():
            target = self._targets.get(key)
            if target is None or target.port != port:
                self._targets[key] = _Target(port)
        if self.readiness() != before:
            self.changed.set()

    # --- probing -----------------------------------------------------------------------------

    async def run(self) -> None:
        if self.check == datapath.Check.ENDPOINTS:
            return
        while True:
            began = time.monotonic()
            await asyncio.gather(self._probe_proxy(), self._probe_services(began))
            await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - began)))

    async def _probe_proxy(self) -> None:
        url = url_for(self.healthz_url, self.node_ip)
        answer = await get(url, self.timeout)
        self._probes.labels("healthz", "ok" if answer.ok else "fail").inc()
        if answer.ok:
            self._failures = 0
            self._set_proxy(True, "kube-proxy answers healthy")
            return
        self._failures += 1
        if self._failures >= self.fail_after or self.message == NOT_PROBED:
            self._set_proxy(False, f"kube-proxy /healthz at {url}: {answer.describe()}")

    def _set_proxy(self, ready: bool, message: str) -> None:
        if ready == self.proxy_ready and self.message == NOT_PROBED:
            self.changed.set()  # the first verdict, although the same: see verdicts_known
        if ready != self.proxy_ready:
            log.warning(
                "data path ready" if ready else "data path not ready",
                extra={
                    "event": "dataPathReady" if ready else "dataPathNotReady",
                    "detail": message,
                },
            )
            self.proxy_ready = ready
            self._ready_gauge.set(1 if ready else 0)
            self.changed.set()
        self.message = message

    async def _probe_services(self, now: float) -> None:
        """Up to `rate` x `interval` Services' ports this round: never-probed first, then the
        lagging ones (every round), then, within `recheck_rate`, confirmed ones not asked for
        `recheck` seconds, the longest unasked first (an idle node with thousands of Local
        Services asks a couple a second, not `rate`)."""
        per_round = self.rate * self.interval
        self._budget = min(self._budget + per_round, per_round)
        recheck_round = max(1.0, self.recheck_rate * self.interval)
        self._recheck_budget = min(
            self._recheck_budget + self.recheck_rate * self.interval, recheck_round
        )
        lagging = sorted(
            ((key, target) for key, target in self._targets.items() if not target.ok),
            key=lambda kv: (kv[1].ok is not None, kv[1].probed_at),
        )
        stale = sorted(
            (
                (key, target)
                for key, target in self._targets.items()
                if target.ok and now - target.probed_at >= self.recheck
            ),
            key=lambda kv: kv[1].probed_at,
        )
        batch = lagging[: int(self._budget)]
        room = min(int(self._budget) - len(batch), int(self._recheck_budget))
        rechecked = stale[: max(0, room)]
        batch += rechecked
        self._budget -= len(batch)
        self._recheck_budget -= len(rechecked)
        if not batch:
            return
        gate = asyncio.Semaphore(CONCURRENCY)
        before = self.readiness()
        first_answers = any(t.ok is None for _, t in batch)

        async def probe(key: str, target: _Target) -> None:
            url = url_for(f"http://{{node_ip}}:{target.port}/", self.node_ip)
            async with gate:
                answer = await get(url, self.timeout)
            self._probes.labels("healthCheckNodePort", "ok" if answer.ok else "fail").inc()
            current = self._targets.get(key)
            if current is target:
                if answer.ok != target.ok:
                    log.info(
                        "kube-proxy confirms the local endpoint"
                        if answer.ok
                        else "kube-proxy does not confirm a local endpoint",
                        extra={"service": key, "url": url, "detail": answer.describe()},
                    )
                target.ok, target.probed_at = answer.ok, now

        await asyncio.gather(*(probe(k, t) for k, t in batch))
        if self.readiness() != before or first_answers:
            self.changed.set()  # a first answer may change nothing but verdicts_known
