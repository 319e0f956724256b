"""Which speakers to ask, found through the API: pure.

`ironlb status` reads the speakers' /metrics and /explain. A user should not have to know their
addresses: the speakers are the Pods of the release namespace with the speaker's component label
(the same label on MetalLB's speakers), each serving on its container port named `monitoring`
(MetalLB's name too). They are asked through the apiserver's Pod proxy, so the command needs
nothing but the kubeconfig it already uses (and the right to `get pods/proxy`). `--speaker-metrics`
stays for overrides (a speaker outside the cluster, a lab).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_SELECTOR = "app.kubernetes.io/component=speaker"
PORT_NAME = "monitoring"


@dataclass(frozen=True, slots=True)
class Speaker:
    node: str
    namespace: str
    pod: str
    port: int

    def proxy_path(self, path: str, query: Mapping[str, str] | None = None) -> str:
        """The apiserver's path that reaches `path` on this speaker's port."""
        base = (
            f"/api/v1/namespaces/{self.namespace}/pods/{self.pod}:{self.port}/proxy"
            f"{path if path.startswith('/') else '/' + path}"
        )
        return f"{base}?{urllib.parse.urlencode(dict(query))}" if query else base

    @property
    def label(self) -> str:
        """How the output names where an answer came from."""
        return f"pod {self.namespace}/{self.pod} (apiserver proxy, port {self.port})"


def from_pods(pods: Iterable[Mapping[str, Any]]) -> tuple[list[Speaker], list[str]]:
    """The speakers to ask, one per node (a running Pod with a `monitoring` port; a Pod being
    replaced gives way to the running one), and why other Pods were left out."""
    chosen: dict[str, Speaker] = {}
    skipped: list[str] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
        node = spec.get("nodeName")
        if not name or not namespace or not isinstance(node, str) or not node:
            skipped.append(f"pod {namespace}/{name}: not scheduled on a node")
            continue
        if (pod.get("status") or {}).get("phase") != "Running" or meta.get("deletionTimestamp"):
            skipped.append(f"pod {namespace}/{name} on {node}: not running")
            continue
        port = _monitoring_port(spec)
        if port is None:
            skipped.append(f"pod {namespace}/{name} on {node}: no container port {PORT_NAME!r}")
            continue
        chosen.setdefault(node, Speaker(node, namespace, name, port))
    return sorted(chosen.values(), key=lambda s: s.node), skipped


def _monitoring_port(spec: Mapping[str, Any]) -> int | None:
    for container in spec.get("containers") or ():
        for port in (container or {}).get("ports") or ():
            number = (port or {}).get("containerPort")
            if port.get("name") == PORT_NAME and isinstance(number, int):
                return number
    return None
