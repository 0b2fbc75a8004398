"""train.models.adam: the Adam update and the resumable state the numpy models share."""
import numpy as np
import pytest

from train.models.adam import AdamModel


class Quadratic(AdamModel):
    """Minimises |w - target|^2 with Adam."""

    def __init__(self, lr=0.1):
        self.lr, self._names, self._params = lr, ["w"], [np.zeros(3, np.float32)]
        self.target = np.array([1.0, -2.0, 0.5], np.float32)
        self._init_adam()

    def step(self):
        self._adam([2 * (self._params[0] - self.target)])


def test_adam_converges_and_a_restored_state_continues_bit_for_bit():
    whole = Quadratic()
    for _ in range(40):
        whole.step()
    first = Quadratic()
    for _ in range(17):  # past no flush; the resumed one crosses step 32's
        first.step()
    resumed = Quadratic()
    resumed.load_state_dict(first.state_dict())
    for _ in range(23):
        resumed.step()
    assert np.array_equal(resumed.state_dict()["w"], whole.state_dict()["w"])
    assert np.abs(whole.state_dict()["w"] - whole.target).max() < 0.6


def test_a_state_of_another_model_is_refused_before_anything_changes():
    model = Quadratic()
    before = model.state_dict()
    with pytest.raises(ValueError, match=r"missing \['v.w'\], unexpected \[\]"):
        model.load_state_dict({k: v for k, v in before.items() if k != "v.w"})
    with pytest.raises(ValueError, match="state 'step' must be a non-negative integer"):
        model.load_state_dict({**before, "step": -1})
    assert all(np.array_equal(before[k], v) for k, v in model.state_dict().items())
