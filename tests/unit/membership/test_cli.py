"""The standalone member's `--set FIELD=VALUE`: each field parsed as its own type."""

from __future__ import annotations

import argparse

import pytest

from speaker.membership import __main__ as cli


def test_settings_take_the_type_of_their_field() -> None:
    args = cli.parse_args(
        [
            "--name=m1",
            "--set=probe_interval=0.5",
            "--set=suspect_checkers=4",
            "--set=shared_probe_schedule=false",
        ]
    )
    assert dict(args.set) == {
        "probe_interval": 0.5,
        "suspect_checkers": 4,
        "shared_probe_schedule": False,
    }
    assert dict(cli.parse_args(["--name=m1", "--set=shared_probe_schedule=True"]).set) == {
        "shared_probe_schedule": True
    }


@pytest.mark.parametrize(
    "text", ["shared_probe_schedule=0", "shared_probe_schedule=no", "probe_interval=fast", "x=1"]
)
def test_a_setting_that_does_not_parse_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        cli._setting(text)
