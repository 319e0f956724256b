"""The validating admission webhook for the metallb.io kinds.

MetalLB's webhooks rebuild the configuration as it would be after the request (the objects that
exist now, with the incoming one replacing its namesake) and run the same parse-and-validate as
every reconcile. We do the same with `ironlb.parsing` and `ironlb.validation`, and deny only when
the *incoming* object has a non-transient Problem: a syntax error, an overlap, a conflict. A
dangling reference is allowed, because objects are applied in any order, and comes back as an
admission warning so `kubectl apply` shows it; so does every field of the incoming object that
ironlb accepts but does not honour (`ironlb.honouring`, the list the controller and the speakers
report too). Two more rules are MetalLB's: metallb.io objects live in one namespace, and a
BFDProfile cannot be deleted while a BGPPeer uses it.

The decision (`decide`) is a pure function of the AdmissionRequest and the current objects; the
HTTP layer around it fails closed: anything unexpected (the API unreachable, a bug) denies the
request with a message saying so, as `failurePolicy: Fail` would, and never stops the server.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from controller import certs
from ironlb import honouring, model, parsing, validation
from ironlb_io import listening

log = logging.getLogger(__name__)

# kind -> the raw objects of that kind in the MetalLB namespace (`Secret` included).
Lister = Callable[[str], Awaitable[Sequence[Mapping[str, Any]]]]
CurrentObjects = Mapping[str, Sequence[Mapping[str, Any]]]

LISTED_KINDS = (*model.CONFIG_KINDS, model.SECRET)
LIST_TIMEOUT_SECONDS = 8.0  # below the apiserver's timeoutSeconds, so we answer first
DEFAULT_TIMEOUT_SECONDS = 10


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    message: str = ""
    warnings: tuple[str, ...] = ()
    code: int = 200


def _path(kind: str) -> str:
    """MetalLB's paths, e.g. /validate-metallb-io-v1beta1-ipaddresspool."""
    _, versions = model.RESOURCES[kind]
    return f"/validate-metallb-io-{versions[-1]}-{kind.lower()}"


PATHS: Mapping[str, str] = {kind: _path(kind) for kind in model.CONFIG_KINDS}
OPERATIONS: Mapping[str, tuple[str, ...]] = {
    kind: ("CREATE", "UPDATE", "DELETE") if kind == model.BFD_PROFILE else ("CREATE", "UPDATE")
    for kind in model.CONFIG_KINDS
}


# --- The decision (pure) ---------------------------------------------------------------------


def _name_of(obj: object) -> str:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""


def _namespace_of(obj: object) -> str:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return namespace if isinstance(namespace, str) else ""


def _deny(message: str, code: int = 403) -> Verdict:
    return Verdict(allowed=False, message=message, code=code)


def decide(request: Mapping[str, Any], current: CurrentObjects, namespace: str) -> Verdict:
    """The verdict on one AdmissionRequest, given the objects that exist now."""
    kind_info = request.get("kind")
    kind = kind_info.get("kind") if isinstance(kind_info, Mapping) else None
    operation = request.get("operation")
    if kind not in model.CONFIG_KINDS:
        # Not ours to judge (e.g. a status kind routed here by a too-wide rule).
        return Verdict(allowed=True)
    incoming = request.get("object")
    old = request.get("oldObject")
    name = request.get("name") or _name_of(incoming) or _name_of(old)
    if not isinstance(name, str):
        name = ""
    if operation == "DELETE":
        return _decide_delete(kind, name, current)
    if operation not in ("CREATE", "UPDATE"):
        return Verdict(allowed=True)
    if not isinstance(incoming, Mapping):
        return _deny(f"{kind}/{name}: the request carries no object", code=400)

    object_namespace = request.get("namespace") or _namespace_of(incoming)
    if object_namespace != namespace:
        return _deny(f"resource must be created in {namespace} namespace")

    if operation == "UPDATE" and _same_configuration(incoming, old):
        # Metadata-only writes (finalizers, annotations, kopf's bookkeeping) change nothing that
        # validation looks at, and must not be blocked by a conflict that predates them.
        return Verdict(allowed=True)

    objects: dict[str, list[Mapping[str, Any]]] = {
        k: [o for o in current.get(k, ()) if not (k == kind and _name_of(o) == name)]
        for k in LISTED_KINDS
    }
    objects[kind].append(incoming)
    config, parse_problems = parsing.parse_config(objects)
    mine = validation.about(parse_problems, kind, name)
    if not mine:  # the object parsed: what do the other objects say about it?
        mine = validation.about(validation.validate(config), kind, name)

    errors = [str(p) for p in mine if not p.transient]
    warnings = [str(p) for p in mine if p.transient]
    warnings += [str(p) for p in validation.about(honouring.not_honoured(config), kind, name)]
    if kind == model.BGP_PEER and _disable_mp(incoming):
        warnings.append(
            f"{kind}/{name}: spec.disableMP is deprecated; use spec.dualStackAddressFamily"
        )
    if errors:
        return Verdict(allowed=False, message="; ".join(errors), warnings=tuple(warnings), code=403)
    return Verdict(allowed=True, warnings=tuple(warnings))


def _same_configuration(new: Mapping[str, Any], old: object) -> bool:
    """Validation reads `spec` and the labels (pool selectors match them), nothing else."""
    if not isinstance(old, Mapping):
        return False

    def labels(o: Mapping[str, Any]) -> object:
        metadata = o.get("metadata")
        return metadata.get("labels") or {} if isinstance(metadata, Mapping) else None

    return bool(new.get("spec") == old.get("spec") and labels(new) == labels(old))


def _disable_mp(obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec")
    return isinstance(spec, Mapping) and spec.get("disableMP") is True


def _decide_delete(kind: str, name: str, current: CurrentObjects) -> Verdict:
    if kind != model.BFD_PROFILE:
        return Verdict(allowed=True)
    users = sorted(
        _name_of(peer)
        for peer in current.get(model.BGP_PEER, ())
        if isinstance(peer, Mapping)
        and isinstance(peer.get("spec"), Mapping)
        and peer["spec"].get("bfdProfile") == name
    )
    if users:
        return _deny(f"failed to delete BFDProfile {name}, used by BGPPeer {', '.join(users)}")
    return Verdict(allowed=True)


# --- AdmissionReview in and out ------------------------------------------------------------------


class BadReview(ValueError):
    """The body is not an admission.k8s.io/v1 AdmissionReview request."""


def request_of(review: object) -> Mapping[str, Any]:
    if not isinstance(review, Mapping):
        raise BadReview("body must be a JSON object")
    if review.get("kind") != "AdmissionReview":
        raise BadReview("kind must be AdmissionReview")
    if review.get("apiVersion") != "admission.k8s.io/v1":
        raise BadReview("apiVersion must be admission.k8s.io/v1")
    request = review.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str):
        raise BadReview("request.uid is required")
    return request


def response_of(uid: str, verdict: Verdict) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {
            "code": verdict.code,
            "message": verdict.message,
            "reason": "Forbidden" if verdict.code == 403 else "InternalError",
        }
    if verdict.warnings:
        response["warnings"] = list(verdict.warnings)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


async def current_objects(lister: Lister, kinds: Sequence[str] = LISTED_KINDS) -> CurrentObjects:
    listed = await asyncio.wait_for(
        asyncio.gather(*(lister(kind) for kind in kinds)), LIST_TIMEOUT_SECONDS
    )
    return dict(zip(kinds, listed, strict=True))


async def review(request: Mapping[str, Any], lister: Lister, namespace: str) -> Verdict:
    """List, then decide; any failure on the way denies (fail closed), with the reason."""
    try:
        return decide(request, await current_objects(lister), namespace)
    except Exception as e:  # fail closed on anything, and say why
        log.exception("webhook: internal error while reviewing %s", request.get("uid"))
        detail = str(e) or type(e).__name__
        return _deny(
            f"ironlb webhook could not validate the request (internal error: {detail}); "
            "denied to be safe, retry later",
            code=500,
        )


# --- HTTP ---

# Why a body was refused with 400 (the `reason` of the malformed-reviews counter): `json` it is
# not JSON (bad syntax, bad encoding, nested too deeply), `review` it is JSON but no
# admission.k8s.io/v1 AdmissionReview request, `too_large` it is over the size limit.
MALFORMED_REASONS = ("json", "review", "too_large")
Malformed = Callable[[str], None]
MALFORMED_LOG_PERIOD = 60.0


class _Throttled:
    """Logs the first malformed body, then at most one line per period with the count since:
    anyone who can reach the port can send garbage as fast as the log can be written."""

    def __init__(self, period: float = MALFORMED_LOG_PERIOD) -> None:
        self.period = period
        self.next_at = 0.0
        self.held = 0

    def __call__(self, reason: str, detail: str) -> None:
        now = time.monotonic()
        if now < self.next_at:
            self.held += 1
            return
        log.warning(
            "webhook: refused a body that is no AdmissionReview (%s: %s); %d more since the last "
            "such line",
            reason,
            detail,
            self.held,
        )
        self.next_at, self.held = now + self.period, 0


_log_malformed = _Throttled()


async def answer(
    body: bytes, lister: Lister, namespace: str, malformed: Malformed | None = None
) -> tuple[int, dict[str, Any]]:
    """HTTP status and JSON reply for one request body; 400 only when it is no AdmissionReview.

    `malformed(reason)` is called for each 400 (a counter), with a reason of MALFORMED_REASONS.
    """
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError too
        # json.loads recurses once per nesting level: `[[[[...` deeper than the interpreter's
        # recursion limit raises RecursionError, which must not escape as a 500.
        detail = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        return _refuse("json", detail, malformed)
    try:
        request = request_of(decoded)
    except BadReview as e:
        return _refuse("review", str(e), malformed)
    verdict = await review(request, lister, namespace)
    log.info(
        "webhook: %s %s %s/%s -> %s %s",
        request.get("operation"),
        request.get("resource"),
        request.get("namespace"),
        request.get("name"),
        "allowed" if verdict.allowed else "denied",
        verdict.message,
    )
    return 200, response_of(request["uid"], verdict)


def _refuse(reason: str, detail: str, malformed: Malformed | None) -> tuple[int, dict[str, Any]]:
    if malformed is not None:
        malformed(reason)
    _log_malformed(reason, detail[:200])
    return 400, {"error": f"not an AdmissionReview: {detail}"}


def make_app(lister: Lister, namespace: str, malformed: Malformed | None = None) -> web.Application:
    async def handle(http: web.Request) -> web.Response:
        try:
            body = await http.read()
        except web.HTTPRequestEntityTooLarge:
            if malformed is not None:
                malformed("too_large")
            raise
        status, reply = await answer(body, lister, namespace, malformed)
        return web.json_response(reply, status=status)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=4 * 1024 * 1024)
    app.router.add_post("/validate", handle)
    for path in PATHS.values():
        app.router.add_post(path, handle)
    app.router.add_get("/healthz", healthz)
    return app


class WebhookServer:
    """The webhook over HTTPS; `start()` returns once it listens (port 0 picks a free port)."""

    def __init__(
        self,
        lister: Lister,
        namespace: str,
        *,
        host: str | None = None,
        port: int = 9443,
        certificate: certs.ServingCertificate | None = None,
        hosts: Sequence[str] = ("localhost", "127.0.0.1"),
        malformed: Malformed | None = None,
    ) -> None:
        self.host, self.requested_port = host, port
        self.certificate = certificate or certs.generate(
            hosts, now=datetime.datetime.now(datetime.UTC)
        )
        self._app = make_app(lister, namespace, malformed)
        self._runner: web.AppRunner | None = None
        self._context = certs.server_context(self.certificate)
        self.port = 0

    def use(self, certificate: certs.ServingCertificate) -> None:
        """Serve a renewed certificate from the next handshake on, without a restart."""
        certs.use(self._context, certificate)
        self.certificate = certificate

    @property
    def ca_pem(self) -> bytes:
        return self.certificate.ca_pem

    def url(self, kind: str | None = None) -> str:
        host = "127.0.0.1" if self.host in (None, "0.0.0.0", "::") else str(self.host)
        if ":" in host:
            host = f"[{host}]"
        path = PATHS[kind] if kind else "/validate"
        return f"https://{host}:{self.port}{path}"

    async def start(self) -> None:
        runner = web.AppRunner(self._app, access_log=None, handle_signals=False)
        await runner.setup()
        sock = listening.listen(self.requested_port, self.host)
        site = web.SockSite(runner, sock, ssl_context=self._context)
        await site.start()
        self._runner = runner
        self.port = listening.port_of(sock)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


CERTIFICATE_POLL_S = 30.0


class CertificateFollower:
    """Serves the mounted Secret's certificate as it is renewed (cert-manager at 2/3 of its
    life, a GitOps sync minting a new one): read once at start, it would be refused by every
    API server call once the CA bundle moved on, denying every metallb.io write until a
    restart. A renewal caught half written (a file missing, a key not matching) keeps the
    certificate being served and is tried again on the next check."""

    def __init__(self, hook: WebhookServer, directory: str) -> None:
        self.hook, self.directory = hook, directory
        self._seen = certs.fingerprint(directory)
        self._failing = ""

    def check(self) -> bool:
        """Take up a changed certificate; True when a new one is served from now on."""
        now = certs.fingerprint(self.directory)
        if now == self._seen:
            return False
        try:
            self.hook.use(certs.load_dir(self.directory))
        except (OSError, ssl.SSLError, ValueError) as e:
            if str(e) != self._failing:  # once per kind of failure, not every check
                log.error(
                    "cannot load the renewed webhook certificate; serving the previous one",
                    extra={"directory": self.directory, "error": str(e)},
                )
                self._failing = str(e)
            return False
        self._seen, self._failing = now, ""
        log.info("webhook certificate reloaded", extra={"directory": self.directory})
        return True

    async def run(self, every_s: float = CERTIFICATE_POLL_S) -> None:
        while True:
            await asyncio.sleep(every_s)
            self.check()


# --- ValidatingWebhookConfiguration ---


def configuration(
    *,
    ca_bundle: bytes,
    url: str | None = None,
    service: tuple[str, str, int] | None = None,
    name: str = "metallb-webhook-configuration",
    failure_policy: str = "Fail",
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
    namespace_selector: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration for this webhook, one entry per kind.

    Give either `url` (the base, e.g. `https://127.0.0.1:9443`) or `service` as
    `(namespace, name, port)`; each kind gets MetalLB's path appended.
    """
    if (url is None) == (service is None):
        raise ValueError("give exactly one of url and service")
    webhooks = []
    for kind in model.CONFIG_KINDS:
        plural, versions = model.RESOURCES[kind]
        client_config: dict[str, Any] = {"caBundle": base64.b64encode(ca_bundle).decode()}
        if url is not None:
            client_config["url"] = url.rstrip("/") + PATHS[kind]
        else:
            assert service is not None
            svc_namespace, svc_name, port = service
            client_config["service"] = {
                "namespace": svc_namespace,
                "name": svc_name,
                "path": PATHS[kind],
                "port": port,
            }
        webhook: dict[str, Any] = {
            "name": f"{kind.lower()}validationwebhook.metallb.io",
            "admissionReviewVersions": ["v1"],
            "clientConfig": client_config,
            "rules": [
                {
                    "apiGroups": [model.GROUP],
                    "apiVersions": list(versions),
                    "operations": list(OPERATIONS[kind]),
                    "resources": [plural],
                    "scope": "Namespaced",
                }
            ],
            "failurePolicy": failure_policy,
            "sideEffects": "None",
            "timeoutSeconds": timeout_seconds,
            "matchPolicy": "Equivalent",
        }
        if namespace_selector is not None:
            webhook["namespaceSelector"] = dict(namespace_selector)
        webhooks.append(webhook)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": webhooks,
    }
