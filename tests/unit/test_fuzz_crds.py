"""Fuzzing the metallb.io objects: raw dict -> `parsing.parse` -> `validation.validate`.

Every process reads these objects through the same two functions: the controller for its pools
(`controller.snapshot.pools`), the speaker for its configuration, the webhook for its verdict.
The contract (`ironlb.parsing`): any value gives either a model value and no Problem, or None
and at least one Problem that renders as text; nothing raises, and a bad object is left out
alone without disturbing the others. Problems are how a bad object is surfaced: the webhook
denies it, the speaker logs it and the controller keeps its last good pools
(`metallb_k8s_client_config_stale_bool`). Inputs: random JSON, and mutations of the documented
examples with values from the syntax the parsers care about. Valid objects round-trip.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from controller import snapshot as controller_snapshot
from ironlb import model, parsing, validation
from ironlb.problems import Problem
from tests.unit import fuzzing
from tests.unit.test_parsing import docs_objects

AREA = "crd objects"
EXAMPLES = docs_objects()


def parse(kind: str, obj: Any) -> Any:
    value, problems = fuzzing.feed(AREA, parsing.parse, kind, obj)
    assert all(isinstance(p, Problem) and str(p) for p in problems)
    if value is None:
        assert problems, "left out without a Problem saying why"
    else:
        assert problems == []
        hash(value)  # frozen all the way down: safe to share between passes
    return value


def parse_all(objects: list[tuple[str, Any]]) -> None:
    by_kind: dict[str, list[Any]] = {}
    for kind, obj in objects:
        parse(kind, obj)
        by_kind.setdefault(kind, []).append(obj)
    config, problems = fuzzing.feed(AREA, parsing.parse_config, by_kind)
    checked = validation.validate(config)
    for p in (*problems, *checked):
        validation.about([p], p.kind, p.name)
    validation.invalid_objects(checked)
    controller_snapshot.pools(by_kind.get(model.IP_ADDRESS_POOL, []), {"default": {"a": "b"}})


@fuzzing.fuzz_settings(200)
@given(st.sampled_from(sorted(parsing.PARSERS)), fuzzing.json_values(fuzzing.OBJECT_KEYS))
def test_random_objects(kind: str, value: Any) -> None:
    parse_all([(kind, value)])


@fuzzing.fuzz_settings(250)
@given(st.data())
def test_mutated_examples(data: st.DataObject) -> None:
    # A few mutated objects among the valid examples: the bad ones are left out, and the
    # cross-object rules meet every shape of what is left.
    chosen = data.draw(st.lists(st.sampled_from(EXAMPLES), min_size=1, max_size=3))
    mutated = [(o["kind"], fuzzing.mutate_json(o, data.draw, fuzzing.OBJECT_KEYS)) for o in chosen]
    parse_all([(o["kind"], o) for o in EXAMPLES] + mutated)


@fuzzing.fuzz_settings(100)
@given(st.sampled_from(EXAMPLES))
def test_valid_examples_round_trip(obj: dict[str, Any]) -> None:
    value = parse(obj["kind"], obj)
    assert value is not None
    assert value.name == obj["metadata"]["name"]
    # Parsing does not depend on anything but the object: the same object, the same value.
    assert parse(obj["kind"], obj) == value
