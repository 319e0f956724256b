"""python -m speaker's flag handling: seeds, arguments, what is refused at once."""

from __future__ import annotations

import socket

import pytest

from speaker import __main__ as speaker_main
from speaker import seeds
from speaker.membership import messages


def test_seeds_are_deduplicated_and_keep_their_ports() -> None:
    parsed = seeds.parse("10.0.0.1, 10.0.0.1:7946 ,10.0.0.2:8000,,[fd00::1]:9", 7946)
    assert seeds.resolve(parsed).addresses == (
        messages.Address("10.0.0.1", 7946),
        messages.Address("10.0.0.2", 8000),
        messages.Address("fd00::1", 9),
    )


def test_a_name_resolves_to_its_addresses() -> None:
    resolution = seeds.resolve(seeds.parse("localhost:7000", 7946))
    assert messages.Address("127.0.0.1", 7000) in resolution.addresses
    assert all(a.port == 7000 for a in resolution.addresses)
    assert resolution.failures == ()


def test_membership_flags_keep_metallb_names() -> None:
    args = speaker_main.parse_args(
        ["--node-name", "n1", "--ml-bind-addr", "10.0.0.1", "--ml-secret-key-path", "/etc/ml"]
    )
    assert (args.node_name, args.ml_bind_addr, args.ml_bind_port) == ("n1", "10.0.0.1", 7946)
    assert args.ml_profile == "default"


def test_metallb_spellings_and_environment_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MetalLB DaemonSet's flags and environment work unchanged."""
    for name in ("NODE_NAME", "METALLB_NODE_NAME", "METALLB_ML_BIND_PORT", "METALLB_HOST"):
        monkeypatch.delenv(name, raising=False)
    args = speaker_main.parse_args(["--ml-bindaddr=10.0.0.1", "--ml-bindport=7947"])
    assert (args.ml_bind_addr, args.ml_bind_port, args.host) == ("10.0.0.1", 7947, "")
    monkeypatch.setenv("METALLB_NODE_NAME", "n2")
    monkeypatch.setenv("METALLB_ML_BIND_PORT", "7950")
    monkeypatch.setenv("METALLB_HOST", "10.0.0.2")
    args = speaker_main.parse_args([])
    assert (args.node_name, args.ml_bind_port, args.host) == ("n2", 7950, "10.0.0.2")
    monkeypatch.setenv("NODE_NAME", "n3")  # ours wins where both are set
    assert speaker_main.parse_args([]).node_name == "n3"


def test_pod_name_keeps_metallbs_flag_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The speaker's own Pod (owner of its status objects) reaches the agent; none by default
    (a speaker run as a plain process: its status objects get no owner)."""
    monkeypatch.delenv("METALLB_POD_NAME", raising=False)
    assert speaker_main.agent_options(speaker_main.parse_args(["--node-name=n1"])).pod_name == ""
    monkeypatch.setenv("METALLB_POD_NAME", "speaker-abcde")
    assert speaker_main.parse_args([]).pod_name == "speaker-abcde"
    args = speaker_main.parse_args(["--node-name=n1", "--pod-name=speaker-fghij"])
    assert speaker_main.agent_options(args).pod_name == "speaker-fghij"  # the flag wins


def test_gratuitous_arp_interval_keeps_metallbs_flag_and_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("METALLB_GRATUITOUS_ARP_INTERVAL", raising=False)
    assert speaker_main.parse_args([]).gratuitous_arp_interval == 0  # off by default
    assert speaker_main.parse_args(["--gratuitous-arp-interval=30"]).gratuitous_arp_interval == 30
    monkeypatch.setenv("METALLB_GRATUITOUS_ARP_INTERVAL", "")  # empty: unset, as in MetalLB
    assert speaker_main.parse_args([]).gratuitous_arp_interval == 0
    monkeypatch.setenv("METALLB_GRATUITOUS_ARP_INTERVAL", "60")
    assert speaker_main.parse_args([]).gratuitous_arp_interval == 60
    # The flag wins over the environment, so an explicit 0 turns it off.
    assert speaker_main.parse_args(["--gratuitous-arp-interval", "0"]).gratuitous_arp_interval == 0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("1", 1), ("+5", 5), ("007", 7), ("2147483647", 2**31 - 1)],
)
def test_gratuitous_arp_interval_takes_whole_seconds(text: str, seconds: int) -> None:
    assert speaker_main.gratuitous_arp_interval(text) == seconds


@pytest.mark.parametrize(
    "text", ["-1", "2147483648", "1.5", "30s", "", " 5", "1_0", "\u0665", "ten"]
)
def test_a_bad_gratuitous_arp_interval_stops_the_speaker_at_once(
    text: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("METALLB_GRATUITOUS_ARP_INTERVAL", raising=False)
    with pytest.raises(SystemExit) as flag:
        speaker_main.main(["--node-name=n1", f"--gratuitous-arp-interval={text}"])
    assert flag.value.code == 2
    assert "--gratuitous-arp-interval" in capsys.readouterr().err
    if text:  # an empty variable is an unset one
        monkeypatch.setenv("METALLB_GRATUITOUS_ARP_INTERVAL", text)
        with pytest.raises(SystemExit) as env:
            speaker_main.main(["--node-name=n1"])
        assert env.value.code == 2


def test_an_unresolvable_seed_name_is_not_an_error_at_start() -> None:
    args = speaker_main.parse_args(
        ["--node-name=n1", "--ml-bind-addr=10.0.0.1", "--ml-seeds=no-such-host.invalid:7946"]
    )
    settings = speaker_main.membership_settings(args)
    host = "no-such-host.invalid"
    assert settings.seeds == (seeds.Seed(f"{host}:7946", host, 7946),)


@pytest.mark.parametrize(
    "flags",
    [
        ["--ml-seeds=a:b"],
        ["--ml-seeds=a:70000"],
        ["--ml-seeds=[fd00::1"],
        ["--ml-bind-addr=10.0.0.1:0"],
    ],
)
def test_malformed_membership_flags_exit_at_once(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--node-name=n1", "--ml-bind-addr=10.0.0.1", *flags]
    assert speaker_main.main(argv) == 2
    assert "error:" in capsys.readouterr().err


# --- seeds: splitting, resolving, and what is logged --------------------------------------------


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("svc.ns.svc", "svc.ns.svc", 7946),
        ("svc:8000", "svc", 8000),
        ("[fd00::1]:9", "fd00::1", 9),
        ("[fd00::1]", "fd00::1", 7946),
        ("fd00::1", "fd00::1", 7946),
        (" 10.0.0.1 ", "10.0.0.1", 7946),
    ],
)
def test_split_never_resolves(text: str, host: str, port: int) -> None:
    assert seeds.split(text, 7946) == seeds.Seed(text.strip(), host, port)


def failing(host: str, port: int) -> list[str]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def test_a_seed_that_does_not_resolve_is_a_failure_the_others_still_count() -> None:
    parsed = seeds.parse("members.ns.svc, 10.0.0.9", 7946)
    resolution = seeds.resolve(parsed, failing)
    assert resolution.addresses == (messages.Address("10.0.0.9", 7946),)
    assert resolution.failed == {"members.ns.svc"}
    assert "Name or service not known" in resolution.failures[0][1]


def test_a_name_with_no_address_is_a_failure() -> None:
    resolution = seeds.resolve(seeds.parse("empty", 7946), lambda host, port: [])
    assert resolution.addresses == ()
    assert resolution.failures == (("empty", "no address"),)


def test_a_malformed_name_is_a_failure_not_a_crash() -> None:
    def too_long(host: str, port: int) -> list[str]:
        raise UnicodeError("label too long")

    assert seeds.resolve(seeds.parse("x", 1), too_long).failed == {"x"}


def resolution(*addresses: str, failed: tuple[str, ...] = ()) -> seeds.Resolution:
    return seeds.Resolution(
        tuple(messages.Address(a, 7946) for a in addresses),
        tuple((f, "Name or service not known") for f in failed),
    )


def test_failures_are_logged_once_per_change_not_per_retry() -> None:
    first = seeds.note(None, resolution(failed=("m",)), 1.0)
    assert first is not None and first.level == "warning"
    assert first.fields["seeds"] == "m" and first.fields["retry_s"] == 1.0
    assert "Name or service not known" in str(first.fields["error"])
    # The same failure on the next retries: nothing.
    assert seeds.note(resolution(failed=("m",)), resolution(failed=("m",)), 2.0) is None
    # Another seed failing too is news.
    both = seeds.note(resolution(failed=("m",)), resolution(failed=("m", "n")), 4.0)
    assert both is not None and both.level == "warning"


def test_recovery_is_logged_once_then_only_changes_of_addresses() -> None:
    recovered = seeds.note(resolution(failed=("m",)), resolution("10.0.0.1"), None)
    assert recovered is not None and recovered.level == "info"
    assert recovered.message == "membership seeds resolved"
    assert seeds.note(resolution("10.0.0.1"), resolution("10.0.0.1"), None) is None
    grown = seeds.note(resolution("10.0.0.1"), resolution("10.0.0.1", "10.0.0.2"), None)
    assert grown is not None and grown.message == "membership seeds changed"
    first = seeds.note(None, resolution("10.0.0.1"), None)
    assert first is not None and first.message == "membership seeds resolved"
