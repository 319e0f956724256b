"""ironlb.selectors: a label selector as written in any metallb.io object matches as Kubernetes
matches it (matchLabels and matchExpressions ANDed, the four operators, an empty selector
matching everything, a list of selectors ORed)."""

from __future__ import annotations

from typing import Any

import pytest

from ironlb import selectors

LABELS = {"rack": "a", "zone": "east", "ssd": ""}


def parsed(raw: Any) -> selectors.LabelSelector:
    found, problems = selectors.parse(raw, kind="BGPPeer", name="p", field="spec.nodeSelectors[0]")
    assert not problems and found is not None
    return found


@pytest.mark.parametrize(
    ("raw", "matches"),
    [
        pytest.param({}, True, id="empty-matches-everything"),
        pytest.param({"matchLabels": {"rack": "a"}}, True, id="matchLabels"),
        pytest.param({"matchLabels": {"rack": "b"}}, False, id="matchLabels-other-value"),
        pytest.param({"matchLabels": {"rack": "a", "zone": "west"}}, False, id="matchLabels-all"),
        pytest.param(
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["east", "x"]}]},
            True,
            id="In",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["east"]}]},
            False,
            id="NotIn",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["x"]}]},
            True,
            id="NotIn-absent-key",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}, True, id="Exists"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "ssd", "operator": "DoesNotExist"}]},
            False,
            id="DoesNotExist",
        ),
        pytest.param(
            {
                "matchLabels": {"rack": "a"},
                "matchExpressions": [{"key": "gpu", "operator": "Exists"}],
            },
            False,
            id="labels-and-expressions-ANDed",
        ),
    ],
)
def test_selector_matching(raw: dict[str, Any], matches: bool) -> None:
    assert parsed(raw).matches(LABELS) is matches


def test_a_list_of_selectors_is_ored_and_empty_selects_all() -> None:
    other = parsed({"matchLabels": {"rack": "b"}})
    mine = parsed({"matchLabels": {"zone": "east"}})
    assert selectors.any_matches((other, mine), LABELS)
    assert not selectors.any_matches((other,), LABELS)
    assert selectors.any_matches((), LABELS)
