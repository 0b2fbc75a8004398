"""batch and collated: Paddle's batch, and the vectorised path over indexed pipelines."""
import numpy as np
import pytest
import toolz

import batching
import readers


class ArraySource(readers.IndexedReader):
    """from_arrays that counts how it is read."""

    def __init__(self, x, y):
        super().__init__()
        self.inner = readers.from_arrays(x, y)
        self.gets = self.gathers = self.column_gathers = 0

    def __len__(self):
        return len(self.inner)

    def _get(self, i):
        self.gets += 1
        return self.inner._get(i)

    def gather(self, indices):
        self.gathers += 1
        return self.inner.gather(indices)

    def gather_columns(self, indices):
        self.column_gathers += 1
        return self.inner.gather_columns(indices)


def make_data(n=50):
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, size=(n, 6), dtype=np.uint8), rng.integers(0, 10, size=n)


@pytest.mark.parametrize("size, drop_last, expected", [(3, False, [3, 3, 3, 1]), (3, True, [3, 3, 3]), (10, False, [10])])
def test_batch_sizes(size, drop_last, expected):
    assert [len(b) for b in batching.batch(lambda: range(10), size, drop_last)()] == expected


@pytest.mark.parametrize("bad", [0, -1, 2.5, "8", None, True])
def test_batch_bad_size_raises_value_error_when_called(bad):
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        batching.batch(lambda: range(3), bad)


def test_batch_over_indexed_pipeline_gathers_once_per_batch():
    x, y = make_data()
    src = ArraySource(x, y)
    r = batching.batch(readers.shuffle(src, seed=1), 8)
    batches = list(r())
    assert [len(b) for b in batches] == [8] * 6 + [2]
    assert src.gets == 0 and src.gathers == 7
    ids = [int(lab) for b in batches for _, lab in b]
    assert sorted(ids) == sorted(y.tolist())


@pytest.mark.parametrize("drop_last", [False, True])
def test_fast_path_equals_entry_by_entry_path(drop_last):
    x, y = make_data()
    indexed = readers.shuffle(readers.from_arrays(x, y), seed=5)
    order = [int(e[-1]) for e in readers.with_index(readers.shuffle(readers.from_arrays(x, y), seed=5))()]

    def stream():
        for i in order:
            yield x[i], y[i]

    fast = list(batching.batch(indexed, 8, drop_last)())
    slow = list(batching.batch(stream, 8, drop_last)())
    assert len(fast) == len(slow)
    for fb, sb in zip(fast, slow):
        assert all(np.array_equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(fb, sb))


def test_collated_over_indexed_pipeline_takes_columns():
    x, y = make_data()
    src = ArraySource(x, y)
    r = toolz.pipe(src, readers.shuffle(seed=2), readers.firstn(n=20), batching.batch(batch_size=8),
                   batching.collated())
    out = list(r())
    assert [images.shape for images, _ in out] == [(8, 6), (8, 6), (4, 6)]
    assert src.column_gathers == 3 and src.gathers == 0 and src.gets == 0
    images = np.concatenate([i for i, _ in out])
    labels = np.concatenate([lab for _, lab in out])
    pos = [int(np.flatnonzero((x == row).all(axis=1))[0]) for row in images]
    assert np.array_equal(y[pos], labels)


def test_collated_after_a_map_collates_entries():
    x, y = make_data(10)
    r = batching.collated(batching.batch(readers.map_readers(lambda e: (e[0] * 0 + 1, e[1]), readers.from_arrays(x, y)), 4))
    out = list(r())
    assert [a.shape for a, _ in out] == [(4, 6), (4, 6), (2, 6)] and all((a == 1).all() for a, _ in out)


def test_collated_rejects_a_reader_of_entries():
    with pytest.raises(TypeError, match="needs a batch reader"):
        batching.collated(readers.from_arrays(np.zeros(3)))


def test_batch_repr_and_recall():
    r = batching.batch(readers.shuffle(readers.from_sequence(list(range(9))), seed=0), 4)
    assert repr(r).splitlines()[0] == "batch(batch_size=4, drop_last=False)"
    assert sorted(x for b in r() for x in b) == list(range(9))


def _ragged():
    rag = np.empty(4, object)
    rag[:] = [[1, 2], [3], [4, 5, 6], []]
    return rag


@pytest.mark.parametrize("column", [_ragged(), np.array(["ann", "bob", "cy", "dee"]), np.arange(4.0)],
                         ids=["ragged", "str", "float"])
def test_collated_fast_path_matches_entry_path(column):
    r = readers.from_arrays(column, np.arange(4))
    fast = list(batching.collated(batching.batch(r, 3), pad_value=-1)())
    slow = list(batching.collated(batching.batch(readers.filter_entries(r, bool), 3), pad_value=-1)())
    assert len(fast) == len(slow) == 2
    for f, s in zip(fast, slow):
        for a, b in zip(f, s):
            assert type(a) is type(b)
            if isinstance(a, batching.Padded):
                assert np.array_equal(a.data, b.data) and np.array_equal(a.lengths, b.lengths)
            elif isinstance(a, list):
                assert a == b
            else:
                assert np.array_equal(a, b)


@pytest.mark.parametrize("source", [lambda: iter(np.arange(3)), lambda: iter([1, 2])])
def test_collated_over_a_reader_of_entries_says_to_batch_first(source):
    with pytest.raises(TypeError, match="put batching.batch"):
        list(batching.collated(source)())


# -- len(): batches in a pass (for progress bars and learning-rate schedules) ------------------


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9])
@pytest.mark.parametrize("drop_last", [False, True])
def test_batch_len_is_the_number_of_batches_over_an_indexed_reader(n, drop_last):
    r = batching.batch(readers.shuffle(readers.from_sequence(range(n)), seed=0), 4, drop_last)
    assert len(r) == len(list(r())) == (n // 4 if drop_last else -(-n // 4))


@pytest.mark.parametrize("wrap", [
    batching.collated,
    lambda r: readers.map_readers(len, r),
    lambda r: readers.shuffle(r, 2, seed=0),
    lambda r: readers.firstn(r, 2),
    lambda r: readers.skip(r, 1),
    lambda r: readers.shard(r, 1, 2),
    lambda r: readers.prefetch(r, 2, mode="thread"),
    lambda r: readers.prefetch(batching.collated(r), 2, mode="thread"),
], ids=["collated", "map", "shuffle", "firstn", "skip", "shard", "prefetch", "prefetch-collated"])
def test_stages_over_a_batch_reader_give_its_batch_count_as_len(wrap):
    r = wrap(batching.batch(readers.from_arrays(np.arange(10)), 4))
    assert len(r) == len(list(r()))


@pytest.mark.parametrize("reader", [lambda: iter(range(10)), readers.filter_entries(readers.from_sequence(range(10)), bool)],
                         ids=["generator", "filter"])
@pytest.mark.parametrize("wrap", [lambda r: r, batching.collated], ids=["batch", "collated"])
def test_batch_len_over_a_stream_raises_type_error(reader, wrap):
    with pytest.raises(TypeError, match=r"^batch\(batch_size=4, drop_last=False\) has no length: .* below it has none"):
        len(wrap(batching.batch(reader, 4)))


def test_a_state_past_the_last_batch_of_a_stage_over_batches_is_refused():
    # a buffer shuffle of batches counts batches: with batch's len known, the end of its pass is too
    r = readers.shuffle(batching.batch(readers.from_sequence(range(11)), 3), 2, seed=0)
    with pytest.raises(ValueError, match="past the end of shuffle.*'s 4 entries"):
        r.set_state({"pass": 0, "cursor": 5, "seed": 0})


def test_collated_reads_a_pass_through_the_sources_gather_ahead():
    """A source that fetches (readers.remote) sees the pass's batches as one stream, so it can read ahead."""

    class Ahead(readers.IndexedReader):
        name = "ahead"
        calls: list = []

        def __len__(self):
            return 10

        def _get(self, i):
            return float(i)

        def gather_columns(self, indices):
            return indices.astype(float)

        def gather_ahead(self, chunks):
            seen = []
            self.calls.append(seen)
            for indices in chunks:
                seen.append(indices.tolist())
                yield indices, self.gather_columns(indices) * 10

    source = Ahead()
    got = [b.tolist() for b in batching.collated(batching.batch(source, 4))()]
    assert got == [[0.0, 10.0, 20.0, 30.0], [40.0, 50.0, 60.0, 70.0], [80.0, 90.0]]
    assert Ahead.calls == [[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]]


# -- issue 32: narrowed columns for torch_loader ------------------------------------------


def test_collated_narrow_gives_narrowed_columns_that_decode_to_the_plain_batches(tmp_path):
    """Issue 32: collated(narrow=True) hands on the source's wire_columns (MNIST's uint8 pixels) for
    torch_loader to widen on the GPU; decoded, they are the plain batches bit for bit."""
    from readers.interop.torch_loader import Narrowed
    from readers.sources import mnist
    from readers.sources.idx import write_idx

    pixels = (np.arange(300 * 784) % 256).astype(np.uint8).reshape(300, 28, 28)  # every value 0..255
    write_idx(str(tmp_path / "train-images-idx3-ubyte"), pixels)
    write_idx(str(tmp_path / "train-labels-idx1-ubyte"), (np.arange(300) % 10).astype(np.uint8))

    def pipeline(narrow):
        source = readers.shuffle(mnist.train(str(tmp_path), download=False), seed=1)
        return batching.collated(batching.batch(source, 64), narrow=narrow)

    plain, narrowed = list(pipeline(False)()), list(pipeline(True)())
    assert len(narrowed) == len(plain) == 5
    for (x, y), (nx, ny) in zip(plain, narrowed, strict=True):
        assert isinstance(nx, Narrowed) and nx.column.dtype == np.uint8 and nx.column.nbytes * 4 == x.nbytes
        assert nx.decode().tobytes() == x.tobytes() and ny.decode().tobytes() == y.tobytes()
    assert repr(pipeline(True)).splitlines()[0] == "collated(pad_value=0, narrow=True)"
    assert pipeline(True).identity() == pipeline(False).identity()


def test_collated_narrow_leaves_sources_without_narrower_columns_as_they_are():
    x, y = make_data()
    source = ArraySource(x, y)
    plain = list(batching.collated(batching.batch(readers.from_arrays(x, y), 8))())
    got = list(batching.collated(batching.batch(source, 8), narrow=True)())
    assert [(a.tolist(), b.tolist()) for a, b in got] == [(a.tolist(), b.tolist()) for a, b in plain]
    assert source.column_gathers == len(plain)  # through gather_ahead, as without narrow
    with pytest.raises(TypeError, match="narrow must be True or False"):
        batching.collated(batching.batch(source, 8), narrow="yes")


# -- issue 32: the indexed path at the limit of a numpy take per batch ---------------------------


def _python_frames(run):
    """Python frames entered (calls and generator resumptions) while ``run()`` runs."""
    import sys

    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("make", [lambda x, y: readers.from_arrays(x, y), lambda x, y: readers.np_array(x)],
                         ids=["from_arrays", "np_array"])
def test_collated_global_shuffle_enters_no_python_frame_a_batch(make):
    """Regression from issue 32: each batch of collated(batch(shuffle(from_arrays(...)))) ran five generator
    layers, a tuple built by a generator and two checks a column (0.94x a numpy take per batch); now a
    batch is C iterators taking each column from its array: no Python frame a batch."""
    x, y = make_data(4000)
    r = batching.collated(batching.batch(readers.shuffle(make(x, y), seed=0), 8))
    list(r())  # the first pass imports and caches what it needs
    batches = []
    frames = _python_frames(lambda: batches.extend(r()))
    assert len(batches) == 500
    assert frames < 100, f"{frames} Python frames for {len(batches)} batches"  # a pass's start and end


def test_collated_takes_declared_numeric_columns_as_gather_columns_gives_them():
    x, y = make_data()
    r = readers.from_arrays(x, y)
    fast = list(batching.collated(batching.batch(readers.shuffle(r, seed=3), 8))())
    slow = list(batching.collated(batching.batch(readers.filter_entries(readers.shuffle(r, seed=3), bool), 8))())
    assert len(fast) == len(slow) == 7
    for (fx, fy), (sx, sy) in zip(fast, slow):
        assert fx.dtype == sx.dtype == np.uint8 and fy.dtype == sy.dtype
        assert np.array_equal(fx, sx) and np.array_equal(fy, sy)


def test_collated_checks_each_batch_of_a_source_that_declares_no_arrays():
    """A source whose gather_columns does more than take (column_arrays None) has every batch finished as collate
    would."""

    class Words(readers.IndexedReader):
        name = "words"

        def __len__(self):
            return 4

        def _get(self, i):
            return "abcd"[i] * (i + 1), i

        def gather_columns(self, indices):
            return np.array([self._get(i)[0] for i in indices.tolist()], dtype=object), indices.copy()

    (words, ids), = batching.collated(batching.batch(Words(), 4))()
    assert words == ["a", "bb", "ccc", "dddd"] and ids.tolist() == [0, 1, 2, 3]


def test_collated_reads_through_an_overridden_gather_ahead_even_with_declared_arrays():
    """A source that reads ahead keeps doing so when it declares its arrays: the C path skips gather_ahead."""
    seen = []

    class Ahead(type(readers.from_arrays(np.arange(3)))):
        def gather_ahead(self, chunks):
            for indices, columns in super().gather_ahead(chunks):
                seen.append(indices.tolist())
                yield indices, columns

    source = Ahead((np.arange(5),))
    assert source.column_arrays()[0].tolist() == [0, 1, 2, 3, 4]
    got = [c.tolist() for (c,) in batching.collated(batching.batch(source, 2))()]
    assert got == seen == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize("drop_last", [False, True])
def test_batch_and_collated_of_a_long_global_shuffle_agree_with_its_entries(drop_last):
    """Over the keyed permutation's chunks (more than SMALL samples, PERMUTE_CHUNK at a time) and a batch size
    that divides no chunk, batches regroup across chunks exactly as the pass's entries run."""
    from readers.ops import shuffling

    n = shuffling.SMALL + 1001
    r = readers.shuffle(readers.np_array(np.arange(n)), seed=4)
    order = np.fromiter(r.run(2), dtype=np.int64)
    expect = [order[k:k + 1000] for k in range(0, n, 1000)]
    if drop_last:
        expect = expect[:-1]
    lists = batching.batch(r, 1000, drop_last)
    collated = batching.collated(batching.batch(r, 1000, drop_last))
    assert [np.asarray(b).tolist() for b in lists.run(2)] == [e.tolist() for e in expect]
    assert [b.tolist() for b in collated.run(2)] == [e.tolist() for e in expect]
