"""Checks shared by the numpy models' tests: equal states, and a state_dict round trip that continues exactly."""
import io

import numpy as np


def assert_same_state(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        assert np.array_equal(a[name], b[name]), name


def assert_round_trip_continues(make, data: list) -> None:
    """A model saved after 13 steps and loaded into another (built with another seed) ends the ``data`` steps
    bit for bit where one trained straight through does. ``make(seed=...)`` builds the model."""
    straight, first = make(), make()
    for batch in data:
        straight.step(batch)
    for batch in data[:13]:
        first.step(batch)
    saved = first.state_dict()
    first.step(data[13])  # the saved state is a copy, not a view of the live arrays
    buffer = io.BytesIO()
    np.savez(buffer, **saved)  # as a checkpoint stores it: "step" comes back as a 0-d array
    buffer.seek(0)
    resumed = make(seed=123)
    resumed.load_state_dict(dict(np.load(buffer)))
    for batch in data[13:]:
        resumed.step(batch)
    assert_same_state(resumed.state_dict(), straight.state_dict())
