"""train.continual.stream_columns: a timestamped stream's columns chunk by chunk, its entries checked, its test split by task."""
import numpy as np
import pytest

import readers
import readers.sources.split_mnist
from train.continual.stream_columns import (
    entry_problem,
    seen_tasks,
    split_by_task,
    stream_chunks,
)


def entries(n=10):
    return [(np.full(3, i, np.float32), i % 3, 100 + i, float(i)) for i in range(n)]


@pytest.mark.parametrize("make", [
    lambda e: readers.from_sequence(e),  # indexed, gathered by columns
    lambda e: (lambda: iter(e)),  # a plain stream, entry by entry
    lambda e: readers.shuffle(readers.from_sequence(e), 0),  # a stage with no random access: read in order
])
def test_chunks_hold_every_entry_once_in_stream_order_whatever_the_reader(make):
    chunks = list(stream_chunks(make(entries()), 4, 1, 0))
    assert [len(c.keys) for c in chunks] == [4, 4, 2]
    keys = np.concatenate([c.keys for c in chunks])
    assert keys.tolist() == list(range(100, 110))
    assert np.concatenate([c.labels for c in chunks]).tolist() == [i % 3 for i in range(10)]
    assert np.concatenate([c.times for c in chunks]).dtype == np.float64
    assert np.concatenate([c.features for c in chunks])[:, 2].tolist() == list(map(float, range(10)))


def test_features_are_read_only_when_asked():
    assert all(c.features is None for c in stream_chunks(readers.from_sequence(entries()), 3, 1))


def test_split_mnist_is_read_through_its_columns(tmp_path):
    from readers.sources.idx import write_idx

    write_idx(tmp_path / "train-images-idx3-ubyte", np.arange(8, dtype=np.uint8).repeat(784).reshape(8, 28, 28))
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.array([3, 0, 2, 1, 0, 9, 1, 2], np.uint8))
    stream = readers.sources.split_mnist.train(tmp_path, download=False, tasks=2)
    chunk, = stream_chunks(stream, 100, 1, 0)
    assert chunk.keys.tolist() == [e[2] for e in stream()] and chunk.labels.tolist() == [0, 0, 1, 1, 2, 2, 3]
    assert chunk.features.shape == (7, 784)


@pytest.mark.parametrize("entry, found", [
    ([1, 0, 2, 0.0], "must be tuples"),
    ((1.0, 0, 0.5), "must end in the columns (key, time)"),
    ((1.0, 0, -1, 0.0), "key (its next-to-last column) must be an int >= 0"),
    ((1.0, 0, 1, "noon"), "time (its last column) must be a finite number"),
    ((1.0, 0, 1, float("nan")), "time (its last column) must be a finite number"),
    ((1.0, "cat", 1, 0.0), "label (column 1) must be an int class"),
    (("text", 0, 1, 0.0), "features (column 0) must be numbers"),
])
def test_entry_problems_say_what_is_wrong(entry, found):
    assert found in entry_problem(entry, 1, 0)


def test_entries_that_fit_have_no_problem():
    assert entry_problem((np.zeros(2), np.int64(1), np.uint16(3), np.float32(2.5)), 1, 0) is None
    assert entry_problem((np.zeros(2), np.array(1), 3, 2), 1, None) is None


def test_a_test_split_is_grouped_by_the_day_its_times_fall_in():
    test = readers.from_sequence([("a", 0, 0, 5.0), ("b", 1, 1, 86400.0), ("c", 0, 2, 10.0), ("d", 1, 3, 200000.0)])
    tasks = split_by_task(test, 86400.0)
    assert {t: [e[0] for e in r()] for t, r in tasks.items()} == {0: ["a", "c"], 1: ["b"], 2: ["d"]}
    assert seen_tasks(tasks, 86399.0, 86400.0) == [0] and seen_tasks(tasks, 86400.0, 86400.0) == [0, 1]
    one = split_by_task(test, None)
    assert list(one) == [0] and len(list(one[0]())) == 4 and seen_tasks(one, 0.0, None) == [0]
