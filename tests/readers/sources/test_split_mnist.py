"""Split-MNIST: task order, data times, keys into MNIST, seeds, shuffling, sharding and resuming, the real files."""
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from readers import shard, shuffle, with_index
from readers.identity import fingerprint
from readers.plugins.registry import find_reader, find_test_reader
from readers.sources import mnist, split_mnist
from readers.sources.idx import write_idx
from readers.sources.split_mnist import TASK_SECONDS, classes_of, key_and_time, task_of
from readers.testing import assert_resumes_at_every_step
from tests.helpers import paths as _paths

DATA = _paths.SHARED_DATA
NAMES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
SPLITS = {"train": (split_mnist.train, mnist.train), "test": (split_mnist.test, mnist.test)}
COUNTS = {"train": 40, "test": 23}  # uneven, so tasks differ in size


def make_split(folder: Path, split: str, n: int, seed: int = 1) -> np.ndarray:
    """Write ``n`` random images with random labels 0..9 (every class present); return the labels."""
    rng = np.random.default_rng(seed)
    labels = np.concatenate([np.arange(10), rng.integers(0, 10, n - 10)]).astype(np.uint8)
    rng.shuffle(labels)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    image_name, label_name = NAMES[split]
    write_idx(folder / image_name, images)
    write_idx(folder / label_name, labels)
    return labels


@pytest.fixture(params=sorted(SPLITS))
def data(request, tmp_path):
    """(split, folder, labels) of a small generated split."""
    split = request.param
    return split, tmp_path, make_split(tmp_path, split, COUNTS[split])


def entries_of(reader) -> list:
    return list(reader())


@pytest.mark.parametrize("tasks", [1, 2, 5])
def test_split_mnist_orders_tasks_with_their_two_classes(data, tasks):
    split, folder, labels = data
    r = SPLITS[split][0](folder, download=False, tasks=tasks)
    entries = entries_of(r)
    got_tasks = [task_of(label) for _, label, _, _ in entries]
    assert got_tasks == sorted(got_tasks) and set(got_tasks) == set(range(tasks))
    for k in range(tasks):
        assert {label for _, label, _, _ in entries if task_of(label) == k} == set(classes_of(k))
    assert len(r) == len(entries) == int(np.sum(labels < 2 * tasks))
    assert r.task_sizes() == [int(np.sum(task_of(labels) == k)) for k in range(tasks)]


def test_split_mnist_two_tasks_keep_only_classes_0_to_3(data):
    split, folder, _ = data
    assert {label for _, label, _, _ in entries_of(SPLITS[split][0](folder, tasks=2))} == {0, 1, 2, 3}


def test_split_mnist_times_fill_one_day_per_task_in_order(data):
    split, folder, _ = data
    r = SPLITS[split][0](folder)
    entries = entries_of(r)
    times = [time for _, _, _, time in entries]
    assert all(type(t) is float for t in times)
    assert times == sorted(times)
    for _, label, _, time in entries:
        k = task_of(label)
        assert k * TASK_SECONDS <= time < (k + 1) * TASK_SECONDS
    start = 0
    for k, n in enumerate(r.task_sizes()):  # the j-th of n_k entries at k * day + j * day / n_k
        np.testing.assert_array_equal(times[start:start + n], k * TASK_SECONDS + np.arange(n) * TASK_SECONDS / n)
        start += n
    assert sorted({int(t // TASK_SECONDS) for t in times}) == list(range(5))  # time:86400 fires once per task


def test_split_mnist_keys_index_the_mnist_split(data):
    split, folder, labels = data
    r, plain = SPLITS[split][0](folder), SPLITS[split][1](folder)
    entries = entries_of(r)
    keys = [key for _, _, key, _ in entries]
    assert all(type(key) is int for key in keys)
    assert sorted(keys) == list(range(len(labels)))  # five tasks: every image, once
    for image, label, key, _ in entries:
        want_image, want_label = plain[key]
        np.testing.assert_array_equal(image, want_image)
        assert image.dtype == np.float32 and image.shape == (784,) and type(label) is int and label == want_label


def test_split_mnist_sample_ids_are_the_keys(data):
    split, folder, _ = data
    r = SPLITS[split][0](folder, tasks=3)
    keys = [key for _, _, key, _ in entries_of(r)]
    assert r.sample_ids(np.arange(len(r))).tolist() == keys
    indexed = list(with_index(shuffle(r, seed=2))())  # with_index names the MNIST image: the key
    assert len(indexed) == len(r) and all(entry[-1] == entry[2] for entry in indexed)


@pytest.mark.parametrize("indices", [[3, 0, 7, 7], [], list(range(9))[::-1]])
def test_split_mnist_gather_and_columns_agree_with_indexing(data, indices):
    split, folder, _ = data
    r = SPLITS[split][0](folder)
    idx = np.array(indices, dtype=np.int64)
    for got, i in zip(r.gather(idx), indices, strict=True):
        want = r[i]
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1:] == want[1:] and [type(v) for v in got[1:]] == [int, int, float]
    images, labels, keys, times = r.gather_columns(idx)
    assert images.shape == (len(indices), 784) and images.dtype == np.float32
    assert (labels.dtype, keys.dtype, times.dtype) == (np.int64, np.int64, np.float64)
    assert keys.tolist() == [r[i][2] for i in indices] and times.tolist() == [r[i][3] for i in indices]


def test_split_mnist_is_deterministic_per_seed_and_another_seed_reorders_within_tasks(data):
    split, folder, _ = data
    make = SPLITS[split][0]

    def order(seed):
        return [(label, key, time) for _, label, key, time in make(folder, seed=seed)()]

    assert order(0) == order(0) == [e[1:] for e in make(folder)()]  # seed 0 is the default
    other = order(1)
    assert other != order(0)
    assert [label // 2 for label, _, _ in other] == [label // 2 for label, _, _ in order(0)]  # same tasks
    assert [time for _, _, time in other] == [time for _, _, time in order(0)]  # same times


def test_split_mnist_fewer_tasks_keep_the_first_tasks_order(data):
    split, folder, _ = data
    five = [e[1:] for e in SPLITS[split][0](folder, seed=3)()]
    two = [e[1:] for e in SPLITS[split][0](folder, seed=3, tasks=2)()]
    assert two == five[:len(two)]


@pytest.mark.parametrize("tasks", [0, 6, -1, 2.0, True, "5", None])
def test_split_mnist_refuses_bad_tasks(tmp_path, tasks):
    for make in (split_mnist.train, split_mnist.test):
        with pytest.raises(ValueError, match=r"tasks must be an int in 1\.\.5 .*got " + repr(tasks).replace(".", r"\.")):
            make(tmp_path, tasks=tasks)


@pytest.mark.parametrize("seed", [-1, 1.5, None, True])
def test_split_mnist_refuses_bad_seeds(tmp_path, seed):
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        split_mnist.train(tmp_path, seed=seed)


def test_split_mnist_shuffle_and_shard_cover_every_entry_once(data):
    split, folder, _ = data
    r = SPLITS[split][0](folder)
    want = sorted(key for _, _, key, _ in r())
    shuffled = shuffle(r, seed=4)
    first = [key for _, _, key, _ in shuffled()]
    assert sorted(first) == want and first != want
    parts = [[key for _, _, key, _ in shard(shuffled, i, 3)()] for i in range(3)]
    assert sorted(sum(parts, [])) == want


@pytest.mark.parametrize("shuffled", [False, True])
def test_split_mnist_resumes_at_every_step(data, shuffled):
    split, folder, _ = data
    make = SPLITS[split][0]
    assert_resumes_at_every_step(lambda: shuffle(make(folder), seed=5) if shuffled else make(folder))


def test_split_mnist_pickles_and_fingerprints_without_its_folder(data, tmp_path_factory):
    split, folder, _ = data
    r = SPLITS[split][0](folder, tasks=4, seed=2)
    copy = pickle.loads(pickle.dumps(r))
    assert [e[1:] for e in copy()] == [e[1:] for e in r()]
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    make_split(elsewhere, split, COUNTS[split])
    found = fingerprint(r)
    assert found == fingerprint(SPLITS[split][0](elsewhere, tasks=4, seed=2))  # same files, another folder
    assert found["pipeline"] == ["split_mnist(tasks=4, seed=2)", f"mnist({split!r})"]
    assert str(folder) not in json.dumps(found)
    assert fingerprint(SPLITS[split][0](folder, tasks=4, seed=3)) != found


def test_split_mnist_repr_is_short(tmp_path):
    assert repr(split_mnist.train(tmp_path, tasks=3, seed=1)).splitlines() == [
        "split_mnist(tasks=3, seed=1)", f"└─ mnist('train', data_dir={str(tmp_path)!r})"]


def test_split_mnist_is_the_builtin_reader_split_mnist():
    assert find_reader("split-mnist") is split_mnist.train
    assert find_test_reader("split-mnist") is split_mnist.test


@pytest.mark.parametrize("entry, want", [(("img", 3, 12, 86400.5), (12, 86400.5)), ([np.int64(4), 7.0], (4, 7.0))])
def test_key_and_time_reads_the_last_two_columns(entry, want):
    got = key_and_time(entry)
    assert got == want and [type(v) for v in got] == [int, float]


@pytest.mark.parametrize("entry", [(1,), (), 5, "ab"])
def test_key_and_time_refuses_entries_without_two_columns(entry):
    with pytest.raises(ValueError, match=r"ends in the columns \(key, time\)"):
        key_and_time(entry)


# -- the real files (../shared/data) ----------------------------------------------


def real_mnist() -> Path:
    folder = DATA / "mnist"
    if not folder.is_dir():
        pytest.skip(f"the real MNIST files are not in {folder} (see issue 3: ../shared/data/mnist)")
    return folder


@pytest.mark.parametrize("split, length", [("train", 60000), ("test", 10000)])
def test_split_mnist_real_files_make_five_days_of_tasks(split, length):
    r = SPLITS[split][0](real_mnist(), download=False)
    sizes = r.task_sizes()
    assert len(sizes) == 5 and sum(sizes) == len(r) == length
    _, labels, keys, times = r.gather_columns(np.arange(len(r)))
    assert sorted(keys.tolist()) == list(range(length))
    assert np.all(np.diff(times) >= 0) and times[0] == 0.0 and times[-1] < 5 * TASK_SECONDS
    assert len({int(t // TASK_SECONDS) for t in times.tolist()}) == 5  # time:86400 fires once per task
    np.testing.assert_array_equal(times // TASK_SECONDS, labels // 2)
    assert sizes == np.bincount(labels // 2, minlength=5).tolist()
