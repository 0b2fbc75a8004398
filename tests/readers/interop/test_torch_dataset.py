"""readers.interop.torch_dataset: a reader as a torch IterableDataset, under DataLoader workers."""
import pickle
import subprocess
import sys

import numpy as np
import pytest

import readers
from readers.interop.torch_dataset import torch_dataset

torch = pytest.importorskip("torch")
DataLoader = torch.utils.data.DataLoader

N = 103  # not a multiple of 2 or 4, so shards are uneven


def pipeline(equalize=None, seed=0):
    return readers.shard(readers.shuffle(readers.from_arrays(np.arange(N)), seed=seed), equalize=equalize)


def seen(loader):
    """The (id, weight) of every entry a loader yields, in order; weight 1.0 when the entries have none."""
    out = []
    for batch in loader:
        ids = batch[0].tolist()
        weights = batch[1].tolist() if len(batch) > 1 else [1.0] * len(ids)
        out += zip(ids, weights)
    return out


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("equalize", [None, "pad", "drop"])
def test_torch_dataset_gives_every_sample_once_across_workers(workers, equalize):
    pairs = seen(DataLoader(torch_dataset(pipeline(equalize)), batch_size=8, num_workers=workers))
    real = sorted(i for i, w in pairs if w == 1.0)
    total = max(1, workers)
    if equalize == "drop":
        assert len(real) == len(set(real)) == N // total * total
        assert set(real) <= set(range(N))
    else:
        assert real == list(range(N))
    pads = [w for _, w in pairs if w != 1.0]
    assert pads == ([0.0] * (-N % total) if equalize == "pad" else [])


@pytest.mark.parametrize("workers", [0, 2])
def test_torch_dataset_set_epoch_picks_the_pass_reproducibly(workers):
    dataset = torch_dataset(pipeline())
    loader = DataLoader(dataset, batch_size=8, num_workers=workers)
    orders = {}
    for epoch in (0, 1, 0, 1):
        dataset.set_epoch(epoch)
        order = [i for i, _ in seen(loader)]
        assert sorted(order) == list(range(N))
        assert orders.setdefault(epoch, order) == order
    assert orders[0] != orders[1]


def test_torch_dataset_set_epoch_is_the_readers_pass():
    dataset = torch_dataset(pipeline())
    dataset.set_epoch(3)
    reference = pipeline()
    reference.set_pass(3)
    assert [int(i) for (i,) in dataset] == [int(i) for (i,) in reference()]


@pytest.mark.parametrize("workers", [0, 2])
def test_torch_dataset_without_set_epoch_advances_the_pass_in_each_worker(workers):
    # persistent workers keep their copy of the dataset, so its pass count goes on
    loader = DataLoader(torch_dataset(pipeline()), batch_size=8, num_workers=workers,
                        persistent_workers=workers > 0)
    first, second = [i for i, _ in seen(loader)], [i for i, _ in seen(loader)]
    assert sorted(first) == sorted(second) == list(range(N))
    assert first != second
    fresh = DataLoader(torch_dataset(pipeline()), batch_size=8, num_workers=workers)
    assert [i for i, _ in seen(fresh)] == first


def test_torch_dataset_warns_that_set_epoch_misses_persistent_workers(monkeypatch):
    """Review of issue 4: set_epoch(0), (0), (5), (5) ran passes 0, 1, 2, 3 in persistent workers, silently.

    A persistent worker is a copy iterated again inside a DataLoader worker; the
    warning is raised there, where pytest cannot catch it, so this plays the worker.
    """
    from readers.interop import torch_dataset as interop

    monkeypatch.setattr(interop, "_in_torch_worker", lambda: True)
    dataset = torch_dataset(readers.shard(readers.shuffle(readers.from_arrays(np.arange(N)), seed=0)))
    dataset.set_epoch(0)
    list(dataset)
    with pytest.warns(RuntimeWarning, match=r"set_epoch\(\) does not reach persistent DataLoader workers"):
        iter(dataset)


def first_error(loader):
    """The exception the loader's first batch raises, or None."""
    it = iter(loader)
    try:
        next(it)
    except Exception as exc:
        # Dropping the traceback lets `it` go by reference counting, which shuts its workers
        # down at once; left to the cyclic collector, torch waits 5 s for each worker.
        exc.__traceback__ = None
        return exc
    return None


def test_torch_dataset_without_a_shard_stage_refuses_several_workers():
    loader = DataLoader(torch_dataset(readers.shuffle(readers.from_arrays(np.arange(N)), seed=0)),
                        batch_size=8, num_workers=2)
    error = first_error(loader)
    assert isinstance(error, ValueError)
    assert ("torch_dataset: this job has 2 data workers (2 per process x 1 process) and the pipeline "
            "'shuffle(buf_size=None (global), seed=0)' does not split its passes among these 2 workers (it needs a "
            "shard stage that follows the workers), so samples would be seen several times per epoch; add "
            "readers.shard(...)") in str(error)


def test_torch_dataset_refuses_an_explicit_shard_too_coarse_for_the_workers():
    """Review of issue 4: shard(r, 0, 2) passed the guard, and both DataLoader workers read shard 0 whole."""
    pipeline = readers.shard(readers.shuffle(readers.from_arrays(np.arange(N)), seed=0), 0, 2)
    error = first_error(DataLoader(torch_dataset(pipeline), batch_size=8, num_workers=2))
    assert isinstance(error, ValueError) and "does not split its passes among these 2 workers" in str(error)


def test_torch_dataset_without_a_shard_stage_refuses_a_world_size_above_one(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"2 data workers \(1 per process x 2 processes\).*readers\.shard"):
        torch_dataset(readers.from_arrays(np.arange(N)))


def test_torch_dataset_sharded_elsewhere_skips_the_check(monkeypatch):
    def my_half():  # a reader that splits the data itself
        return ((i,) for i in range(torch.utils.data.get_worker_info().id, N, 2))

    pairs = seen(DataLoader(torch_dataset(my_half, sharded_elsewhere=True), batch_size=8, num_workers=2))
    assert sorted(i for i, _ in pairs) == list(range(N))
    monkeypatch.setenv("WORLD_SIZE", "2")
    torch_dataset(my_half, sharded_elsewhere=True)  # no error


def test_torch_dataset_single_worker_needs_no_shard():
    loader = DataLoader(torch_dataset(readers.from_arrays(np.arange(N))), batch_size=8, num_workers=1)
    assert [i for i, _ in seen(loader)] == list(range(N))


def test_torch_dataset_pickles_and_runs_under_spawn():
    dataset = torch_dataset(pipeline("pad"))
    dataset.set_epoch(2)
    copy = pickle.loads(pickle.dumps(dataset))
    assert type(copy) is type(dataset) and isinstance(copy, torch.utils.data.IterableDataset)
    assert [(int(i), w) for i, w in copy] == [(int(i), w) for i, w in dataset]
    dataset.set_epoch(2)
    loader = DataLoader(dataset, batch_size=8, num_workers=2, multiprocessing_context="spawn")
    pairs = seen(loader)
    assert sorted(i for i, w in pairs if w == 1.0) == list(range(N))
    dataset.set_epoch(2)
    assert sorted(pairs) == sorted(seen(DataLoader(dataset, batch_size=8, num_workers=2)))


def test_torch_dataset_repr_shows_the_pipeline():
    assert repr(torch_dataset(pipeline("pad"))).splitlines() == [
        "torch_dataset()",
        "└─ shard(global worker, equalize='pad')",
        "   └─ shuffle(buf_size=None (global), seed=0)",
        f"      └─ from_arrays({N} rows: int64)",
    ]


@pytest.mark.parametrize("bad", [-1, 1.0, "1", None])
def test_torch_dataset_set_epoch_rejects_a_bad_epoch(bad):
    with pytest.raises(ValueError, match="set_epoch: epoch must be an int >= 0"):
        torch_dataset(pipeline()).set_epoch(bad)


@pytest.mark.parametrize(("reader", "kwargs", "error"), [
    ([1, 2], {}, TypeError),
    (lambda: iter([1]), {"sharded_elsewhere": "yes"}, TypeError),
])
def test_torch_dataset_rejects_bad_arguments(reader, kwargs, error):
    with pytest.raises(error):
        torch_dataset(reader, **kwargs)


def test_importing_readers_interop_does_not_import_torch():
    code = "import sys, readers, readers.interop.torch_dataset; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60, check=False).returncode == 0


@pytest.mark.parametrize("over", ["shard", "prefetch"])
def test_torch_dataset_pad_weights_collate_as_float32_like_the_images(over):
    """Issue 27, item 9: the pad weight came out float64 beside float32 images."""
    images = np.arange(2 * N, dtype=np.float32).reshape(N, 2)
    padded = readers.shard(readers.from_arrays(images, np.arange(N)), 3, 4, equalize="pad")
    source = readers.prefetch(padded, 2) if over == "prefetch" else padded
    batches = list(DataLoader(torch_dataset(source, sharded_elsewhere=True), batch_size=8))
    assert {tuple(t.dtype for t in batch) for batch in batches} == {(torch.float32, torch.int64, torch.float32)}
    weights = torch.cat([batch[2] for batch in batches]).tolist()
    assert len(weights) == 26 and weights[-1] == 0.0 and weights.count(1.0) == 25  # shard 3 of 103 = 4 * 26 - 1: one pad


def test_torch_dataset_pad_weights_of_dict_entries_are_float32_and_other_entries_are_untouched():
    rows = [{"x": np.float32(i)} for i in range(5)]
    padded = readers.shard(readers.from_sequence(rows), 1, 2, equalize="pad")
    batch = next(iter(DataLoader(torch_dataset(padded, sharded_elsewhere=True), batch_size=8)))
    assert batch["weight"].dtype == torch.float32 and batch["weight"].tolist() == [1.0, 1.0, 0.0]
    plain = list(torch_dataset(readers.from_sequence([(1.0, 2.0)])))  # no padding shard: entries as they are
    assert plain == [(1.0, 2.0)] and type(plain[0][1]) is float
