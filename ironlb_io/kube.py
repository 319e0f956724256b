"""The one door to the Kubernetes API: a thin asyncio client (over `ironlb_io.http`).

Every program uses it: the speaker and `ironlb status` for their lists and watches, the benches for
their load. In the controller kopf owns the watch streams; everything else it says to the apiserver
goes through here: the initial LISTs that rebuild state on start, status and annotation patches,
Events, pool status, the leader Lease and the webhook's lists. Keeping it in one place buys two
things. The bench and the tests can count every write the controller makes (`Client.writes`, also
exported as a metric), which is how "a restart of a settled cluster makes zero writes" is proved.
And the floor the bench compares against uses this same client with the same connection limit, so
the comparison measures the controller, not a different HTTP stack.

Credentials come from a kubeconfig (`--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`) or,
inside a Pod, from the ServiceAccount files; the same `Credentials` are handed to kopf so that both
talk to one server as one user.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import datetime
import json
import os
import socket
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from ironlb_io import http

# In-flight requests allowed at once. The bench's floor uses the same number (be honest).
CONCURRENCY = 8
REQUEST_TIMEOUT_S = 30.0
WATCH_QUIET_S = 300.0  # the longest a watch without `timeoutSeconds` may be silent
WATCH_READ_SLACK_S = 30.0  # beyond the server's own end of a watch, before we call it dead
LIST_CHUNK = 500
# A connection whose peer went away without a word (a control-plane node powered off, a NAT or
# conntrack entry gone) is found by the kernel's keepalive probes about a minute after it fell
# silent, as client-go's HTTP/2 pings find it (30 s idle, then 15 s), not by a watch's read
# timeout five minutes later: 30 s idle, then 3 probes 10 s apart. A quiet but healthy watch
# answers the probes, so it is never cut.
KEEPALIVE_IDLE_S = 30
KEEPALIVE_INTERVAL_S = 10
KEEPALIVE_PROBES = 3

JSON = "application/json"
# Items as PartialObjectMetadata (apiVersion meta.k8s.io/v1); plain JSON if a server cannot.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

Object = dict[str, Any]


class ConfigError(Exception):
    """No usable credentials; the message says what is missing."""


class ApiError(Exception):
    """A request the apiserver refused, or that never got an answer (status 0)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def retryable(self) -> bool:
        """Worth trying again later: no answer, throttled, or a server-side failure."""
        return self.status in (0, 429, 500, 502, 503, 504)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409


@dataclass(frozen=True, slots=True)
class Credentials:
    """Where the apiserver is and how to prove who we are; paths only, never key material."""

    server: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None
    token_file: str | None = None
    insecure: bool = False
    namespace: str | None = None  # the context's (or the Pod's) namespace, if any

    def bearer(self) -> str | None:
        if self.token_file:
            # Projected ServiceAccount tokens rotate; read the file on every use.
            return Path(self.token_file).read_text().strip()
        return self.token


def _materialise(data: str, directory: list[str], name: str) -> str:
    """Write base64 `*-data` from a kubeconfig to a private file (ssl wants paths)."""
    if not directory:
        directory.append(tempfile.mkdtemp(prefix="ironlb-creds-"))
    path = Path(directory[0]) / name
    path.write_bytes(base64.b64decode(data))
    path.chmod(0o600)
    return str(path)


def _path_or_data(
    section: Mapping[str, Any], key: str, base: Path, scratch: list[str]
) -> str | None:
    if section.get(f"{key}-data"):
        return _materialise(str(section[f"{key}-data"]), scratch, key)
    value = section.get(key)
    if not value:
        return None
    path = Path(str(value))
    return str(path if path.is_absolute() else base / path)


def from_kubeconfig(path: str | os.PathLike[str]) -> Credentials:
    """The current context of a kubeconfig file (client certificates or a token)."""
    file = Path(path)
    try:
        config = yaml.safe_load(file.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read kubeconfig {file}: {e}") from e
    by_name = {
        section: {item["name"]: item.get(section[:-1], {}) for item in config.get(section) or []}
        for section in ("contexts", "clusters", "users")
    }
    current = config.get("current-context")
    context = by_name["contexts"].get(current)
    if context is None:
        raise ConfigError(f"kubeconfig {file} has no current context")
    cluster = by_name["clusters"].get(context.get("cluster"))
    if not cluster or not cluster.get("server"):
        raise ConfigError(f"kubeconfig {file}: context {current!r} names no cluster with a server")
    user = by_name["users"].get(context.get("user"), {})
    base, scratch = file.parent, list[str]()
    token_file = user.get("tokenFile")
    return Credentials(
        server=str(cluster["server"]).rstrip("/"),
        ca_file=_path_or_data(cluster, "certificate-authority", base, scratch),
        cert_file=_path_or_data(user, "client-certificate", base, scratch),
        key_file=_path_or_data(user, "client-key", base, scratch),
        token=user.get("token"),
        token_file=str(base / token_file) if token_file else None,
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        namespace=context.get("namespace"),
    )


def in_cluster() -> Credentials:
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    if not host or not port or not (SERVICE_ACCOUNT_DIR / "token").exists():
        raise ConfigError("no kubeconfig given and not running inside a Pod")
    if ":" in host:
        host = f"[{host}]"
    namespace_file = SERVICE_ACCOUNT_DIR / "namespace"
    return Credentials(
        server=f"https://{host}:{port}",
        ca_file=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
        token_file=str(SERVICE_ACCOUNT_DIR / "token"),
        namespace=namespace_file.read_text().strip() if namespace_file.exists() else None,
    )


def load(kubeconfig: str | None) -> Credentials:
    """`--kubeconfig`, else `$KUBECONFIG` (its first file), else in-cluster, else ~/.kube/config."""
    if kubeconfig:
        return from_kubeconfig(kubeconfig)
    env = os.environ.get("KUBECONFIG")
    if env:
        return from_kubeconfig(env.split(os.pathsep)[0])
    try:
        return in_cluster()
    except ConfigError:
        default = Path.home() / ".kube" / "config"
        if default.exists():
            return from_kubeconfig(default)
        raise


def ssl_context(credentials: Credentials) -> ssl.SSLContext | None:
    if not credentials.server.startswith("https"):
        return None
    context = ssl.create_default_context(cafile=credentials.ca_file)
    if credentials.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if credentials.cert_file and credentials.key_file:
        context.load_cert_chain(credentials.cert_file, credentials.key_file)
    return context


# --- paths ---------------------------------------------------------------------------------------


def timestamp(when: datetime.datetime | None = None) -> str:
    """A metav1.Time as the apiserver writes it (RFC 3339, whole seconds; `when` in UTC); now
    by default."""
    when = when or datetime.datetime.now(datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def core_path(resource: str, namespace: str | None = None, name: str | None = None) -> str:
    parts = ["/api/v1"]
    if namespace is not None:
        parts.append(f"namespaces/{quote(namespace)}")
    parts.append(resource)
    if name is not None:
        parts.append(quote(name))
    return "/".join(parts)


def group_path(
    group: str,
    version: str,
    resource: str,
    namespace: str | None = None,
    name: str | None = None,
) -> str:
    parts = [f"/apis/{group}/{version}"]
    if namespace is not None:
        parts.append(f"namespaces/{quote(namespace)}")
    parts.append(resource)
    if name is not None:
        parts.append(quote(name))
    return "/".join(parts)


def resource_of(path: str) -> str:
    """`services/status` from `/api/v1/namespaces/x/services/y/status`: a metric label."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    if len(parts) >= 3:
        return f"{parts[0]}/{parts[2]}"
    return parts[0] if parts else "?"


# --- the client ----------------------------------------------------------------------------------

WriteHook = Callable[[str, str], None]


class Client:
    """Requests with a bounded number in flight; every write is counted by (verb, resource)."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        concurrency: int = CONCURRENCY,
        on_write: WriteHook | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
        field_manager: str = "ironlb-controller",
    ) -> None:
        self.credentials = credentials
        self.field_manager = field_manager
        self.concurrency = concurrency
        self.writes: collections.Counter[tuple[str, str]] = collections.Counter()
        self._on_write = on_write
        self._timeout_s = timeout_s
        self._pool: http.Pool | None = None

    def _open(self) -> http.Pool:
        if self._pool is None:
            self._pool = http.Pool(
                self.credentials.server,
                ssl_context(self.credentials),
                limit=self.concurrency,
                connect_timeout=REQUEST_TIMEOUT_S,
                socket_factory=kept_alive_socket,
            )
        return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    @property
    def total_writes(self) -> int:
        return sum(self.writes.values())

    def _headers(self, content_type: str | None, accept: str = JSON) -> dict[str, str]:
        headers = {"Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        token = self.credentials.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        accept: str = JSON,
    ) -> Any:
        pool = self._open()
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        if method in ("POST", "PUT", "PATCH"):
            params = {**(params or {}), "fieldManager": self.field_manager}
        if method != "GET":
            verb = {"POST": "create", "PUT": "update"}.get(method, method.lower())
            self.writes[(verb, resource_of(path))] += 1
            if self._on_write is not None:
                self._on_write(verb, resource_of(path))
        try:
            async with (
                asyncio.timeout(self._timeout_s),
                pool.request(
                    method,
                    path,
                    params=params,
                    body=data,
                    headers=self._headers(content_type if data is not None else None, accept),
                ) as response,
            ):
                raw = await response.read()
                if response.status >= 400:
                    raise _error(response.status, raw)
                return json.loads(raw) if raw else None
        except http.FAILURES as e:
            raise _unavailable(f"{method} {path}", e) from e

    async def get_raw(self, path: str, limit: int) -> tuple[int, bytes]:
        """GET what is no Kubernetes object (a Pod's own HTTP port through the apiserver's
        proxy): the answer's status and at most `limit` bytes of its body, whatever the status.
        ApiError (status 0) only when no answer came."""
        pool = self._open()
        try:
            async with (
                asyncio.timeout(self._timeout_s),
                pool.request("GET", path, headers=self._headers(None, "*/*")) as response,
            ):
                return response.status, await response.read_at_most(limit)
        except http.FAILURES as e:
            raise _unavailable(f"GET {path}", e) from e

    async def get(
        self, path: str, params: Mapping[str, str] | None = None, *, accept: str = JSON
    ) -> Object:
        result: Object = await self.request("GET", path, params=params, accept=accept)
        return result

    async def list(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        chunk: int = LIST_CHUNK,
        keep: Callable[[Object], Object] | None = None,
        metadata_only: bool = False,
    ) -> tuple[list[Object], str]:
        """Every item (following `continue`) and the list's resourceVersion; `keep`, if
        given, replaces each item as its page arrives (a slim copy). `metadata_only` asks for
        the items' metadata alone (PartialObjectMetadata): a Secret's data never travels when
        only its name is needed."""
        items: list[Object] = []
        query = dict(params or {})
        query["limit"] = str(chunk)
        accept = METADATA_LIST if metadata_only else JSON
        while True:
            page = await self.get(path, query, accept=accept)
            found = page.get("items") or []
            items.extend(found if keep is None else (keep(item) for item in found))
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion", ""))
            query["continue"] = token

    async def watch(
        self, path: str, params: Mapping[str, str] | None = None
    ) -> AsyncIterator[Object]:
        """The events of one watch request, as they arrive (until the server ends it)."""
        pool = self._open()
        query = {**(params or {}), "watch": "true"}
        # A watch is silent at most until the server ends it (`timeoutSeconds`; bookmarks come
        # about once a minute before that). A connection silent for longer is dead without
        # having said so (no RST: a control-plane node gone, a NAT entry expired): without a
        # read timeout the watch would wait on it for ever and its kind's view would freeze.
        quiet_s = float(query.get("timeoutSeconds", WATCH_QUIET_S)) + WATCH_READ_SLACK_S
        try:
            async with pool.request(
                "GET", path, params=query, headers=self._headers(None), read_timeout=quiet_s
            ) as response:
                if response.status >= 400:
                    raise _error(response.status, await response.read())
                async for line in response.lines():
                    if line.strip():
                        yield json.loads(line)
        except http.FAILURES as e:
            raise _unavailable(f"WATCH {path}", e) from e

    async def create(self, path: str, body: Object) -> Object:
        result: Object = await self.request("POST", path, body=body)
        return result

    async def replace(self, path: str, body: Object) -> Object:
        result: Object = await self.request("PUT", path, body=body)
        return result

    async def merge_patch(self, path: str, body: Object) -> Object:
        result: Object = await self.request(
            "PATCH", path, body=body, content_type="application/merge-patch+json"
        )
        return result

    async def delete(self, path: str) -> None:
        await self.request("DELETE", path)


CERTIFICATE_INVALID = "CertificateInvalid"


def kept_alive_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    """A TCP socket for one of getaddrinfo's answers, with keepalive probes on."""
    family, kind, proto = addr_info[0], addr_info[1], addr_info[2]
    sock = socket.socket(family=family, type=kind, proto=proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)
    except OSError:
        sock.close()
        raise
    return sock


def _unavailable(what: str, e: BaseException) -> ApiError:
    """No answer: the server is not there, or (reason `CertificateInvalid`) its certificate is
    not one we trust (wrong CA, expired, another name), which no retry alone will cure."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return ApiError(0, CERTIFICATE_INVALID, f"{what}: the server's certificate: {e}")
    return ApiError(0, "Unavailable", f"{what}: {e!r}")


def _error(status: int, raw: bytes) -> ApiError:
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        return ApiError(status, str(payload.get("reason", "")), str(payload.get("message", "")))
    return ApiError(status, "", raw[:300].decode(errors="replace"))
