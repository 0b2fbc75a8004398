"""The events train() emits, in order: BeginPass, (BeginIteration, EndIteration)*, EndPass, TestResult.

An event handler is any callable taking one event; dispatch on its type.

>>> def handler(event):
...     if isinstance(event, EndPass):
...         print(f"pass {event.pass_id}: loss {event.metrics['loss']:.2f}")
>>> handler(EndPass(0, {"loss": 0.25}))
pass 0: loss 0.25
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["BeginIteration", "BeginPass", "EndIteration", "EndPass", "Event", "TestResult"]


@dataclass(frozen=True)
class Event:
    """Base of every event: the pass it belongs to."""

    pass_id: int


@dataclass(frozen=True)
class BeginPass(Event):
    """A pass starts: ``batches`` minibatches in the whole pass when known, else None.

    ``first_batch`` is the batch it starts at: 0, or where a resumed pass goes on.
    """

    batches: int | None = None
    first_batch: int = 0


@dataclass(frozen=True)
class BeginIteration(Event):
    """A minibatch is about to be trained on."""

    batch_id: int = 0


@dataclass(frozen=True)
class EndIteration(Event):
    """A minibatch was trained on; ``metrics`` is what the model's step returned."""

    batch_id: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EndPass(Event):
    """A pass ended; ``metrics`` aggregates it (loss, accuracy, samples, seconds, samples_per_s)."""

    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TestResult(Event):
    """The test provider was evaluated after a pass; ``metrics`` as for EndPass."""

    __test__ = False  # not a pytest test class
    metrics: dict[str, Any] = field(default_factory=dict)
