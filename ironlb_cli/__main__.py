"""Entry point: `ironlb status` and `ironlb preflight` (console script `ironlb`, or
`python -m ironlb_cli`).

The shell only fetches: the API objects through the controller's client (same credentials rules:
`--kubeconfig`, `$KUBECONFIG`, in-cluster, `~/.kube/config`) and, when asked, the speakers'
/metrics, or with `--explain NAMESPACE/NAME` their /explain (the same URLs, `/metrics` ->
`/explain?service=...`) and the ConfigurationStates; everything shown is computed by
`ironlb_cli.status_view` and `ironlb_cli.explain_view`. It only ever reads.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ironlb import model, taking_over
from ironlb_cli import explain_view, preflight_view, render, speakers, status_view
from ironlb_io import kube

EVENT_SELECTOR = "involvedObject.kind=Service,type=Warning"
MAX_METRICS_BYTES = 8 * 1024 * 1024
MAX_EXPLAIN_BYTES = 1024 * 1024

_Answer = TypeVar("_Answer")


class FetchError(Exception):
    """The API could not be read; the message says what to do."""


def parse_targets(text: str) -> list[tuple[str | None, str]]:
    """`node1=http://10.0.0.1:7473/metrics,http://10.0.0.2:7473` -> [(node or None, url)]."""
    out: list[tuple[str | None, str]] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, sep, url = item.partition("=")
        if not sep or "://" in name:
            name, url = "", item
        if "://" not in url:
            url = f"http://{url}"
        if url.rstrip("/").count("/") == 2:  # no path: the speakers serve /metrics
            url = url.rstrip("/") + "/metrics"
        out.append((name or None, url))
    return out


def scrape(node: str | None, url: str, timeout: float) -> status_view.Scrape:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body: bytes = response.read(MAX_METRICS_BYTES)
    except (OSError, ValueError) as e:
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        return status_view.Scrape(url, node, error=str(reason))
    return status_view.Scrape(url, node, text=body.decode("utf-8", errors="replace"))


def ask(node: str | None, metrics_url: str, service: str, timeout: float) -> explain_view.Probe:
    """One speaker's /explain for `service`, found from its /metrics URL."""
    url = explain_view.explain_url(metrics_url, service)
    if url is None:
        error = "cannot tell the /explain URL: give the speaker's /metrics URL"
        return explain_view.Probe(metrics_url, node, error=error)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body: bytes = response.read(MAX_EXPLAIN_BYTES)
    except urllib.error.HTTPError as e:
        return explain_view.Probe(url, node, status=e.code, error=_http_error(e))
    except (OSError, ValueError) as e:
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        return explain_view.Probe(url, node, error=str(reason))
    return answer(url, node, body)


def _http_error(e: urllib.error.HTTPError) -> str:
    """`HTTP 404: unknown Service app/web`: the status and the speaker's JSON `error`, else
    the HTTP reason."""
    try:
        body = e.read(MAX_EXPLAIN_BYTES)
    except OSError:
        body = b""
    return _said(e.code, body, str(e.reason))


async def _items(client: kube.Client, path: str, params: dict[str, str] | None = None) -> list[Any]:
    found, _ = await client.list(path, params)
    return found


def _group_path(kind: str, namespace: str) -> str:
    plural, versions = model.RESOURCES[kind]
    return kube.group_path(model.GROUP, versions[-1], plural, namespace)


async def _stored_config(client: kube.Client, namespace: str) -> dict[str, list[Any]]:
    """Every metallb.io configuration object of `namespace`, by kind."""
    kinds = list(model.CONFIG_KINDS)
    lists = await asyncio.gather(*(_items(client, _group_path(k, namespace)) for k in kinds))
    return dict(zip(kinds, lists, strict=True))


async def fetch(
    credentials: kube.Credentials, namespace: str, lb_class: str, states: bool = False
) -> tuple[status_view.Inputs, list[Any] | None]:
    """The API objects `status` shows, and the ConfigurationStates when `states` (None: not
    readable)."""
    async with kube.Client(credentials, field_manager="ironlb-cli") as client:
        try:
            config = await _stored_config(client, namespace)
            services, nodes, l2, bgp = await asyncio.gather(
                _items(client, kube.core_path("services")),
                _items(client, kube.core_path("nodes")),
                _items(client, _group_path(model.SERVICE_L2_STATUS, namespace)),
                _items(client, _group_path(model.SERVICE_BGP_STATUS, namespace)),
            )
        except kube.ApiError as e:
            if e.not_found:
                raise FetchError(
                    f"{e}: are the metallb.io CRDs installed (kubectl get crd | grep metallb)?"
                ) from e
            raise FetchError(str(e)) from e
        try:
            events = await _items(
                client, kube.core_path("events"), {"fieldSelector": EVENT_SELECTOR}
            )
        except kube.ApiError:
            events = []  # no right to read Events: pending Services just say less
        configuration_states: list[Any] | None = []
        if states:
            try:
                configuration_states = await _items(
                    client, _group_path(model.CONFIGURATION_STATE, namespace)
                )
            except kube.ApiError:
                configuration_states = None  # an older CRD set, or no right: the view says so
    inputs = status_view.Inputs(
        config=config,
        services=services,
        nodes=nodes,
        l2_statuses=l2,
        bgp_statuses=bgp,
        events=events,
        lb_class=lb_class,
    )
    return inputs, configuration_states


def _credentials(args: argparse.Namespace) -> kube.Credentials:
    try:
        return kube.load(args.kubeconfig)
    except kube.ConfigError as e:
        raise FetchError(str(e)) from e


async def gather(args: argparse.Namespace) -> status_view.Inputs:
    credentials = _credentials(args)
    if args.speaker_metrics:
        targets = parse_targets(args.speaker_metrics)
        scraping = asyncio.gather(
            *(asyncio.to_thread(scrape, node, url, args.timeout) for node, url in targets)
        )
        fetched, scrapes = await asyncio.gather(
            fetch(credentials, args.namespace, args.lb_class), scraping
        )
        notes: list[str] = []
    else:
        fetched, (scrapes, notes) = await asyncio.gather(
            fetch(credentials, args.namespace, args.lb_class), scrape_found(credentials, args)
        )
    api: status_view.Inputs = fetched[0]
    return dataclasses.replace(api, scrapes=tuple(scrapes), speaker_notes=tuple(notes))


async def gather_explain(args: argparse.Namespace) -> explain_view.Inputs:
    credentials = _credentials(args)
    service: str = args.explain
    if args.speaker_metrics:
        targets = parse_targets(args.speaker_metrics)
        asking = asyncio.gather(
            *(asyncio.to_thread(ask, node, url, service, args.timeout) for node, url in targets)
        )
        (api, states), probes = await asyncio.gather(
            fetch(credentials, args.namespace, args.lb_class, states=True), asking
        )
        notes: list[str] = []
    else:
        (api, states), (probes, notes) = await asyncio.gather(
            fetch(credentials, args.namespace, args.lb_class, states=True),
            ask_found(credentials, args, service),
        )
    api = dataclasses.replace(api, speaker_notes=tuple(notes))
    return explain_view.Inputs(service, api, states, tuple(probes))


# --- the speakers found through the API, asked through the apiserver's Pod proxy ----------------


async def _found(
    client: kube.Client, args: argparse.Namespace
) -> tuple[list[speakers.Speaker], str | None]:
    """The speaker Pods to ask, or why they could not be listed."""
    path = kube.core_path("pods", args.namespace)
    try:
        pods, _ = await client.list(path, {"labelSelector": args.speaker_selector})
    except kube.ApiError as e:
        return [], f"cannot list the speaker Pods ({args.speaker_selector}): {e}"
    found, _skipped = speakers.from_pods(pods)
    if not found:
        return [], f"no running speaker Pod in {args.namespace} matches {args.speaker_selector}"
    return found, None


async def _each_speaker(
    credentials: kube.Credentials,
    args: argparse.Namespace,
    one: Callable[[kube.Client, speakers.Speaker], Awaitable[_Answer]],
) -> tuple[list[_Answer], list[str]]:
    """`one` for every speaker Pod, through one client; and why none could be asked."""
    async with kube.Client(credentials, field_manager="ironlb-cli") as client:
        found, error = await _found(client, args)
        if error is not None:
            return [], [error]
        return list(await asyncio.gather(*(one(client, s) for s in found))), []


async def scrape_found(
    credentials: kube.Credentials, args: argparse.Namespace
) -> tuple[list[status_view.Scrape], list[str]]:
    """Every speaker Pod's /metrics, and why none could be asked."""

    async def one(client: kube.Client, speaker: speakers.Speaker) -> status_view.Scrape:
        try:
            status, body = await asyncio.wait_for(
                client.get_raw(speaker.proxy_path("/metrics"), MAX_METRICS_BYTES), args.timeout
            )
        except (kube.ApiError, TimeoutError) as e:
            return status_view.Scrape(speaker.label, speaker.node, error=str(e) or "timeout")
        if status != 200:
            return status_view.Scrape(speaker.label, speaker.node, error=f"HTTP {status}")
        text = body.decode("utf-8", errors="replace")
        return status_view.Scrape(speaker.label, speaker.node, text=text)

    return await _each_speaker(credentials, args, one)


async def ask_found(
    credentials: kube.Credentials, args: argparse.Namespace, service: str
) -> tuple[list[explain_view.Probe], list[str]]:
    """Every speaker Pod's /explain for `service`, and why none could be asked."""

    async def one(client: kube.Client, speaker: speakers.Speaker) -> explain_view.Probe:
        path = speaker.proxy_path("/explain", {"service": service})
        try:
            status, body = await asyncio.wait_for(
                client.get_raw(path, MAX_EXPLAIN_BYTES), args.timeout
            )
        except (kube.ApiError, TimeoutError) as e:
            return explain_view.Probe(speaker.label, speaker.node, error=str(e) or "timeout")
        return proxied(speaker.label, speaker.node, status, body)

    return await _each_speaker(credentials, args, one)


def answer(url: str, node: str | None, body: bytes) -> explain_view.Probe:
    """A speaker's 200 answer to /explain, however it was asked."""
    try:
        document = json.loads(body)
    except ValueError:
        # A speaker older than /explain answers any path with its metrics.
        error = "the answer is not JSON: does this speaker serve /explain?"
        return explain_view.Probe(url, node, status=200, error=error)
    return explain_view.Probe(url, node, document=document, status=200)


def proxied(url: str, node: str | None, status: int, body: bytes) -> explain_view.Probe:
    """A speaker's answer to /explain through the apiserver's Pod proxy: any status."""
    if status != 200:
        return explain_view.Probe(url, node, status=status, error=_said(status, body, ""))
    return answer(url, node, body)


def _said(status: int, body: bytes, reason: str) -> str:
    """`HTTP 404: unknown Service app/web`: the status and the speaker's JSON `error`, else
    `reason`, else the body's start."""
    try:
        said = json.loads(body).get("error")
    except (ValueError, AttributeError):
        said = None
    if not (isinstance(said, str) and said):
        said = reason or body[:200].decode(errors="replace")
    return f"HTTP {status}: {said}"


def service_key(text: str) -> str:
    """argparse type of --explain: one `namespace/name`."""
    if not explain_view.valid_key(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE/NAME")
    return text


async def gather_preflight(args: argparse.Namespace) -> preflight_view.Inputs:
    """What `preflight` judges: the metallb.io CRDs, objects, Nodes, Secret names, and
    MetalLB's speaker and controller Pods in --namespace."""
    credentials = _credentials(args)
    async with kube.Client(credentials, field_manager="ironlb-cli") as client:
        pods = kube.core_path("pods", args.namespace)
        try:
            crds = await _items(client, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
            nodes, speakers_found, controllers = await asyncio.gather(
                _items(client, kube.core_path("nodes")),
                _items(client, pods, {"labelSelector": args.metallb_selector}),
                _items(client, pods, {"labelSelector": preflight_view.CONTROLLER_SELECTOR}),
            )
            config = await _stored_config(client, args.namespace)
        except kube.ApiError as e:
            raise FetchError(str(e)) from e
        try:
            secrets = await _items(client, kube.core_path("secrets", args.namespace))
            secret_names: frozenset[str] | None = frozenset(
                str((s.get("metadata") or {}).get("name", "")) for s in secrets
            )
        except kube.ApiError:
            secret_names = None  # no right to list them: password references go unjudged
    return preflight_view.Inputs(
        crds=[c for c in crds if str(c["metadata"]["name"]).endswith("." + model.GROUP)],
        config=config,
        nodes=nodes,
        metallb_speakers=speakers_found,
        metallb_controllers=controllers,
        selector=args.metallb_selector,
        ml_bind_port=args.ml_bind_port,
        secret_names=secret_names,
    )


def preflight(args: argparse.Namespace) -> int:
    try:
        inputs = asyncio.run(gather_preflight(args))
    except FetchError as e:
        print(f"ironlb: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    findings = preflight_view.check(inputs)
    if args.output == "json":
        json.dump(
            {
                "passed": preflight_view.passed(findings),
                "findings": [dataclasses.asdict(f) for f in findings],
            },
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render.preflight_text(findings))
    return 0 if preflight_view.passed(findings) else 1


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="ironlb", description="Look at ironlb's load balancing in a cluster (read only)."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser(
        "status",
        help="pools, Services, announcements, BGP sessions and membership",
        description="Pools with their usage, Services with their addresses and who announces "
        "them, BGP sessions and the membership view (these two read the speakers' /metrics).",
    )
    _api_flags(status, "namespace of the metallb.io objects")
    status.add_argument(
        "--speaker-metrics",
        default="",
        metavar="[NODE=]URL,...",
        help="speakers' Prometheus endpoints (e.g. 10.0.0.11:7473); the node is found from the "
        "URL's address among the Nodes' addresses unless given. Default: the speaker Pods, "
        "found through the API (--speaker-selector)",
    )
    status.add_argument(
        "--speaker-selector",
        default=speakers.DEFAULT_SELECTOR,
        help="without --speaker-metrics: the speaker Pods of --namespace (their `monitoring` "
        "port, asked through the apiserver's Pod proxy)",
    )
    status.add_argument("--lb-class", default="", help="the loadBalancerClass ironlb handles")
    status.add_argument("--timeout", type=float, default=5.0, help="seconds per metrics scrape")
    status.add_argument(
        "--explain",
        type=service_key,
        default=None,
        metavar="NAMESPACE/NAME",
        help="instead of the overview, why each node announces this Service or not: asks each "
        "speaker (its /explain), and reads the API",
    )
    check = sub.add_parser(
        "preflight",
        help="whether MetalLB can be taken over now (docs/migration.md); exit 1 if not",
        description="Before installing ironlb beside a running MetalLB: ironlb's CRDs, the "
        "stored objects against ironlb's checks, MetalLB's speaker Pods (the take-over "
        "selector, their memberlist port), graceful restart on the BGPPeers, MetalLB's "
        "controller. Exit status 0: nothing fails; 1: something does; 2: the API could not "
        "be read.",
    )
    _api_flags(check, "namespace of MetalLB and its metallb.io objects")
    check.add_argument(
        "--metallb-selector",
        type=_selector,
        default=taking_over.METALLB_SPEAKER_SELECTOR,
        help="MetalLB's speaker Pods: what ironlb's speaker.takeOverFrom will be",
    )
    check.add_argument(
        "--ml-bind-port",
        type=int,
        default=preflight_view.DEFAULT_MEMBERLIST_PORT,
        help="the membership port ironlb's speakers will bind (speaker.memberlist.mlBindPort)",
    )
    return parser.parse_args(argv)


def _api_flags(command: argparse.ArgumentParser, namespace_help: str) -> None:
    """Where every subcommand reads from, and how it prints."""
    command.add_argument("--kubeconfig", default=None, help="else $KUBECONFIG, in-cluster, ~/.kube")
    command.add_argument(
        "--namespace",
        default=os.environ.get("METALLB_NAMESPACE", "metallb-system"),
        help=f"{namespace_help} (env METALLB_NAMESPACE)",
    )
    command.add_argument("-o", "--output", choices=("text", "json"), default="text")


def _selector(text: str) -> str:
    try:
        return taking_over.selector(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "preflight":
        return preflight(args)
    if args.explain is not None:
        return explain(args)
    try:
        inputs = asyncio.run(gather(args))
    except FetchError as e:
        print(f"ironlb: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    view = status_view.build(inputs)
    if args.output == "json":
        json.dump(render.to_json(view), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render.text(view))
    return 0


def explain(args: argparse.Namespace) -> int:
    try:
        inputs = asyncio.run(gather_explain(args))
        view = explain_view.build(inputs)
    except (FetchError, explain_view.ServiceNotFound) as e:
        print(f"ironlb: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if args.output == "json":
        json.dump(render.explain_json(view), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render.explain_text(view))
    return 0


if __name__ == "__main__":
    sys.exit(main())
