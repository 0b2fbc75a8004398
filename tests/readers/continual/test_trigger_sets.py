"""readers.continual.trigger_sets: a trigger's stored set read back as an indexed reader over the pipeline's source."""
import os
import pickle

import numpy as np
import pytest

import batching
import readers
from readers.continual.store import PipelineStore
from readers.continual.trigger_sets import TriggerSet, trigger_set
from readers.testing import assert_resumes_at_every_step, assert_same

N = 50
IMAGES = np.arange(N * 4, dtype=np.float32).reshape(N, 2, 2)
LABELS = np.arange(N) % 3
KEYS = [[3, 7, 7, 0, 49, 12, 5], [7, 8, 9, 3, 30, 31, 32, 33, 40, 41, 42]]  # trigger 1 overlaps trigger 0
WEIGHTS = [None, np.linspace(0.5, 1.5, len(KEYS[1]))]


@pytest.fixture
def db(store_db):
    """A store (a sqlite file, a PostgreSQL database) with one pipeline (id 1) of two triggers."""
    path = store_db
    with PipelineStore(path) as store:
        p = store.register_pipeline({"strategy": "replay"})
        for t in (0, 1):
            store.add_trigger(p, t, KEYS[t], WEIGHTS[t], position=10 * (t + 1))
    return path


def source():
    return readers.from_arrays(IMAGES, LABELS)


def test_entries_are_the_sources_entries_at_the_keys_in_order(db):
    r = trigger_set(db, 1, 0, source=source())
    assert len(r) == len(KEYS[0])
    for got, key in zip(r(), KEYS[0]):
        assert_same(got, (IMAGES[key], LABELS[key]))
    assert_same(r[-3], (IMAGES[49], LABELS[49]))
    assert_same(list(r()), [source()[k] for k in KEYS[0]])


def test_sets_of_two_triggers_overlap_and_each_reads_its_own(db):
    got = [[int(label) for _, label, _ in trigger_set(db, 1, t, source=readers.with_index(source()))()] for t in (0, 1)]
    ids = [[int(i) for _, _, i in trigger_set(db, 1, t, source=readers.with_index(source()))()] for t in (0, 1)]
    assert ids == KEYS and got == [LABELS[k].tolist() for k in KEYS]
    assert set(ids[0]) & set(ids[1]) == {3, 7}


@pytest.mark.parametrize("make, entry", [
    (lambda: readers.from_arrays(IMAGES, LABELS), lambda k, w: (IMAGES[k], LABELS[k], w)),
    (lambda: readers.np_array(LABELS), lambda k, w: (LABELS[k], w)),
    (lambda: readers.from_sequence([{"label": int(x)} for x in LABELS]), lambda k, w: {"label": int(LABELS[k]),
                                                                                        "weight": w}),
])
def test_weights_are_a_last_column_when_asked_for(db, make, entry):
    r = trigger_set(db, 1, 1, source=make(), weights=True)
    weights = WEIGHTS[1].astype(np.float32)
    want = [entry(k, w) for k, w in zip(KEYS[1], weights)]
    assert_same(list(r()), want)
    assert_same(r[2], want[2])
    assert_same(trigger_set(db, 1, 0, source=make(), weights=True)[0], entry(KEYS[0][0], np.float32(1.0)))


@pytest.mark.parametrize("weights", [False, True])
def test_collated_batches_are_gathered_by_columns_and_match_the_entries(db, weights):
    r = trigger_set(db, 1, 1, source=source(), weights=weights)
    batches = list(batching.collated(batching.batch(r, 4))())
    assert [len(b[0]) for b in batches] == [4, 4, 3]
    images = np.concatenate([b[0] for b in batches])
    assert_same(images, IMAGES[KEYS[1]])
    if weights:
        assert_same(np.concatenate([b[2] for b in batches]), WEIGHTS[1].astype(np.float32))
    columns = r.gather_columns(np.array([1, 0]))
    assert len(columns) == 2 + weights and columns[1].tolist() == LABELS[[KEYS[1][1], KEYS[1][0]]].tolist()


def test_a_source_without_columns_is_gathered_entry_by_entry(db):
    r = trigger_set(db, 1, 0, source=readers.from_sequence("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
                    weights=True)
    assert r.gather_columns(np.arange(2)) is None
    assert next(iter(batching.batch(r, 3)())) == [("d", 1.0), ("h", 1.0), ("h", 1.0)]


def test_sample_ids_are_the_sources_through_the_keys(db):
    r = trigger_set(db, 1, 1, source=readers.skip(source(), 2))  # the source's IDs are its own source's
    assert r.sample_ids(np.array([0, 4])).tolist() == [KEYS[1][0] + 2, KEYS[1][4] + 2]


@pytest.mark.parametrize("make", [
    lambda r: readers.shuffle(r, seed=3),
    lambda r: readers.shard(readers.shuffle(r, seed=3), 1, 3),
    lambda r: batching.collated(batching.batch(readers.shuffle(r, seed=0), 3)),
])
def test_a_trigger_set_shuffles_shards_and_resumes_at_every_step(db, make):
    states = assert_resumes_at_every_step(lambda: make(trigger_set(db, 1, 1, source=source(), weights=True)))
    assert len(states) > 3


def test_the_shards_of_a_shuffled_set_read_it_exactly_once(db):
    r = readers.with_index(trigger_set(db, 1, 1, source=source()))
    parts = [[int(i) for *_, i in readers.shard(readers.shuffle(r, seed=1), k, 3)()] for k in range(3)]
    assert sorted(i for part in parts for i in part) == sorted(KEYS[1]) and all(len(p) >= 3 for p in parts)


def test_a_trigger_set_pickles_with_its_keys_read_once(db):
    r = trigger_set(db, 1, 1, source=source(), weights=True)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)  # read at creation: the store is no longer needed
    copy = pickle.loads(pickle.dumps(r))
    assert isinstance(copy, TriggerSet) and copy is not r
    assert_same(list(copy()), list(r()))


def test_fingerprints_tell_sets_apart_and_the_same_set_alike(db):
    a, b = (readers.fingerprint(trigger_set(db, 1, t, source=source())) for t in (0, 1))
    assert a == readers.fingerprint(trigger_set(db, 1, 0, source=source()))
    # the keys are in the set's identity (a fingerprint asks only sources for digests of their data)
    assert a["pipeline"][0].startswith("trigger_set(pipeline=1, trigger=0, 7 keys ") and a["pipeline"] != b["pipeline"]
    assert readers.identity.differences(a, b)[0].startswith("pipeline")
    weighted = readers.fingerprint(trigger_set(db, 1, 1, source=source(), weights=True))
    assert weighted["pipeline"][0] != b["pipeline"][0]
    assert trigger_set(db, 1, 0, source=source()).digest() != trigger_set(db, 1, 1, source=source()).digest()
    other = readers.fingerprint(trigger_set(db, 1, 0, source=readers.from_arrays(IMAGES + 1, LABELS)))
    assert other["pipeline"] == a["pipeline"] and other["content"] != a["content"]  # the source's data


def test_a_store_object_serves_as_well_as_its_path(db):
    with PipelineStore(db) as store:
        r = trigger_set(store, 1, 0, source=source())
    assert_same(list(r()), list(trigger_set(db, 1, 0, source=source())()))
    assert repr(r).splitlines()[0] == "trigger_set(pipeline=1, trigger=0, 7 keys)"


def test_errors_name_what_is_missing_and_what_exists(db, tmp_path):
    with pytest.raises(LookupError, match=r"no pipeline 5 in \S+ \(its pipelines: 1\)"):
        trigger_set(db, 5, 0, source=source())
    with pytest.raises(LookupError, match=r"pipeline 1 has no trigger 2 in .* \(its triggers: 0-1\)"):
        trigger_set(db, 1, 2, source=source())
    with pytest.raises(ValueError, match=r"trigger 0 of pipeline 1 holds key 49, but the source from_arrays\(40 rows"
                                         r".*\) has 40 entries: give the reader the stream's keys name"):
        trigger_set(db, 1, 0, source=readers.from_arrays(IMAGES[:40], LABELS[:40]))
    with pytest.raises(TypeError, match="source must be an indexed reader .* got .*<lambda>"):
        trigger_set(db, 1, 0, source=lambda: iter(IMAGES))
    with pytest.raises(FileNotFoundError, match="no pipeline store at"):
        trigger_set(str(tmp_path / "elsewhere.db"), 1, 0, source=source())
    assert not (tmp_path / "elsewhere.db").exists()
    with pytest.raises(TypeError, match="db must be a pipeline store's path or a PipelineStore, got dict"):
        trigger_set({}, 1, 0, source=source())


def test_a_split_mnist_set_reads_back_through_the_reader_its_keys_name(tmp_path):
    from readers.sources import split_mnist
    from readers.sources.idx import write_idx
    from train.continual.strategies import GDumb

    labels = np.arange(40, dtype=np.uint8) % 10
    write_idx(str(tmp_path / "train-images-idx3-ubyte"), np.zeros((40, 28, 28), np.uint8))
    write_idx(str(tmp_path / "train-labels-idx1-ubyte"), labels)
    stream = split_mnist.train(str(tmp_path), tasks=2)
    _, got_labels, keys, _ = stream.gather_columns(np.arange(len(stream)))
    strategy = GDumb(6, seed=0)
    strategy.inform(keys, got_labels)
    chosen, weights = strategy.select()
    with PipelineStore(tmp_path / "runs.db") as store:
        pid = store.register_pipeline({"strategy": strategy.spec})
        store.add_trigger(pid, 0, chosen, weights, position=len(stream))
        back = trigger_set(store, pid, 0, source=stream.by_key())
        assert [int(e[1]) for e in back()] == labels[chosen].tolist()
