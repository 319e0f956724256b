"""Chaos: 500 Services created while the controller is SIGKILLed and restarted 10 times.

Afterwards every Service has an address from the pool, and no address is held by two Services
that may not share it. Kills land at seeded-random moments, during start-up as well as in the
middle of bursts of writes; the only memory a new process has is what the apiserver holds.
"""

from __future__ import annotations

import json
import random
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from tests.integration import controller_support as support
from tests.integration.controller_support import Cluster, Controller

pytestmark = pytest.mark.integration

SERVICES = 500
KILLS = 10
SHARE = "metallb.io/allow-shared-ip"


@pytest.fixture
def k8s(kube_api: kubernetes.client.ApiClient) -> Iterator[Cluster]:
    yield from support.per_test_cluster(kube_api)


def spec_of(i: int) -> tuple[dict[str, str], list[tuple[str, int]]]:
    """Every fifth Service is half of a sharing pair (same key, different ports)."""
    if i % 5 == 0:
        return {SHARE: f"pair-{i // 10}"}, [("TCP", 80 + (i // 5) % 2)]
    return {}, [("TCP", 80)]


def addressed(svc: dict[str, Any]) -> bool:
    return bool(((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress"))


def test_services_created_through_ten_sigkills_all_get_distinct_addresses(
    kubeconfig: str, kube_api: kubernetes.client.ApiClient, k8s: Cluster, test_namespace: str
) -> None:
    first, second = support.block(), support.block()
    pool = k8s.pool(f"{test_namespace}-chaos", [support.v4_block(first), support.v4_block(second)])
    proc = Controller(kubeconfig, lease_name=f"ironlb-{test_namespace}", lease_duration=2)
    rng = random.Random(20261202)
    created = threading.Event()
    failures: list[BaseException] = []

    def create_all() -> None:
        try:
            for i in range(SERVICES):
                notes, ports = spec_of(i)
                k8s.service(test_namespace, f"svc-{i:03d}", annotations=notes, ports=ports)
        except BaseException as e:  # surfaced by the assertion below
            failures.append(e)
        finally:
            created.set()

    creator = threading.Thread(target=create_all, name="creator", daemon=True)
    try:
        creator.start()
        kills_during_creation = 0
        for _ in range(KILLS):
            proc.start()
            # Sometimes while it is still starting, sometimes after it has been busy for a while.
            created.wait(rng.uniform(0.3, 4.0))
            kills_during_creation += not created.is_set()
            proc.kill()
        # Not a speed check: 500 creations cannot finish before the first kill, so at least
        # one kill hit a controller with work in progress (else the test proves nothing).
        assert kills_during_creation >= 1
        creator.join(300)
        assert not failures, failures
        assert not creator.is_alive(), "creating the Services took more than 300 s"
        proc.start().wait_ready(timeout=60)

        names = [f"svc-{i:03d}" for i in range(SERVICES)]

        def all_addressed() -> dict[str, Any] | None:
            raw = k8s.core.list_namespaced_service(test_namespace, _preload_content=False)
            listed = {s["metadata"]["name"]: s for s in json.loads(raw.data)["items"]}
            done = [n for n in names if addressed(listed[n])]
            return listed if len(done) == SERVICES else None

        listed = support.wait_for("all 500 Services to have an address", all_addressed, timeout=240)
    finally:
        proc.stop()
        proc.discard_logs()
        creator.join(60)

    holders: dict[str, list[int]] = defaultdict(list)
    for i, name in enumerate(names):
        svc = listed[name]
        ingress = svc["status"]["loadBalancer"]["ingress"]
        assert len(ingress) == 1, (name, ingress)
        ip = ingress[0]["ip"]
        assert ip.startswith((support.v4(first, 0)[:-1], support.v4(second, 0)[:-1])), ip
        assert svc["metadata"]["annotations"][support.POOL_ANNOTATION] == pool
        holders[ip].append(i)
    for ip, users in holders.items():
        if len(users) == 1:
            continue
        keys = {spec_of(i)[0].get(SHARE) for i in users}
        ports = [port for i in users for port in spec_of(i)[1]]
        assert len(keys) == 1 and None not in keys, f"{ip} held by non-sharing {users}"
        assert len(ports) == len(set(ports)), f"{ip} shared with colliding ports by {users}"
