"""readers.sources.columnar: Arrow IPC files (pyarrow's and datasets' save_to_disk) and datasets.Dataset objects."""
import pickle
import sys

import numpy as np
import pytest

import readers
from readers.plugins.registry import reader_splits
from readers.sources.columnar import convert_column
from readers.testing import (
    assert_resumes_at_every_step,
    assert_same,
    assert_seeded_passes,
)

pa = pytest.importorskip("pyarrow")
feather = pytest.importorskip("pyarrow.feather")

N = 30


def rows(n=N):
    vectors = (np.arange(n * 6, dtype=np.float32) / 2).reshape(n, 2, 3)
    return [(vectors[i], np.int32(i), f"row {i}", b"\x00" * (i % 3), bool(i % 2)) for i in range(n)]


def table(entries):
    return pa.table({
        "vector": pa.array([e[0].tolist() for e in entries], pa.list_(pa.list_(pa.float32(), 3), 2)),
        "index": pa.array([int(e[1]) for e in entries], pa.int32()),
        "text": pa.array([e[2] for e in entries]),
        "raw": pa.array([e[3] for e in entries], pa.binary()),
        "flag": pa.array([e[4] for e in entries]),
    })


def expected(entries):
    return [(v, i, t, r, np.bool_(f)) for v, i, t, r, f in entries]


@pytest.fixture
def arrow_dir(tmp_path):
    """A feather (IPC file format) file in batches of 7, and an IPC stream file: 18 + 12 rows."""
    entries = rows()
    feather.write_feather(table(entries[:18]), tmp_path / "a.arrow", chunksize=7)
    rest = table(entries[18:])
    with pa.OSFile(str(tmp_path / "b.arrow"), "wb") as sink, pa.ipc.new_stream(sink, rest.schema) as writer:
        writer.write_table(rest)
    return tmp_path, entries


def test_convert_column_gives_numbers_as_numpy_over_arrow_buffers():
    numbers = pa.array(np.arange(10, dtype=np.int64))
    assert convert_column(numbers).ctypes.data == numbers.buffers()[1].address  # no copy
    fixed = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(12, dtype=np.float32)), 4).slice(1)
    converted = convert_column(fixed)
    assert converted.shape == (2, 4) and converted[0].tolist() == [4, 5, 6, 7]
    assert converted.ctypes.data == fixed.values.buffers()[1].address + 4 * 4  # the slice's rows, no copy
    assert convert_column(pa.array([1, None, 3])) == [1, None, 3]  # nulls: Python values
    assert convert_column(pa.array([[1], [2, 3]])) == [[1], [2, 3]]  # variable-length lists: Python lists


def test_arrow_reads_file_and_stream_formats_by_the_entry_rules(arrow_dir):
    folder, entries = arrow_dir
    r = readers.arrow(folder)
    assert len(r) == N and r.groups().tolist() == [0, 7, 14, 18, 30]
    assert_same(list(r()), expected(entries))
    assert_same(list(r.gather(np.array([29, 0, 17, 18]))), [expected(entries)[i] for i in (29, 0, 17, 18)])
    vector, index = readers.arrow(folder, columns=["vector", "index"])[20]
    assert vector.shape == (2, 3) and vector.dtype == np.float32 and type(index) is np.int32


def test_arrow_rows_are_views_of_the_mapped_file(arrow_dir):
    folder, _ = arrow_dir
    r = readers.arrow(folder / "a.arrow", columns=["vector"])
    first, second = r[0][0], r[1][0]
    assert not first.flags.owndata and not first.flags.writeable  # over Arrow's (mapped) buffer
    assert np.shares_memory(first, r.group(0)[0]) and second.ctypes.data - first.ctypes.data == 6 * 4


def test_arrow_reads_a_datasets_save_to_disk_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": ["a", "b", "c"], "label": [2, 0, 1]})
    ds.save_to_disk(str(tmp_path / "saved"))
    r = readers.arrow(tmp_path / "saved", columns=["label", "text"])
    assert_same(list(r()), [(np.int64(2), "a"), (np.int64(0), "b"), (np.int64(1), "c")])
    train, test = reader_splits("arrow", data_dir=str(tmp_path / "saved"))
    assert test is None and len(train) == 3


@pytest.mark.parametrize("shuffled", ["global", "row_groups"])
def test_arrow_shuffle_shard_workers_and_resume_give_each_entry_once(arrow_dir, shuffled):
    folder, _ = arrow_dir

    def make():
        r = readers.arrow(folder, columns=["index"])
        return readers.shuffle(r, seed=1) if shuffled == "global" else readers.shuffle_row_groups(r, seed=1, window=2)

    every = list(range(N))
    assert sorted(int(i) for (i,) in make()()) == every
    assert sorted(int(i) for k in range(3) for (i,) in readers.shard(make(), k, 3)()) == every
    assert sorted(int(i) for (i,) in readers.prefetch(make(), 3, mode="process")()) == every
    assert_resumes_at_every_step(make, max_steps=10)
    assert_seeded_passes(make, max_steps=6)


def test_arrow_pickles_without_its_map(arrow_dir):
    folder, entries = arrow_dir
    r = readers.arrow(folder)
    r[0]
    assert_same(list(pickle.loads(pickle.dumps(r))()), expected(entries))


def test_arrow_refuses_damaged_files_and_mixed_schemas(tmp_path):
    feather.write_feather(table(rows(5)), tmp_path / "good.arrow")
    data = (tmp_path / "good.arrow").read_bytes()
    (tmp_path / "cut.arrow").write_bytes(data[:len(data) // 2])
    with pytest.raises(readers.ColumnarFileError, match="cut.arrow: not a readable Arrow IPC file"):
        readers.arrow(tmp_path / "cut.arrow")
    feather.write_feather(pa.table({"other": [1]}), tmp_path / "other.arrow")
    with pytest.raises(readers.ColumnarFileError, match=r"other.arrow: its columns \['other'\] differ"):
        readers.arrow([tmp_path / "good.arrow", tmp_path / "other.arrow"])


def test_arrow_without_pyarrow_names_the_pip_install(arrow_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install pyarrow \(or pip install readerkit\[arrow\]\)"):
        readers.arrow(arrow_dir[0])


@pytest.fixture
def dataset():
    datasets = pytest.importorskip("datasets")
    entries = rows()
    features = datasets.Features({"index": datasets.Value("int32"), "text": datasets.Value("string")})
    return datasets.Dataset.from_dict({"index": [int(e[1]) for e in entries], "text": [e[2] for e in entries]},
                                      features=features)


def test_from_hf_reads_the_table_in_place(dataset):
    r = readers.from_hf(dataset, columns=["text", "index"])
    assert_same(list(r()), [(f"row {i}", np.int32(i)) for i in range(N)])
    table_numbers = dataset.data.table.column("index").chunk(0)
    assert r.group(0)[1].ctypes.data == table_numbers.buffers()[1].address  # the dataset's buffer, no copy


def test_from_hf_shuffles_shards_and_resumes_exactly_once_and_pickles(dataset):
    def make():
        return readers.shuffle(readers.from_hf(dataset, columns=["index"]), seed=2)

    assert sorted(int(i) for k in range(3) for (i,) in readers.shard(make(), k, 3)()) == list(range(N))
    assert sorted(int(i) for (i,) in readers.prefetch(make(), 2, mode="process")()) == list(range(N))
    assert_resumes_at_every_step(make, max_steps=10)
    assert_same(list(pickle.loads(pickle.dumps(make()))()), list(make()()))


def test_from_hf_refuses_an_indices_mapping_and_what_is_no_dataset(dataset):
    with pytest.raises(ValueError, match=r"indices mapping .* call ds.flatten_indices\(\) first"):
        readers.from_hf(dataset.shuffle(seed=0))
    assert len(readers.from_hf(dataset.shuffle(seed=0).flatten_indices())) == N
    with pytest.raises(TypeError, match="from_hf needs a datasets.Dataset, got dict"):
        readers.from_hf({"train": dataset})


def test_from_hf_and_arrow_cross_into_spawned_workers(dataset, arrow_dir):
    for r in (readers.from_hf(dataset, columns=["index"]), readers.arrow(arrow_dir[0], columns=["index"])):
        spawned = readers.prefetch(readers.shuffle(r, seed=0), 2, mode="process", start_method="spawn")
        assert sorted(int(i) for (i,) in spawned()) == list(range(N))
