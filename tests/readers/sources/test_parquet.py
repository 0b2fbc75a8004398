"""readers.sources.parquet: Parquet files written by pyarrow and datasets, read back by row group."""
import pickle
import sys

import numpy as np
import pytest

import batching
import readers
from readers.plugins.registry import reader_splits
from readers.testing import (
    assert_resumes_at_every_step,
    assert_same,
    assert_seeded_passes,
)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

N = 50


def written_rows(n=N):
    """The rows the tests write, as the entry rules give them back."""
    images = np.arange(n * 4, dtype=np.uint8).reshape(n, 4)
    return [(images[i], np.int64(i % 10), f"name {i}", bytes([i, 255 - i]), np.float32(i / 4)) for i in range(n)]


def write(path, rows, row_group_size=8, **options):
    table = pa.table({
        "image": pa.array([r[0].tolist() for r in rows], pa.list_(pa.uint8(), 4)),
        "label": pa.array([int(r[1]) for r in rows], pa.int64()),
        "name": pa.array([r[2] for r in rows], pa.string()),
        "blob": pa.array([r[3] for r in rows], pa.binary()),
        "score": pa.array([float(r[4]) for r in rows], pa.float32()),
    })
    pq.write_table(table, path, row_group_size=row_group_size, **options)
    return path


@pytest.fixture
def data(tmp_path):
    """Two Parquet files in a folder, 30 + 20 rows in row groups of 8: their rows, in order."""
    rows = written_rows()
    (tmp_path / "data").mkdir()
    write(tmp_path / "data" / "part-0.parquet", rows[:30])
    write(tmp_path / "data" / "part-1.parquet", rows[30:])
    return tmp_path / "data", rows


def test_parquet_reads_back_what_pyarrow_wrote_by_the_entry_rules(data):
    folder, rows = data
    r = readers.parquet(folder)
    assert len(r) == N and r.groups().tolist() == [0, 8, 16, 24, 30, 38, 46, 50]
    assert_same(list(r()), rows)
    assert_same(r[-1], rows[-1])
    image, label, name, blob, score = r[3]
    assert type(label) is np.int64 and type(score) is np.float32 and type(name) is str and type(blob) is bytes
    assert_same(list(r.gather(np.array([49, 0, 31, 7]))), [rows[i] for i in (49, 0, 31, 7)])


def test_parquet_columns_come_in_the_order_given_and_batches_collate(data):
    folder, rows = data
    r = readers.parquet(folder, columns=["label", "image"])
    assert_same(list(r()), [(label, image) for image, label, *_ in rows])
    labels, images = r.gather_columns(np.array([5, 40]))
    assert labels.tolist() == [5, 0] and images.shape == (2, 4) and images.dtype == np.uint8
    batch = next(iter(batching.collated(batching.batch(r, 16))()))
    assert [a.shape for a in batch] == [(16,), (16, 4)]
    assert readers.parquet(folder, columns=["name"]).gather_columns(np.array([0])) is None  # strings: no array


def test_parquet_building_reads_footers_only_and_a_batch_decodes_each_row_group_once(data, monkeypatch):
    folder, rows = data
    decoded = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", lambda self, i, **kw: decoded.append(i) or real(self, i, **kw))
    r = readers.parquet(folder)
    assert len(r) == N and decoded == []  # len from the metadata alone
    assert_same(list(r.gather(np.array([1, 9, 2, 10, 3]))), [rows[i] for i in (1, 9, 2, 10, 3)])
    assert decoded == [0, 1]  # one take per row group, each decoded once
    r[4], r[11]
    assert decoded == [0, 1]  # both kept in the cache


def test_parquet_cache_is_bounded_in_bytes(data, monkeypatch):
    folder, _ = data
    decoded = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", lambda self, i, **kw: decoded.append(i) or real(self, i, **kw))
    size = pq.ParquetFile(folder / "part-0.parquet").read_row_group(0, columns=["label"]).nbytes
    decoded.clear()
    r = readers.parquet(folder, columns=["label"], cache_bytes=2 * size)  # two row groups fit, not three
    r[0], r[9], r[17]
    assert decoded == [0, 1, 2]
    r[9], r[0]
    assert decoded == [0, 1, 2, 0]  # group 1 was kept, group 0 (the least recently used) was not
    decoded.clear()
    r = readers.parquet(folder, columns=["label"], cache_bytes=1)
    r[0], r[1], r[9], r[1]
    assert decoded == [0, 1, 0]  # the group just read always stays
    with pytest.raises(ValueError, match="cache_bytes must be an int >= 1"):
        readers.parquet(folder, cache_bytes=0)


def test_parquet_reads_what_datasets_to_parquet_wrote(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": ["a", "bb", "ccc"], "label": [0, 1, 0]})
    ds.to_parquet(str(tmp_path / "train.parquet"))
    assert_same(list(readers.parquet(tmp_path / "train.parquet")()),
                [("a", np.int64(0)), ("bb", np.int64(1)), ("ccc", np.int64(0))])


@pytest.mark.parametrize("shuffled", ["global", "row_groups"])
def test_parquet_shuffle_shard_workers_and_resume_give_each_entry_once(data, shuffled):
    folder, rows = data

    def make():
        r = readers.parquet(folder, columns=["label", "name"])
        return (readers.shuffle(r, seed=3) if shuffled == "global"
                else readers.shuffle_row_groups(r, window=2, seed=3))

    names = sorted(name for _, _, name, _, _ in rows)
    whole = [name for _, name in make()()]
    assert sorted(whole) == names and whole != sorted(whole, key=lambda s: int(s.split()[1]))
    shards = [[name for _, name in readers.shard(make(), k, 3)()] for k in range(3)]
    assert sorted(sum(shards, [])) == names
    workers = [name for _, name in readers.prefetch(make(), 3, mode="process")()]
    assert sorted(workers) == names
    assert_resumes_at_every_step(make, max_steps=12)
    assert_resumes_at_every_step(lambda: readers.shard(make(), 1, 3), max_steps=8)
    assert_seeded_passes(make, max_steps=6)


def test_parquet_reader_pickles_without_its_open_file_and_cache(data):
    folder, rows = data
    r = readers.parquet(folder)
    r[0]
    copy = pickle.loads(pickle.dumps(r))
    assert_same(list(copy()), rows)


def damage_a_data_page(path, row_group, column=0):
    """Flip bytes in the middle of one column chunk's data page (past its header) in a real file."""
    chunk = pq.read_metadata(path).row_group(row_group).column(column)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    end = start + chunk.total_compressed_size  # the data page runs from data_page_offset to here
    middle = (chunk.data_page_offset + end) // 2
    data = bytearray(path.read_bytes())
    for k in range(middle, min(middle + 16, end)):
        data[k] ^= 0xFF
    path.write_bytes(bytes(data))


def test_parquet_corrupt_page_names_the_file_and_row_group(tmp_path):
    """Issue 28: corrupt Parquet pages."""
    rows = written_rows(200)
    path = write(tmp_path / "damaged.parquet", rows, row_group_size=50, compression="snappy")
    damage_a_data_page(path, 2, column=4)
    r = readers.parquet(path, columns=["score"])
    assert_same(r[5], (rows[5][4],))  # the other row groups still read
    with pytest.raises(readers.ColumnarFileError) as info:
        r[125]
    message = str(info.value)
    assert f"{path}, row group 2 (of 4): cannot be decoded" in message and "write it again" in message
    assert isinstance(info.value, ValueError)
    with pytest.raises(readers.ColumnarFileError, match="row group 2"):
        list(readers.prefetch(readers.shuffle(r, seed=0), 2, mode="process")())  # from a worker process too


def test_parquet_page_checksums_catch_damage_that_still_decodes(tmp_path):
    rows = written_rows(200)
    path = write(tmp_path / "plain.parquet", rows, row_group_size=50, compression="none", write_page_checksum=True)
    damage_a_data_page(path, 1, column=4)
    with pytest.raises(readers.ColumnarFileError, match=r"plain.parquet, row group 1 \(of 4\)"):
        readers.parquet(path)[75]


def test_parquet_refuses_what_is_not_parquet_and_unknown_columns(tmp_path):
    (tmp_path / "notes.parquet").write_text("not parquet")
    with pytest.raises(readers.ColumnarFileError, match="notes.parquet: not a readable Parquet file"):
        readers.parquet(tmp_path / "notes.parquet")
    with pytest.raises(readers.MissingFile, match="no Parquet files there"):
        readers.parquet(tmp_path / "nothing")
    write(tmp_path / "ok.parquet", written_rows(3))
    with pytest.raises(ValueError, match="no column 'lable'; its columns are 'image', 'label'"):
        readers.parquet(tmp_path / "ok.parquet", columns=["lable"])


def test_parquet_without_pyarrow_names_the_pip_install(data, monkeypatch):
    folder, _ = data
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install pyarrow \(or pip install readerkit\[arrow\]\)"):
        readers.parquet(folder)


def test_parquet_plugin_reads_the_data_dir(data):
    folder, rows = data
    train, test = reader_splits("parquet", data_dir=str(folder), download=False)
    assert test is None and len(train) == N
    assert_same(train[0], rows[0])
    with pytest.raises(readers.ColumnarFileError, match="--data PATH .* or --data-dir DIR"):
        reader_splits("parquet", data_dir=None)


def test_parquet_spawned_workers_open_the_files_themselves(data):
    folder, rows = data
    r = readers.parquet(folder, columns=["name"])
    r[0]  # this process has a file open and a row group cached: neither crosses
    spawned = readers.prefetch(readers.shuffle_row_groups(r, seed=0), 2, mode="process", start_method="spawn")
    assert sorted(name for (name,) in spawned()) == sorted(row[2] for row in rows)
