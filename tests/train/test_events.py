"""train.events: the events train() emits, plain frozen values a handler dispatches on by type."""
import dataclasses

import pytest

from train.events import (
    BeginIteration,
    BeginPass,
    EndIteration,
    EndPass,
    Event,
    TestResult,
)

EVENTS = [BeginPass, BeginIteration, EndIteration, EndPass, TestResult]


@pytest.mark.parametrize("kind", EVENTS, ids=lambda k: k.__name__)
def test_event_is_a_frozen_event_of_a_pass(kind):
    event = kind(3)
    assert isinstance(event, Event) and event.pass_id == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.pass_id = 4
    assert event == kind(3) and event != kind(4)


def test_event_defaults_describe_a_fresh_pass():
    assert (BeginPass(0).batches, BeginPass(0).first_batch) == (None, 0)
    assert BeginIteration(0).batch_id == 0 and EndIteration(0).batch_id == 0


@pytest.mark.parametrize("kind", [EndIteration, EndPass, TestResult], ids=lambda k: k.__name__)
def test_event_metrics_are_not_shared_between_events(kind):
    a, b = kind(0), kind(0)
    a.metrics["loss"] = 1.0
    assert b.metrics == {}


def test_events_of_different_kinds_are_not_equal():
    assert BeginIteration(0, 1) != EndIteration(0, 1)
    assert EndPass(0, {"loss": 1.0}) != TestResult(0, {"loss": 1.0})
