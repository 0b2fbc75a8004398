"""readers.caching.cached: cached computes a map once per sample, across shuffled passes, nodes and processes."""
from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import json
import multiprocessing
import os
import pickle
import re
import sqlite3
import warnings
import zlib

import numpy as np
import pytest

import batching
import readers
from readers.caching.database import database_bytes, open_database
from readers.caching.dense import DenseFile
from readers.caching.memory import MemoryTier
from readers.testing import assert_resumes_at_every_step, assert_same
from tests.conftest import HANG
from tests.helpers import cache_nodes as nodes
from tests.helpers.cache_jobs import Gate
from tests.helpers.child_processes import exit_codes
from tests.helpers.layouts import as_rank
from tests.helpers.toys import add_one, tag_draw

N = 60


@pytest.fixture(autouse=True)
def _no_calls_yet():
    nodes.COMPUTED.clear()


def calls() -> collections.Counter:
    """How many times ``nodes.feature`` computed each sample in this process."""
    return collections.Counter(nodes.COMPUTED)


def plain(n: int = N, seed: int = 0):
    """The uncached pipeline: what a cached one must give, pass by pass."""
    return readers.shuffle(readers.map_readers(nodes.features_of, nodes.source(n)), seed=seed)


def fresh_count(directory, n: int = N, func=nodes.feature) -> dict:
    """stats() of a whole pass of a new cached reader of ``func`` over ``directory``: what the folder holds."""
    r = readers.cached(nodes.source(n), func, directory=directory)
    assert_same(list(r()), list(readers.map_readers(nodes.features_of, nodes.source(n))()))
    return r.stats()


def hit_rate(before: dict, after: dict) -> float:
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    return hits / (hits + misses)


# -- once per sample -------------------------------------------------------------------


@pytest.mark.parametrize("on_disk", [False, True])
def test_cached_computes_each_sample_once_over_shuffled_passes(on_disk, tmp_path):
    r = nodes.shuffled(tmp_path if on_disk else None, N, seed=3)
    want = plain(seed=3)
    passes = [list(r()) for _ in range(3)]
    for got in passes:
        assert_same(got, list(want()))
    assert calls() == {i: 1 for i in range(N)}
    assert [int(v[0]) for v in passes[0]] != [int(v[0]) for v in passes[1]]


@pytest.mark.parametrize("world, local_world, on_disk", [(2, 1, False), (4, 1, True), (4, 2, True)])
def test_cached_under_node_shuffle_computes_each_sample_once_per_job(world, local_world, on_disk, tmp_path):
    # one reader per process; the processes of a node share its folder (or, alone on it, their memory)
    def folder(rank):
        return tmp_path / f"node{rank // local_world}" if on_disk else None

    cached = [readers.node_shuffle(readers.cached(nodes.source(N), nodes.feature, directory=folder(rank)), seed=5)
              for rank in range(world)]
    want = readers.node_shuffle(readers.map_readers(nodes.features_of, nodes.source(N)), seed=5)
    for p in range(3):
        for rank in range(world):
            as_rank(rank, world, local_world)
            want.set_pass(p)
            assert_same(list(cached[rank]()), list(want()), f"pass {p}, rank {rank}")
    assert calls() == {i: 1 for i in range(N)}


def test_cached_hit_rate_per_node_node_shuffle_against_global_shuffle(tmp_path):
    """The seed's case: 4 nodes, each caching in its own folder (memory tier off) that holds a quarter of the
    data. node_shuffle keeps a node on its quarter, so from the second pass on every entry is a hit; a global
    shuffle deals each node a new random quarter each pass, of which the folder holds about a quarter."""
    n, passes, rates = 2000, 4, {}
    quarter = readers.cached(nodes.source(n // 4), nodes.features_of, directory=tmp_path / "quarter",
                             disk_bytes=1 << 40)  # (a bound, so stored as the bounded folders store them)
    list(quarter())
    with contextlib.closing(open_database(tmp_path / "quarter", create=False)) as db:
        limit = int(database_bytes(db) * 1.1)  # the pages a quarter of the entries take, and some room
    for how in ("global", "node"):
        caches = [readers.cached(nodes.source(n), nodes.features_of, directory=tmp_path / how / f"node{node}",
                                 memory_bytes=0, disk_bytes=limit) for node in range(4)]
        pipes = [readers.node_shuffle(c, seed=0) if how == "node" else readers.shard(readers.shuffle(c, seed=0),
                                                                                      node, 4)
                 for node, c in enumerate(caches)]
        per_pass = []
        for _ in range(passes):
            before = [c.stats() for c in caches]
            for node, pipe in enumerate(pipes):
                as_rank(node, 4, 1)  # node_shuffle's node; the global shuffle's shard is given
                assert len(list(pipe())) == n // 4
            per_pass.append([hit_rate(b, c.stats()) for b, c in zip(before, caches)])
        assert per_pass[0] == [0.0] * 4
        rates[how] = per_pass[1:]
    assert rates["node"] == [[1.0] * 4] * (passes - 1)
    assert all(0.1 <= rate <= 0.4 for of_pass in rates["global"] for rate in of_pass), rates["global"]
    print(f"\nnode_shuffle hit rate from pass 2: {np.mean(rates['node']):.1%} per node; global shuffle: "
          f"{np.mean(rates['global']):.1%} (each node and pass {np.min(rates['global']):.1%} to "
          f"{np.max(rates['global']):.1%}; {n} samples, each node's folder holding a quarter)")


# -- processes -------------------------------------------------------------------------


def test_cached_two_processes_share_one_folder_each_entry_computed_once_outside_the_race_window(tmp_path,
                                                                                                no_leaks):
    # different seeds: each process meets entries the other computed long before, which must be hits
    n, ctx = 300, multiprocessing.get_context("spawn")
    gate, outs = Gate(ctx, 2), [str(tmp_path / f"out{seed}.json") for seed in (0, 1)]
    jobs = [ctx.Process(target=nodes.share_folder, args=(str(tmp_path / "cache"), n, seed, 2, gate, out))
            for seed, out in zip((0, 1), outs)]
    assert exit_codes(jobs, 3 * HANG, gate) == [0, 0]
    computed = collections.Counter()
    for seed, out in zip((0, 1), outs):
        with open(out) as f:
            found = json.load(f)
        for p, seen in enumerate(found["seen"]):
            want = plain(n, seed)
            want.set_pass(p)
            assert seen == [int(v[0]) for v in want()]
        computed.update(found["computed"])
    assert sorted(computed) == list(range(n)) and max(computed.values()) <= 2
    # Two processes both compute an entry only within the race window of readers.caching.cached.cached's doc: when
    # one asks for it before the other's write of it is committed (DiskStore's interval, 0.5 s) and looked for
    # again (every 0.25 s and every 16 misses of slow_feature's 10 ms). Here that is about a third of the entries,
    # fewer on a loaded machine (each miss takes longer); looking only every 256 misses, as before the second
    # look, made it over three quarters.
    twice = sorted(i for i, times in computed.items() if times == 2)
    assert len(twice) < n // 2, f"{len(twice)} of {n} entries computed by both processes: {twice}"
    stats = fresh_count(tmp_path / "cache", n, nodes.slow_feature)  # a third process: everything is on disk, intact
    assert (stats["misses"], stats["disk_hits"], stats["corrupt"]) == (0, n, 0)


@pytest.mark.parametrize("mode, start_method", [("thread", None), ("process", "fork"), ("process", "spawn")])
def test_cached_under_prefetch_workers_writes_everything_by_the_end_of_the_pass(mode, start_method, tmp_path,
                                                                               no_leaks):
    r = readers.prefetch(nodes.shuffled(tmp_path, N, 0), 2, mode=mode, start_method=start_method)
    want = plain()
    for p in range(2):
        assert_same(list(r()), list(want()), f"pass {p}")
        stats = fresh_count(tmp_path)
        assert (stats["misses"], stats["disk_hits"]) == (0, N)


def test_cached_processes_that_open_one_new_folder_at_once_all_work(tmp_path, no_leaks):
    """As the processes of a node starting together do: the first to open the folder makes the database."""
    ctx, failed = multiprocessing.get_context("fork"), []
    for trial in range(25):
        gate = Gate(ctx, 4)
        jobs = [ctx.Process(target=nodes.pass_at_once, args=(str(tmp_path / str(trial)), 20, gate))
                for _ in range(4)]
        failed += [f"trial {trial}: exit code {code}" for code in exit_codes(jobs, HANG, gate) if code != 0]
    assert not failed, f"processes that opened a new cache folder at once failed (errors on stderr): {failed}"


def test_cached_torch_dataloader_workers_give_the_uncached_entries(tmp_path):
    torch = pytest.importorskip("torch")
    pipeline = readers.shard(nodes.shuffled(tmp_path, N, 0))
    loader = torch.utils.data.DataLoader(readers.torch_dataset(pipeline), batch_size=8, num_workers=2)
    for _ in range(2):
        rows = sorted(tuple(row) for batch in loader for row in batch.tolist())
        assert rows == sorted(tuple(v.tolist()) for v in plain()())
        assert fresh_count(tmp_path)["misses"] == 0


# -- what is on disk, resuming, streams, arguments --------------------------------------


@pytest.mark.parametrize("read", [None, 0, 1, 25])
def test_cached_pass_end_writes_what_it_computed_at_once(read, tmp_path):
    """A pass that runs out (read=None) or is closed after ``read`` entries leaves all it computed on disk."""
    cache = readers.cached(nodes.source(N), nodes.feature, directory=tmp_path)
    it = readers.shuffle(cache, seed=0)()
    list(itertools.islice(it, read))
    if read is not None:
        it.close()
    computed = len(nodes.COMPUTED)
    assert computed == (N if read is None else read)
    stats = fresh_count(tmp_path)  # no wait: the pass's end wrote them
    assert (stats["disk_hits"], stats["misses"]) == (computed, N - computed)


def scaled(k):
    def times(entry):
        return entry[0] * k
    return times


def multiply(entry, k):
    return entry[0] * k


def code_pair():
    return lambda entry: entry[0] * 2, lambda entry: entry[0] * 3  # one name, other code


@pytest.mark.parametrize("make", [
    lambda: (code_pair()[0], code_pair()[1], {}, {}),
    lambda: (scaled(2), scaled(3), {}, {}),
    lambda: (functools.partial(multiply, k=2), functools.partial(multiply, k=3), {}, {}),
    lambda: (nodes.features_of, nodes.features_of, {}, {"version": "2"}),
    lambda: (nodes.features_of, nodes.features_of, {"version": "1"}, {"version": "2"}),
], ids=["code", "closure", "partial", "version added", "version changed"])
def test_cached_a_changed_function_misses_and_the_same_one_hits(make, tmp_path):
    func, changed, options, changed_options = make()
    for f, opts, hit in [(func, options, False), (make()[0], options, True), (changed, changed_options, False)]:
        r = readers.cached(nodes.source(N), f, directory=tmp_path, **opts)
        assert_same(list(r()), list(readers.map_readers(f, nodes.source(N))()))
        assert (r.stats()["disk_hits"], r.stats()["misses"]) == ((N, 0) if hit else (0, N))


def test_cached_same_function_over_other_data_of_the_same_shape_misses(tmp_path):
    for data, hit in [(np.arange(N), False), (np.arange(N) + 1, False), (np.arange(N) + 1, True)]:
        r = readers.cached(readers.from_arrays(data), nodes.features_of, directory=tmp_path)
        assert_same(list(r()), list(readers.map_readers(nodes.features_of, readers.from_arrays(data))()))
        assert (r.stats()["disk_hits"], r.stats()["misses"]) == ((N, 0) if hit else (0, N))


@pytest.mark.parametrize("batched", [False, True])
def test_cached_resumes_at_every_step_through_the_cache(batched, tmp_path):
    def make():
        shuffled = nodes.shuffled(tmp_path, 30, 0)
        return batching.collated(batching.batch(shuffled, 4)) if batched else shuffled

    assert_resumes_at_every_step(make)
    assert calls() == {i: 1 for i in range(30)}  # the fresh readers of every resume read the folder


def records():
    for i in range(N):
        yield {"name": f"img{i}.jpg", "pixels": np.full(2, i)}


def pixel_sum(record):
    return int(record["pixels"].sum())


@pytest.mark.parametrize("on_disk", [False, True])
def test_cached_stream_keyed_by_its_entries_hits_on_the_second_pass(on_disk, tmp_path):
    def make():
        return readers.cached(records, pixel_sum, key=lambda r: r["name"], directory=tmp_path if on_disk else None)

    r, want = make(), [2 * i for i in range(N)]
    assert list(r()) == list(r()) == want
    assert (r.stats()["misses"], r.stats()["hits"]) == (N, N)
    if on_disk:
        again = make()
        assert list(again()) == want
        assert (again.stats()["misses"], again.stats()["disk_hits"]) == (0, N)


@pytest.mark.parametrize("args, options, error, match", [
    ((records, pixel_sum), {}, TypeError, r"records is a stream.*give key="),
    ((nodes.source(3), 3), {}, TypeError, r"func must be callable, got int 3"),
    ((nodes.source(3), abs), {"key": "name"}, TypeError, r"key must be a function of an entry, got str 'name'"),
    ((nodes.source(3), abs), {"version": 2}, TypeError, r"version must be a string, got int 2"),
    ((nodes.source(3), abs), {"disk_bytes": 1 << 20}, ValueError, r"disk_bytes .* needs directory="),
    ((nodes.source(3), abs), {"memory_bytes": -1}, ValueError, r"memory_bytes must be an int >= 0, got -1"),
    ((nodes.source(3), abs), {"directory": 3}, TypeError, r"directory must be a folder's path, got int 3"),
])
def test_cached_refuses_bad_arguments_saying_what_to_give(args, options, error, match):
    with pytest.raises(error, match=match):
        readers.cached(*args, **options)


@pytest.mark.parametrize("make, name", [(lambda e: object(), "object"), (lambda e: (e, {1, 2}), "set")])
def test_cached_disk_refuses_values_it_cannot_store_naming_their_type(make, name, tmp_path):
    with pytest.raises(TypeError, match=rf"of type {name}, which cannot be stored on disk"):
        list(readers.cached(nodes.source(3), make, directory=tmp_path)())
    values = list(readers.cached(nodes.source(3), make)())  # memory only: any value
    assert len(values) == 3


# -- entries, stats, damage, copies, identity -------------------------------------------


@pytest.mark.parametrize("options", [{}, {"memory_bytes": 0}], ids=["memory", "disk"])
def test_cached_entries_are_read_only_from_every_tier(options, tmp_path):
    r = readers.cached(nodes.source(4), nodes.feature, directory=tmp_path, **options)
    for _ in range(2):
        for value in r():
            with pytest.raises(ValueError, match="read-only"):
                value[0] = -1
    assert_same(list(r()), list(readers.map_readers(nodes.features_of, nodes.source(4))()))


def test_cached_stats_after_two_passes(tmp_path):
    budget = 10 * 200  # about 10 of the N entries
    r = readers.cached(nodes.source(N), nodes.slow_feature, directory=tmp_path, memory_bytes=budget)
    list(r()), list(r())
    s = r.stats()
    assert set(s) == {"hits", "memory_hits", "disk_hits", "misses", "corrupt", "compute_s", "hit_rate",
                      "memory_entries", "memory_bytes", "memory_budget", "memory_evictions", "disk_evictions",
                      "evictions", "disk_bytes_written", "time_saved_s"}
    assert (s["hits"], s["misses"], s["hit_rate"], s["corrupt"]) == (N, N, 0.5, 0)
    assert s["memory_hits"] + s["disk_hits"] == N and s["disk_hits"] > 0
    assert 0 < s["memory_bytes"] <= s["memory_budget"] == budget
    assert s["memory_evictions"] > 0 and s["evictions"] >= s["memory_evictions"]
    assert s["time_saved_s"] > 0 and s["compute_s"] >= N * nodes.SLEEP
    assert s["disk_bytes_written"] > 0


def test_cached_memory_tier_off_still_hits_from_disk(tmp_path):
    r = readers.cached(nodes.source(N), nodes.feature, directory=tmp_path, memory_bytes=0)
    list(r()), list(r())
    s = r.stats()
    assert (s["misses"], s["disk_hits"], s["memory_hits"], s["memory_entries"]) == (N, N, 0, 0)
    assert calls() == {i: 1 for i in range(N)}


def labelled(entry):
    return {"id": int(entry[0]), "features": np.full(3, int(entry[0]))}  # a dict: stored as a blob


def damage(directory, how):
    """Damage the stored blobs of the first and last sample in the folder's database."""
    with contextlib.closing(sqlite3.connect(os.path.join(directory, "cache.sqlite3"))) as db, db:
        rows = db.execute("SELECT k, v, crc FROM entries WHERE v IS NOT NULL ORDER BY k").fetchall()
        for k, v, crc in (rows[0], rows[-1]):
            # flipped: the checksum fails; cut short with a matching checksum: the codec finds it out
            v, crc = (v[:-1] + bytes([v[-1] ^ 0xFF]), crc) if how == "flipped" else (v[:-9], zlib.crc32(v[:-9]))
            db.execute("UPDATE entries SET v = ?, crc = ? WHERE k = ?", (v, crc, k))


@pytest.mark.parametrize("how", ["flipped", "cut short"])
def test_cached_damaged_entry_warns_once_and_is_computed_again(how, tmp_path):
    want = list(readers.map_readers(labelled, nodes.source(600))())
    assert_same(list(readers.cached(nodes.source(600), labelled, directory=tmp_path)()), want)
    damage(tmp_path, how)
    r = readers.cached(nodes.source(600), labelled, directory=tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_same(list(r()), want)
    assert [w.category for w in caught] == [RuntimeWarning]
    assert "damaged" in str(caught[0].message)
    assert (r.stats()["corrupt"], r.stats()["misses"], r.stats()["disk_hits"]) == (2, 2, 598)
    again = readers.cached(nodes.source(600), labelled, directory=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_same(list(again()), want)
    assert (again.stats()["corrupt"], again.stats()["misses"], again.stats()["disk_hits"]) == (0, 0, 600)


def test_cached_pickled_copy_starts_empty_and_hits_from_disk(tmp_path):
    r = readers.cached(nodes.source(N), nodes.feature, directory=tmp_path)
    list(r())
    copy = pickle.loads(pickle.dumps(r))
    s = copy.stats()
    assert (s["hits"], s["misses"], s["memory_entries"], s["memory_bytes"]) == (0, 0, 0, 0)
    assert_same(list(copy()), list(readers.map_readers(nodes.features_of, nodes.source(N))()))
    assert (copy.stats()["disk_hits"], copy.stats()["misses"]) == (N, 0)
    assert len(nodes.COMPUTED) == N


def test_cached_fingerprint_shows_function_and_version_never_the_folder(tmp_path):
    def pipeline(folder):
        return readers.shuffle(readers.cached(nodes.source(N), nodes.feature, directory=folder, version="3"), seed=0)

    found = readers.fingerprint(pipeline(tmp_path / "a"))
    assert found == readers.fingerprint(pipeline(tmp_path / "b"))
    assert re.fullmatch(r"cached\(feature [0-9a-f]+, version='3'\)", found["pipeline"][1])
    assert str(tmp_path) not in json.dumps(found) and "directory" not in json.dumps(found)


def test_cached_refuses_a_reader_that_draws_anew_every_pass():
    """A cache by sample ID would keep the first pass's draws for good (issue 26)."""
    noisy = readers.random_map(tag_draw, readers.from_sequence(range(4)), seed=0)
    with pytest.raises(ValueError, match=r"random_map\(tag_draw, seed=0\) below it draws its entries anew"):
        readers.cached(noisy, add_one)
    assert len(list(readers.random_map(tag_draw, readers.cached(readers.from_sequence(range(4)), add_one), seed=0)()))


# -- the hit paths (issue 32, rows 1 and 2) ---------------------------------------------------------------------


def test_cached_memory_hits_of_a_shuffled_pass_are_looked_up_a_block_at_a_time(monkeypatch):
    # Regression (issue 32, row 1): every 256 hits took a get_many of two dict operations a key (a lookup and a
    # move to the LRU's end) and a generator per entry, 0.28-0.47x shuffle(from_arrays(results)); a warm pass
    # now takes one vectorised get_ids a block, and no get_many
    n = 3000
    r = readers.cached(nodes.source(n), nodes.feature)
    shuffled, uncached = (readers.shuffle(s, seed=0) for s in (r, readers.map_readers(nodes.features_of,
                                                                                       nodes.source(n))))
    list(shuffled()), list(uncached())
    looked_up = []
    monkeypatch.setattr(MemoryTier, "get_many", lambda self, keys: pytest.fail("get_many on a warm pass"))
    real = MemoryTier.get_ids
    monkeypatch.setattr(MemoryTier, "get_ids", lambda self, ids: looked_up.append(len(ids)) or real(self, ids))
    assert_same(list(shuffled()), list(uncached()))  # pass 1, in an order of its own
    assert sum(looked_up) == n and len(looked_up) == -(-n // 256)
    assert (r.stats()["memory_hits"], r.stats()["misses"]) == (n, n) and calls() == {i: 1 for i in range(n)}


def test_cached_warm_dense_rows_are_read_a_block_at_once_and_never_copied_for_a_memory_tier_that_is_off(
        tmp_path, monkeypatch):
    # Regression (issue 32, row 2): with memory_bytes=0 each disk hit was still copied (to keep it in a tier of
    # no bytes), and the rows were read through a dict of row keys: 0.41-0.47x a memmap copying row k
    n = 600
    list(readers.cached(nodes.source(n), nodes.feature, directory=tmp_path)())
    r = readers.cached(nodes.source(n), nodes.feature, directory=tmp_path, memory_bytes=0)
    shuffled = readers.shuffle(r, seed=1)
    list(readers.firstn(shuffled, 1)())  # the process learns which rows are there
    monkeypatch.setattr(MemoryTier, "keep", lambda *args: pytest.fail("kept in a tier of no bytes"))
    monkeypatch.setattr(DenseFile, "read", lambda *args: pytest.fail("read row by row"))
    got = list(shuffled())
    assert_same(got, list(readers.shuffle(readers.map_readers(nodes.features_of, nodes.source(n)), seed=1)()))
    assert not any(g.flags.writeable for g in got)
    assert (r.stats()["disk_hits"], r.stats()["misses"]) == (n + 1, 0)


def test_cached_a_dense_row_damaged_after_a_warm_pass_is_caught_on_the_next(tmp_path):
    # The fast read still checks every row's CRC-32: a row damaged on disk under a reader that has read it is
    # found, warned about, computed again and rewritten
    n = 600
    r = readers.cached(nodes.source(n), nodes.feature, directory=tmp_path, memory_bytes=0)
    want = list(readers.map_readers(nodes.features_of, nodes.source(n))())
    list(r()), list(r())
    assert r.stats()["disk_hits"] == n
    column, = (f for f in os.listdir(tmp_path) if f.startswith("dense-") and f.endswith(".npy"))
    rows = np.load(tmp_path / column, mmap_mode="r+")
    rows[123, 1] = -7
    rows.flush()
    del rows
    uncached = readers.shuffle(readers.map_readers(nodes.features_of, nodes.source(n)), seed=2)
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert_same(list(readers.shuffle(r, seed=2)()), list(uncached()))
    r.flush()
    assert (r.stats()["corrupt"], r.stats()["misses"]) == (1, n + 1) and calls()[123] == 2
    assert_same(list(r()), want)
