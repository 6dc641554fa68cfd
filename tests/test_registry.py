"""The shared name -> plugin table behind every ``@register_*`` decorator."""

from __future__ import annotations

import pytest

from aloft.inference import base as engines
from aloft.inference import register_engine
from aloft.registry import lookup, register
from aloft.trainer.plans import make_plan, register_plan


def test_registering_the_same_object_twice_is_a_no_op_and_another_object_is_refused():
    table: dict[str, object] = {}

    def first() -> None: ...

    def second() -> None: ...

    assert register(table, "widget", "register_widget", "a")(first) is first
    register(table, "widget", "register_widget", "a")(first)  # a module imported twice
    with pytest.raises(
        ValueError, match=r"widget 'a' is already registered \(registered: a\); .*@register_widget"
    ):
        register(table, "widget", "register_widget", "a")(second)
    assert lookup(table, "widget", "register_widget", "a") is first
    with pytest.raises(
        ValueError, match=r"unknown widget 'b'; known: a \(register your own with @register_widget"
    ):
        lookup(table, "widget", "register_widget", "b")


def test_plans_and_engines_use_it():
    with pytest.raises(ValueError, match="execution plan 'sync' is already registered.*@register_plan"):
        register_plan("sync")(object)
    with pytest.raises(ValueError, match="unknown execution plan 'nope'.*one_step_off"):
        make_plan("nope")
    register_engine("test-registry-engine")(dict)
    try:
        with pytest.raises(ValueError, match="inference engine 'test-registry-engine' is already registered"):
            register_engine("test-registry-engine")(list)
    finally:
        engines._ENGINES.pop("test-registry-engine")
