"""python -m speaker's flag handling: seeds, arguments."""

from __future__ import annotations

from speaker import __main__ as speaker_main
from speaker.membership import messages


def test_seeds_are_deduplicated_and_keep_their_ports() -> None:
    seeds = speaker_main.resolve_seeds("10.0.0.1, 10.0.0.1:7946 ,10.0.0.2:8000,,[fd00::1]:9", 7946)
    assert seeds == [
        messages.Address("10.0.0.1", 7946),
        messages.Address("10.0.0.2", 8000),
        messages.Address("fd00::1", 9),
    ]


def test_a_name_resolves_to_its_addresses() -> None:
    seeds = speaker_main.resolve_seeds("localhost:7000", 7946)
    assert messages.Address("127.0.0.1", 7000) in seeds
    assert all(s.port == 7000 for s in seeds)


def test_membership_flags_keep_metallb_names() -> None:
    args = speaker_main.parse_args(
        ["--node-name", "n1", "--ml-bind-addr", "10.0.0.1", "--ml-secret-key-path", "/etc/ml"]
    )
    assert (args.node_name, args.ml_bind_addr, args.ml_bind_port) == ("n1", "10.0.0.1", 7946)
    assert args.ml_profile == "default"
