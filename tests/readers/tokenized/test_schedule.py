"""readers.tokenized.schedule: the batch-size schedule of a run, against the reference system's step-by-step loop."""
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readers.tokenized.schedule import BatchSchedule


def reference(start: int, end: int, warmup_tokens: int, seq_len: int, steps: int) -> list[tuple[int, int]]:
    """(batch size, data index) of steps 0.. as the reference computes them: its get_batch_size (linear in the
    tokens before the step, f64, rounded half away from zero) summed step by step (get_data_index_for_step)."""
    out, index = [], 0
    for _ in range(steps):
        tokens = index * seq_len
        if tokens >= warmup_tokens:
            size = end
        else:
            size = math.floor(start + (end - start) * (tokens / warmup_tokens) + 0.5)
        out.append((size, index))
        index += size
    return out


configs = st.tuples(st.integers(1, 64), st.integers(1, 64), st.integers(0, 20_000), st.integers(1, 64))


@settings(max_examples=300, deadline=None)
@given(config=configs)
def test_batch_schedule_matches_the_reference_loop(config):
    schedule = BatchSchedule(*config)
    want = reference(*config, steps=200)
    assert [(schedule.batch_size(s), schedule.data_index(s)) for s in range(200)] == want


@settings(max_examples=200, deadline=None)
@given(config=configs, picks=st.lists(st.integers(0, 10_000), max_size=20))
def test_batch_schedule_step_at_is_the_inverse_of_data_index(config, picks):
    schedule = BatchSchedule(*config)
    for index in picks:
        step = schedule.step_at(index)
        assert schedule.data_index(step) <= index < schedule.data_index(step + 1)
    for step in range(50):
        assert schedule.step_at(schedule.data_index(step)) == step


@settings(max_examples=200, deadline=None)
@given(config=configs)
def test_batch_schedule_ramps_monotonically_and_ends_at_end(config):
    start, end, warmup_tokens, seq_len = config
    schedule = BatchSchedule(*config)
    sizes = [schedule.batch_size(s) for s in range(schedule.warmup_steps + 5)]
    assert sizes == sorted(sizes, reverse=end < start)
    assert all(min(start, end) <= b <= max(start, end) for b in sizes)
    assert sizes[schedule.warmup_steps:] == [end] * 5
    w = schedule.warmup_steps
    assert schedule.data_index(w) * seq_len >= warmup_tokens
    assert w == 0 or schedule.data_index(w - 1) * seq_len < warmup_tokens


def test_batch_schedule_without_warmup_is_constant():
    schedule = BatchSchedule(start=3, end=16, warmup_tokens=0, seq_len=2048)
    assert [schedule.batch_size(s) for s in range(4)] == [16] * 4
    assert schedule.data_index(10) == 160 and schedule.warmup_steps == 0


def test_batch_schedule_answers_far_steps_exactly():
    # the reference's largest config: 540B warm-up tokens, 12288 -> 32768 samples of 2048 tokens
    schedule = BatchSchedule(start=12288, end=32768, warmup_tokens=549755813888, seq_len=2048)
    w = schedule.warmup_steps
    assert schedule.data_index(w + 10 ** 12) == schedule.data_index(w) + 32768 * 10 ** 12
    assert schedule.step_at(schedule.data_index(w + 10 ** 12) + 5) == w + 10 ** 12
    head = reference(12288, 32768, 549755813888, 2048, 300)
    assert [(schedule.batch_size(s), schedule.data_index(s)) for s in range(300)] == head


def test_batch_schedule_rounds_half_up():
    # tokens 2 of 4 into a ramp 1 -> 2: exactly 1.5, which the reference rounds to 2
    schedule = BatchSchedule(start=1, end=2, warmup_tokens=4, seq_len=2)
    assert [schedule.batch_size(s) for s in range(3)] == [1, 2, 2]


def test_batch_schedule_of_a_run_file(tmp_path):
    from readers.tokenized.runfiles import load_run
    (tmp_path / "tokens").mkdir()
    (tmp_path / "state.toml").write_text("""
        run_id = "test"
        [config]
        global_batch_size_start = 4
        global_batch_size_end = 8
        global_batch_size_warmup_tokens = 64
        total_steps = 10
        [model.LLM]
        max_seq_len = 4
        [model.LLM.data_location]
        Local = "tokens"
    """)
    assert BatchSchedule.of_run(load_run(tmp_path / "state.toml")) == BatchSchedule(4, 8, 64, 4)


@pytest.mark.parametrize("kwargs, message", [
    ({"start": 0}, "start must be an int >= 1, got 0"),
    ({"end": 2.0}, "end must be an int >= 1, got 2.0"),
    ({"warmup_tokens": -1}, "warmup_tokens must be an int >= 0, got -1"),
    ({"seq_len": 0}, "seq_len must be an int >= 1, got 0"),
])
def test_batch_schedule_refuses_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BatchSchedule(**{"start": 1, "end": 2, "warmup_tokens": 10, "seq_len": 1, **kwargs})


def test_batch_schedule_refuses_a_negative_step_or_index():
    schedule = BatchSchedule(1, 2, 10, 1)
    with pytest.raises(ValueError, match="step must be an int >= 0, got -1"):
        schedule.data_index(-1)
    with pytest.raises(ValueError, match="data_index must be an int >= 0, got 1.5"):
        schedule.step_at(1.5)


def test_batch_schedule_pickles_and_shows_its_settings():
    schedule = BatchSchedule(2, 9, 500, 3)
    again = pickle.loads(pickle.dumps(schedule))
    assert again == schedule and hash(again) == hash(schedule)
    assert [again.data_index(s) for s in range(30)] == [schedule.data_index(s) for s in range(30)]
    assert repr(schedule) == "BatchSchedule(start=2, end=9, warmup_tokens=500, seq_len=3)"
    assert schedule != BatchSchedule(2, 9, 501, 3)


def test_batch_schedule_takes_numpy_ints_and_answers_python_ints():
    schedule = BatchSchedule(3, 7, 100, 2)
    assert type(schedule.data_index(np.int64(5))) is int and schedule.data_index(np.int64(5)) == schedule.data_index(5)
    assert type(schedule.step_at(np.int64(20))) is int


def test_batch_schedule_refuses_a_warm_up_through_too_many_sizes_at_once():
    """Issue 27 item 17: a ramp that changes size at every one of ~850,000 warm-up steps took a second (and ramps to
    2**62 minutes) and memory to build, one segment a size; the bound is MAX_SIZES sizes."""
    with pytest.raises(ValueError, match=r"BatchSchedule: end=1,000,000: a warm-up from start=1 over "
                                         r"warmup_tokens=500,000,000,000 goes through more than 524,288 batch sizes"):
        BatchSchedule(1, 10**6, 5 * 10**11, 1)
    assert len(BatchSchedule(1, 10**5, 5 * 10**9, 1)._sizes) == 84659  # well within the bound: kept whole
