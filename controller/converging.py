"""What to write for one Service: MetalLB's convergeBalancer over the state's state (pure).

The allocator (`controller.allocator`) answers "which addresses may this Service hold"; this
module walks MetalLB's convergence steps for one Service in MetalLB's order (not a LoadBalancer,
no pools, no cluster IPs, family checks, re-assert the current addresses, honour a changed request,
PreferDualStack top-up, allocate) and returns a `Decision`: what to do with the Service's status,
and the Events that say why. MetalLB keeps the same seam: `controller/service.go` apart from
`internal/state`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from controller import allocator, requests
from ironlb import addresses


class Status(enum.Enum):
    """What to do with status.loadBalancer and the ip-allocated-from-pool annotation."""

    SET = "set"  # ingress = Decision.ips, annotation = Decision.pool
    CLEAR = "clear"  # empty status.loadBalancer, remove the annotation
    KEEP = "keep"  # leave both as they are


@dataclass(frozen=True, slots=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Decision:
    status: Status
    ips: tuple[addresses.IPAddress, ...] = ()
    pool: str | None = None
    events: tuple[Event, ...] = ()
    # Set when the Service did not converge; it then waits for a later event (MetalLB's
    # SyncStateErrorNoRetry), typically a reprocess-all after another Service freed room.
    error: allocator.AllocError | None = None
    # Other Services may now fit (room freed, or this Service's sharing/backend key changed).
    reprocess_all: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


def converge(state: allocator.Allocator, service: allocator.ServiceRequest) -> Decision:
    """MetalLB's convergeBalancer plus SetBalancer's reprocess rule, for one Service."""
    before = state.allocation(service.key)
    key_before = state.allocation_key(service.key)
    decision = _Converging(state, service).run()
    reprocess = state.allocation_key(service.key) != key_before
    if (
        before is not None
        and state.allocation(service.key) is None
        and state.pool_for(before.ips) is not None
    ):
        reprocess = True
    return dataclasses.replace(decision, reprocess_all=reprocess)


def reprocess_order(services: Iterable[allocator.ServiceRequest]) -> list[allocator.ServiceRequest]:
    """The order of a reprocess-all pass: Services holding more addresses first, so that after a
    restart or a config change they re-claim their addresses before pending ones are allocated
    (MetalLB's service_controller_reload); then by key, for determinism."""
    return sorted(services, key=lambda s: (-len(s.current_ips), s.key))


def _family_changed(
    lb: requests.ServiceFamily, cluster: requests.ServiceFamily, policy: requests.FamilyPolicy
) -> bool:
    if lb is requests.ServiceFamily.UNKNOWN:
        return True
    if lb is cluster:
        return False
    # PreferDualStack may hold one family on a dual-stack Service.
    return not (
        cluster is requests.ServiceFamily.DUAL and policy is requests.FamilyPolicy.PREFER_DUAL_STACK
    )


def _same_ips(a: Sequence[addresses.IPAddress], b: Sequence[addresses.IPAddress]) -> bool:
    return len(a) == len(b) and set(a) == set(b)


class _Converging:
    """One pass of convergeBalancer; the steps are in MetalLB's order, which matters."""

    def __init__(self, state: allocator.Allocator, service: allocator.ServiceRequest) -> None:
        self.state = state
        self.service = service
        self.events: list[Event] = []
        self.cleared = False

    def event(self, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.events.append(Event(type_, reason, message))

    def clear(self) -> None:
        self.state.unassign(self.service.key)
        self.cleared = True

    def fail(self, error: allocator.AllocError) -> Decision:
        status = Status.CLEAR if self.cleared else Status.KEEP
        return Decision(status, events=tuple(self.events), error=error)

    def run(self) -> Decision:
        svc, state = self.service, self.state
        if not svc.load_balancer:
            self.clear()
            return Decision(Status.CLEAR)
        if not state.pools:
            self.clear()
            return self.fail(
                allocator.AllocError(allocator.Reason.NO_POOLS, "no address pools configured")
            )
        if svc.family is None:
            self.clear()
            return self.fail(
                allocator.AllocError(allocator.Reason.NO_CLUSTER_IPS, "service has no cluster IPs")
            )
        policy = svc.policy
        if policy is requests.FamilyPolicy.REQUIRE_DUAL_STACK and svc.family in (
            requests.ServiceFamily.IPV4,
            requests.ServiceFamily.IPV6,
        ):
            message = "Service requires dual stack but not enough clusterips"
            self.event("Warning", "not enough clusterips", message)
            self.clear()
            return self.fail(allocator.AllocError(allocator.Reason.NOT_ENOUGH_CLUSTER_IPS, message))

        current = self.current_of_right_family(svc.family)
        if isinstance(current, Decision):
            return current
        if current:
            current = self.reassert_current(current)
            if isinstance(current, Decision):
                return current

        if not current:
            result = self.allocate()
            if isinstance(result, allocator.AllocError):
                self.event(
                    "Warning",
                    "AllocationFailed",
                    f'Failed to allocate IP for "{svc.key}": {result.message}',
                )
                return self.fail(result)
            current = list(result.ips)
            self.event("Normal", "IPAllocated", f"Assigned IP {requests.go_quoted(current)}")

        current = self.top_up_dual_stack(current)
        held = state.allocation(svc.key)
        assert held is not None, "converged without an allocation"
        return Decision(Status.SET, tuple(current), held.pool, tuple(self.events))

    def current_of_right_family(
        self, cluster_family: requests.ServiceFamily
    ) -> list[addresses.IPAddress] | Decision:
        """The Service's current addresses, or none (cleared) when their family no longer fits."""
        svc = self.service
        current = list(svc.current_ips)
        if not current:
            self.clear()
            return current
        lb_family, why = requests.family_of(current)
        if why is not None:
            self.event(
                "Warning",
                "nolbIPsIPFamily",
                f"Failed to retrieve LBIPs IPFamily for {requests.go_quoted(current)}: {why}",
            )
        if cluster_family is requests.ServiceFamily.UNKNOWN:
            message = "Failed to retrieve ClusterIPs IPFamily"
            self.event("Warning", "noclusterIPsIPFamily", message)
            return self.fail(allocator.AllocError(allocator.Reason.UNKNOWN_CLUSTER_FAMILY, message))
        if _family_changed(lb_family, cluster_family, svc.policy):
            self.clear()
            return []
        return current

    def reassert_current(
        self, current: list[addresses.IPAddress]
    ) -> list[addresses.IPAddress] | Decision:
        """Re-claim the current addresses; none (cleared) when the config or a changed request
        no longer allows them."""
        svc, state = self.service, self.state
        # The step order below is MetalLB's: once the current IPs survived the family check,
        # an invalid explicit request is reported even if those IPs were just cleared.
        result = state.assign(svc, current)
        if isinstance(result, allocator.AllocError):
            self.event(
                "Normal",
                "ClearAssignment",
                f'current IP for "{svc.key}" not allowed by config, will attempt for '
                f"new IP assignment: {result.message}",
            )
            self.clear()
            current = []
        held = state.allocation(svc.key)
        if current and svc.requested_pool and held and held.pool != svc.requested_pool:
            self.clear()
            current = []
        if svc.requested.error is not None:
            self.event(
                "Warning",
                "LoadBalancerFailed",
                f"invalid requested loadbalancer IPs: {svc.requested.error}",
            )
            return self.fail(
                allocator.AllocError(allocator.Reason.INVALID_REQUEST, svc.requested.error)
            )
        if current and svc.requested.ips and not _same_ips(current, svc.requested.ips):
            self.clear()
            current = []
        return current

    def top_up_dual_stack(self, current: list[addresses.IPAddress]) -> list[addresses.IPAddress]:
        """PreferDualStack's second family, when the Service holds one address."""
        svc = self.service
        # After the allocation: a Service that already held one address skips it and is topped
        # up here, as MetalLB does before it; a new one that got one family is topped up at once,
        # where MetalLB does it on the next pass (its own status write brings the Service
        # back), so it sees AdditionalAssignFailed (or its second address) either way.
        if (
            len(current) == 1
            and svc.policy is requests.FamilyPolicy.PREFER_DUAL_STACK
            and svc.family is requests.ServiceFamily.DUAL
            and not svc.requested.ips  # an explicit request is exactly what the user wants
        ):
            result = self.state.allocate_additional_family(svc)
            if isinstance(result, allocator.AllocError):
                self.event(
                    "Normal",
                    "AdditionalAssignFailed",
                    f"cannot assign additional IP in PreferDualStack: {result.message}",
                )
            else:
                current = list(result.ips)
                self.event("Normal", "IPAllocated", f'Assigned additional IP "{current[-1]}"')
        return current

    def allocate(self) -> allocator.Result:
        """MetalLB's allocateIPs: explicit IPs, else the requested pool, else automatic."""
        svc, state = self.service, self.state
        if svc.family is requests.ServiceFamily.UNKNOWN:
            return allocator.AllocError(
                allocator.Reason.UNKNOWN_CLUSTER_FAMILY,
                "cannot tell the IP family of the cluster IPs",
            )
        if svc.requested.error is not None:
            return allocator.AllocError(allocator.Reason.INVALID_REQUEST, svc.requested.error)
        if svc.requested.ips:
            wanted = svc.requested.ips
            if svc.requested.family is not svc.family:
                return allocator.AllocError(
                    allocator.Reason.FAMILY_MISMATCH,
                    f"requested loadBalancer IP(s) {requests.go_quoted(wanted)} does not match "
                    "the ipFamily of the service",
                )
            result = state.assign(svc, wanted)
            if isinstance(result, allocator.Allocation) and svc.requested_pool not in (
                None,
                result.pool,
            ):
                state.unassign(svc.key)
                return allocator.AllocError(
                    allocator.Reason.WRONG_POOL,
                    f"requested loadBalancer IP(s) {requests.go_quoted(wanted)} is not compatible "
                    f"with requested address pool {svc.requested_pool}",
                )
            return result
        if svc.requested_pool:
            return state.allocate_from_pool(svc, svc.requested_pool)
        return state.allocate(svc)
