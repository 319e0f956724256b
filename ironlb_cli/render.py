"""`ironlb status`, the output: a `status_view.View` as text for people or JSON for scripts.

Kept apart from the view so that what the command knows (`status_view`, a model built from API
objects and metrics) and how it says it (tables, bars, the `-o json` document) can change
separately; both are pure and tested from tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ironlb_cli import explain_view, preflight_view, status_view

BAR_WIDTH = 20


# --- JSON -----------------------------------------------------------------------------------------


def to_json(view: status_view.View) -> dict[str, Any]:
    """The `-o json` document; its shape is `ironlb_cli.schema.STATUS` (checked in tests)."""
    return {
        "schemaVersion": status_view.SCHEMA_VERSION,
        "pools": [
            {
                "name": p.name,
                "addresses": list(p.addresses),
                "autoAssign": p.auto_assign,
                "families": [
                    {
                        "family": f.family,
                        "assigned": f.assigned,
                        "available": f.available,
                        "total": f.total,
                        "usage": None if f.fraction is None else round(f.fraction, 6),
                    }
                    for f in p.families
                ],
                "l2Advertisements": list(p.l2_advertisements),
                "bgpAdvertisements": list(p.bgp_advertisements),
                "services": p.services,
            }
            for p in view.pools
        ],
        "services": [
            {
                "namespace": s.namespace,
                "name": s.name,
                "addresses": list(s.addresses),
                "pool": s.pool,
                "externalTrafficPolicy": s.traffic_policy,
                "state": s.state,
                "modes": list(s.modes),
                "announcements": [
                    {
                        "protocol": a.protocol,
                        "node": a.node,
                        "peers": list(a.peers),
                        "interfaces": list(a.interfaces),
                    }
                    for a in s.announcements
                ],
                "reason": s.reason,
            }
            for s in view.services
        ],
        "sessions": [
            {
                "peer": s.peer,
                "address": s.address,
                "myASN": s.my_asn,
                "peerASN": s.peer_asn,
                "node": s.node,
                "bgp": s.bgp,
                "bfd": s.bfd,
                "prefixes": s.prefixes,
            }
            for s in view.sessions
        ],
        "nodes": [
            {
                "name": n.name,
                "ready": n.ready,
                "speaker": n.speaker,
                "error": n.error,
                "members": None if n.members is None else dict(n.members),
                "announced": n.announced,
                "configStale": n.config_stale,
            }
            for n in view.nodes
        ],
        "problems": list(view.problems),
        "scrapes": [
            {"url": s.url, "node": s.node, "ok": s.error is None, "error": s.error}
            for s in view.scrapes
        ],
    }


# --- text -----------------------------------------------------------------------------------------


def bar(fraction: float | None, width: int = BAR_WIDTH) -> str:
    """`[#####---------------]`; any use at all shows at least one mark, full only when full."""
    if fraction is None:
        return "[" + "?" * width + "]"
    marks = round(fraction * width)
    if fraction > 0:
        marks = max(marks, 1)
    if fraction < 1:
        marks = min(marks, width - 1)
    return "[" + "#" * marks + "-" * (width - marks) + "]"


def count(value: int | None) -> str:
    """Pool sizes run to 2^63 (an IPv6 /64); big ones are shown as powers of ten."""
    if value is None:
        return "?"
    return str(value) if value < 1_000_000 else f"{value:.1e}".replace("e+", "e")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = []
    for row in (header, *rows):
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=True)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _pools_text(view: status_view.View) -> list[str]:
    lines = ["POOLS"]
    if not view.pools:
        lines.append("  (none: create an IPAddressPool in the MetalLB namespace)")
    rows = []
    for p in view.pools:
        ads = [f"L2:{a}" for a in p.l2_advertisements] + [f"BGP:{a}" for a in p.bgp_advertisements]
        first = True
        for f in p.families or (status_view.FamilyUsage("-", None, None),):
            pct = "" if f.fraction is None else f" {f.fraction * 100:.0f}%"
            rows.append(
                [
                    p.name if first else "",
                    f.family,
                    bar(f.fraction),
                    f"{count(f.assigned)}/{count(f.total)}{pct}",
                    (", ".join(ads) or "not advertised") if first else "",
                    (", ".join(p.addresses) + ("" if p.auto_assign else " (no auto-assign)"))
                    if first
                    else "",
                ]
            )
            first = False
    if rows:
        lines += _table(["NAME", "FAMILY", "USAGE", "USED", "ADVERTISED BY", "ADDRESSES"], rows)
    return lines


def _services_text(view: status_view.View) -> list[str]:
    lines = ["SERVICES"]
    if not view.services:
        lines.append("  (no Service of type LoadBalancer)")
    rows = []
    # A status object outlives a speaker that died: say so next to what it claims.
    unreachable = {n.name for n in view.nodes if n.speaker == "error"}
    for s in view.services:
        where = []
        for a in s.announcements:
            if a.protocol == "bgp":
                text = f"{a.node} -> {','.join(a.peers)}"
            else:
                text = a.node + (f" ({','.join(a.interfaces)})" if a.interfaces else "")
            where.append(text + (" (speaker unreachable)" if a.node in unreachable else ""))
        rows.append(
            [
                f"{s.namespace}/{s.name}",
                ", ".join(s.addresses) or "<pending>",
                s.pool or "-",
                s.traffic_policy,
                "+".join(s.modes) or "-",
                "; ".join(where) or "-",
            ]
        )
    if rows:
        lines += _table(["SERVICE", "ADDRESSES", "POOL", "POLICY", "MODE", "ANNOUNCED BY"], rows)
    return lines


def _sessions_text(view: status_view.View) -> list[str]:
    lines = ["BGP SESSIONS"]
    if not view.sessions:
        lines.append("  (no BGPPeer)")
    rows = [
        [
            s.peer,
            s.address,
            f"{s.my_asn}->{'dynamic' if s.peer_asn is None else s.peer_asn}",
            s.node,
            s.bgp,
            s.bfd or "-",
            "-" if s.prefixes is None else str(s.prefixes),
        ]
        for s in view.sessions
    ]
    if rows:
        lines += _table(["PEER", "ADDRESS", "ASN", "NODE", "BGP", "BFD", "PREFIXES"], rows)
    return lines


def _nodes_text(view: status_view.View) -> list[str]:
    lines = ["NODES AND MEMBERSHIP"]
    rows = []
    for n in view.nodes:
        if n.members is not None:
            seen = ", ".join(
                f"{n.members[k]} {k}" for k in status_view.MEMBER_STATES if n.members.get(k)
            )
            sees = seen or "nobody"
        elif n.speaker == "scraped":
            sees = "membership off"
        else:
            sees = status_view.UNKNOWN
        speaker = {
            "scraped": "up",
            "error": f"error: {n.error}",
            "not-scraped": status_view.UNKNOWN,
        }[n.speaker]
        rows.append(
            [
                n.name,
                n.ready,
                speaker,
                sees,
                "-" if n.announced is None else str(n.announced),
                {None: "-", True: "STALE", False: "ok"}[n.config_stale],
            ]
        )
    if rows:
        lines += _table(
            ["NODE", "READY", "SPEAKER", "MEMBERSHIP SEES", "ANNOUNCING", "CONFIG"], rows
        )
    else:
        lines.append("  (no Node)")
    if not view.scrapes:
        lines.append("  (sessions and membership: pass --speaker-metrics URL,... to read speakers)")
    return lines


def text(view: status_view.View) -> str:
    lines = _pools_text(view)
    lines.append("")
    lines += _services_text(view)
    lines.append("")
    lines += _sessions_text(view)
    lines.append("")
    lines += _nodes_text(view)

    pending = [s for s in view.services if s.state != "announced"]
    if pending:
        lines.append("")
        lines.append("WHY NOT ANNOUNCED")
        for s in pending:
            lines.append(f"  {s.namespace}/{s.name} ({s.state}): {s.reason}")
    if view.problems:
        lines.append("")
        lines.append("PROBLEMS")
        lines += [f"  {p}" for p in view.problems]
    return "\n".join(lines) + "\n"


# --- --explain ------------------------------------------------------------------------------------


def explain_json(view: explain_view.ExplainView) -> dict[str, Any]:
    """`status --explain -o json`; its shape is `ironlb_cli.schema.EXPLAIN` (checked in tests)."""
    s = view.service
    return {
        "schemaVersion": explain_view.SCHEMA_VERSION,
        "service": {
            "namespace": s.namespace,
            "name": s.name,
            "addresses": list(s.addresses),
            "pool": s.pool,
            "externalTrafficPolicy": s.traffic_policy,
            "state": s.state,
            "reason": s.reason,
        },
        "nodes": [
            {
                "name": n.name,
                "isNode": n.is_node,
                "speaker": n.speaker,
                "url": n.url,
                "error": n.error,
                "source": n.source,
                "verdicts": [
                    {
                        "protocol": v.protocol,
                        "announcing": v.announcing,
                        "reason": v.reason,
                        "message": v.message,
                        "ips": list(v.ips),
                        "source": v.source,
                    }
                    for v in n.verdicts
                ],
                "datapath": {
                    "ready": n.datapath.ready,
                    "reason": n.datapath.reason,
                    "message": n.datapath.message,
                    "source": n.datapath.source,
                },
                "conflicts": [
                    {
                        "ip": c.ip,
                        "mac": c.mac,
                        "interface": c.interface,
                        "lastSeenSecondsAgo": c.last_seen_s_ago,
                    }
                    for c in n.conflicts
                ],
            }
            for n in view.nodes
        ],
        "problems": list(view.problems),
    }


def _why(reason: str | None, message: str) -> str:
    if reason and message:
        return f"{reason} ({message})"
    return reason or message


def verdict_cell(
    node: explain_view.NodeExplain, protocol: str, service_ips: Sequence[str] = ()
) -> str:
    """What one node does for one protocol, in a few words."""
    found = next((v for v in node.verdicts if v.protocol == protocol), None)
    if found is None:
        # The speaker listed the protocols that apply; the API only says who announces.
        return "-" if node.speaker == "answered" else f"unknown ({node.unknown_because})"
    if found.announcing is None:
        words = "unknown" + (f" ({found.message})" if found.message else "")
    elif found.announcing:
        words = "announcing" + (f" ({found.message})" if found.message else "")
    else:
        words = "not announcing: " + (_why(found.reason, found.message) or "no reason given")
    if found.ips and set(found.ips) != set(service_ips):
        words += f" [{', '.join(found.ips)}]"
    if found.source != "speaker":
        words += f" [{found.source}]"
    return words


def datapath_cell(node: explain_view.NodeExplain) -> str:
    path = node.datapath
    if path.ready is None:
        if path.source == "none":
            words = f"unknown ({node.unknown_because})"
        else:
            words = "unknown" + (f": {_why(path.reason, path.message)}" if path.reason else "")
    elif path.ready:
        words = "ready"
    else:
        words = "not ready: " + (_why(path.reason, path.message) or "no reason given")
    if path.source == "ConfigurationState":
        words += " [ConfigurationState]"
    return words


def explain_text(view: explain_view.ExplainView) -> str:
    s = view.service
    lines = [f"SERVICE {s.namespace}/{s.name}"]
    lines += _table(
        ["ADDRESSES", "POOL", "POLICY", "STATE"],
        [[", ".join(s.addresses) or "<pending>", s.pool or "-", s.traffic_policy, s.state]],
    )
    if s.reason:
        lines.append(f"  why: {s.reason}")

    lines.append("")
    lines.append("NODES")
    protocols = view.protocols
    conflicted = any(n.conflicts for n in view.nodes)
    rows = []
    for n in view.nodes:
        cells = [n.name + ("" if n.is_node else " (no such Node)")]
        if protocols:
            cells += [verdict_cell(n, p, s.addresses) for p in protocols]
        else:
            cells.append("-" if n.speaker == "answered" else f"unknown ({n.unknown_because})")
        cells.append(datapath_cell(n))
        cells.append(
            {"speaker": "speaker", "api": f"API ({n.unknown_because})"}.get(
                n.source, f"nothing ({n.unknown_because})"
            )
        )
        if conflicted:
            cells.append(f"CONFLICT x{len(n.conflicts)}" if n.conflicts else "-")
        rows.append(cells)
    header = ["NODE", *(p.upper() for p in protocols or ("ANNOUNCING",)), "DATA PATH", "FROM"]
    if rows:
        lines += _table(header + (["CONFLICTS"] if conflicted else []), rows)
    else:
        lines.append("  (no Node)")

    if conflicted:
        lines.append("")
        lines.append("CONFLICTS (another host answers for an address this node announces)")
        for n in view.nodes:
            for c in n.conflicts:
                seen = c.last_seen_s_ago
                ago = "" if seen is None else f", last seen {seen:g} s ago"
                lines.append(
                    f"  CONFLICT {n.name}: {c.ip or '?'} answered by {c.mac or '?'} "
                    f"on {c.interface or '?'}{ago}"
                )
    failed = [n for n in view.nodes if n.error]
    if failed:
        lines.append("")
        lines.append("SPEAKERS WITHOUT A VERDICT")
        lines += [f"  {n.name}: {n.error} ({n.url})" for n in failed]
    if not any(n.url for n in view.nodes):
        lines.append("")
        lines.append("  (pass --speaker-metrics NODE=URL,... to ask the speakers themselves)")
    if view.problems:
        lines.append("")
        lines.append("PROBLEMS")
        lines += [f"  {p}" for p in view.problems]
    return "\n".join(lines) + "\n"


def preflight_text(findings: Sequence[preflight_view.Finding]) -> str:
    """One line per finding, failures first; the verdict last."""
    order = {preflight_view.Level.FAIL: 0, preflight_view.Level.WARN: 1, preflight_view.Level.OK: 2}
    lines = [
        f"{f.level.value.upper():<5} {f.check:<17} {f.message}"
        for f in sorted(findings, key=lambda f: order[f.level])
    ]
    verdict = (
        "ready: install ironlb beside MetalLB (docs/migration.md)"
        if preflight_view.passed(findings)
        else "not ready: fix what FAILs first"
    )
    return "\n".join([*lines, verdict]) + "\n"
