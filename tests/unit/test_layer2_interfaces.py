"""Which interfaces answer ARP/NDP (MetalLB announcer.go's rules, §4.3)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from speaker import appliers
from speaker.layer2 import interfaces
from tests.unit import fake_interfaces

ETH0 = fake_interfaces.facts("eth0", 2)
DEFAULT = interfaces.exclusion(interfaces.DEFAULT_EXCLUDE)


def eligibility(**changes: object) -> interfaces.Eligibility:
    facts = dataclasses.replace(ETH0, **changes)  # type: ignore[arg-type]
    return interfaces.eligibility(facts, DEFAULT)


def test_a_plain_up_ethernet_interface_gets_both_responders() -> None:
    assert eligibility() == interfaces.Eligibility(arp=True, ndp=True)
    assert eligibility().any


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"up": False}, "down"),
        ({"enslaved": True}, "enslaved"),
        ({"noarp": True}, "noarp"),
        ({"ethernet": False}, "not ethernet"),
        ({"has_ipv4": False, "has_link_local": False}, "no address"),
        ({"broadcast": False, "has_link_local": False}, "no address"),
    ],
)
def test_ineligible(changes: dict[str, object], reason: str) -> None:
    result = eligibility(**changes)
    assert (result.arp, result.ndp, result.reason) == (False, False, reason)
    assert not result.any


def test_arp_needs_broadcast_and_ipv4_ndp_needs_link_local() -> None:
    assert eligibility(has_ipv4=False) == interfaces.Eligibility(arp=False, ndp=True)
    assert eligibility(broadcast=False) == interfaces.Eligibility(arp=False, ndp=True)
    assert eligibility(has_link_local=False) == interfaces.Eligibility(arp=True, ndp=False)


@pytest.mark.parametrize(
    "name",
    ["docker0", "cbr0", "dummy1", "virbr0", "lxcbr0", "veth1234", "lo", "cali123", "tunl0",
     "flannel.1", "kube-ipvs0", "cni0", "nodelocaldns", "lxc42"],
)  # fmt: skip
def test_default_exclude_list_skips_container_and_tunnel_interfaces(name: str) -> None:
    assert eligibility(name=name).reason == "excluded"


@pytest.mark.parametrize("name", ["eth0", "ens3", "bond0", "br0", "enp0s31f6", "vlan100", "lo0"])
def test_default_exclude_list_keeps_host_interfaces(name: str) -> None:
    assert eligibility(name=name).any


def test_custom_and_empty_exclude_lists() -> None:
    custom = interfaces.exclusion(["^eth1$", "storage"])
    assert interfaces.eligibility(dataclasses.replace(ETH0, name="eth1"), custom).reason == (
        "excluded"
    )
    assert interfaces.eligibility(dataclasses.replace(ETH0, name="eth10"), custom).any
    # Unanchored like Go's MatchString: a pattern matches anywhere in the name.
    named = dataclasses.replace(ETH0, name="my-storage0")
    assert interfaces.eligibility(named, custom).reason == "excluded"
    assert interfaces.exclusion([]) is None
    assert interfaces.eligibility(dataclasses.replace(ETH0, name="veth0"), None).any


# --- MetalLB's excludel2.yaml ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "patterns"),
    [
        ({"announcedInterfacesToExclude": ["^eth1$", "^bond.*"]}, ("^eth1$", "^bond.*")),
        ({"announcedInterfacesToExclude": []}, ()),  # excludes nothing, as in MetalLB
        ({}, ()),
        (None, ()),  # an empty file
    ],
)
def test_metallb_exclusion_files_are_read_as_metallb_reads_them(
    data: object, patterns: tuple[str, ...]
) -> None:
    assert interfaces.parse_exclude_config(data) == patterns


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (["^eth1$"], "expected a mapping"),
        ({"announcedInterfacesToExclude": "^eth1$"}, "must be a list of strings"),
        ({"announcedInterfacesToExclude": [1]}, "must be a list of strings"),
        ({"announcedInterfacesToExclude": ["(unclosed"]}, "is not a regex"),
    ],
)
def test_a_bad_exclusion_file_says_what_is_wrong(data: object, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        interfaces.parse_exclude_config(data)


def test_the_speaker_reads_the_file_and_falls_back_on_the_default_list(tmp_path: Path) -> None:
    path = tmp_path / "excludel2.yaml"
    assert appliers.layer2_excludes(str(path)) == interfaces.DEFAULT_EXCLUDE  # no file
    path.write_text("announcedInterfacesToExclude:\n  - ^eth9$\n")
    patterns = appliers.layer2_excludes(str(path))
    assert patterns == ("^eth9$",)
    exclude = interfaces.exclusion(patterns)
    assert exclude is not None and exclude.search("eth9") and not exclude.search("veth0")
    path.write_text("announcedInterfacesToExclude: [\n")  # not YAML
    assert appliers.layer2_excludes(str(path)) == interfaces.DEFAULT_EXCLUDE
    path.write_text("announcedInterfacesToExclude: ['(']\n")  # not a regex
    assert appliers.layer2_excludes(str(path)) == interfaces.DEFAULT_EXCLUDE
