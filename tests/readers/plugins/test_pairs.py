"""readers.plugins.pairs: the (image, label) entries the format plugins give the command line."""
import io
import pickle

import numpy as np
import pytest

Image = pytest.importorskip("PIL.Image")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import readers  # noqa: E402
from readers.plugins.pairs import (  # noqa: E402
    ImageDecodeFailed,
    decode_images,
    describe_roles,
    parse_columns,
)
from readers.plugins.registry import reader_splits  # noqa: E402
from readers.testing import assert_resumes_at_every_step, assert_seeded_passes  # noqa: E402

N = 12


def _png(i: int) -> tuple[bytes, np.ndarray]:
    pixels = np.full((4, 5), i * 10, np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue(), pixels


@pytest.fixture
def table(tmp_path):
    """A Parquet file written by pyarrow: PNG bytes as a Hugging Face Image struct, a label, and a name."""
    encoded = [_png(i) for i in range(N)]
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"image": [{"bytes": b, "path": None} for b, _ in encoded],
                             "label": [i % 3 for i in range(N)], "name": [f"n{i}" for i in range(N)]}),
                   path, row_group_size=5)
    return path, [p for _, p in encoded]


def test_the_parquet_plugin_decodes_the_image_column(table):
    path, pixels = table
    train, test = reader_splits("parquet", data=str(path), columns="image,label", download=False)
    assert test is None and len(train) == N
    for i in range(N):
        image, label = train[i]
        np.testing.assert_array_equal(image, pixels[i])
        assert label == i % 3
    assert describe_roles(train) == "image = column 'image' (uint8[4, 5] decoded from PNG), label = column 'label'"
    assert train.entry_names == ("image", "label")


def test_the_decoded_reader_keeps_the_stage_contract(table):
    path, _ = table
    make = lambda: reader_splits("parquet", data=str(path), columns="label,name", size=2)[0]  # noqa: E731
    reader = pickle.loads(pickle.dumps(make()))
    assert [name for _, name in reader()] == [f"n{i}" for i in range(N)]
    assert_resumes_at_every_step(lambda: readers.shuffle(make(), seed=0))
    assert_seeded_passes(lambda: readers.shuffle(make(), seed=0))
    decoded = reader_splits("parquet", data=str(path), columns="image,label", size=2)[0]
    work = readers.prefetch(readers.shuffle(decoded, seed=1), 2, mode="process")
    assert sorted(int(image[0, 0]) for image, _ in work()) == [i * 10 for i in range(N)]
    assert {image.shape for image, _ in decoded()} == {(2, 2)}


def test_a_bad_column_names_the_columns_there_are(table):
    path, _ = table
    with pytest.raises(ValueError, match="no column 'imag'; its columns are 'image', 'label', 'name'"):
        reader_splits("parquet", data=str(path), columns="imag,label")


def test_bytes_that_do_not_decode_name_the_column():
    bad = readers.from_sequence([(b"\x89PNG\r\n\x1a\n" + b"cut short", 0)])
    with pytest.raises(ImageDecodeFailed, match="column 'picture': its PNG bytes do not decode"):
        list(decode_images(bad, ("picture", "y"))())


def test_parse_columns():
    assert parse_columns("a,b") == ("a", "b")
    with pytest.raises(ValueError, match="an empty column name"):
        parse_columns(",")


def test_tar_shard_pairs_shard_resume_and_cross_into_process_workers(tmp_path):
    wds = pytest.importorskip("webdataset")
    with wds.ShardWriter(str(tmp_path / "shard-%03d.tar"), maxcount=4, verbose=0) as sink:
        for i in range(N):
            sink.write({"__key__": f"s{i:03d}", "png": _png(i)[0], "cls": i})
    make = lambda: reader_splits("tar-shards", data=str(tmp_path), size=2)[0]  # noqa: E731
    work = readers.prefetch(readers.shuffle(make(), 5, seed=0), 2, mode="process")
    assert sorted(label for _, label in work()) == list(range(N))
    parts = [readers.shard(make(), k, 3) for k in range(3)]
    assert sorted(label for part in parts for _, label in part()) == list(range(N))
    assert_resumes_at_every_step(lambda: readers.shuffle(make(), 5, seed=0))
    assert {image.shape for image, _ in make()()} == {(2, 2, 3)}  # tar_shards decodes to RGB


def test_image_folder_plugin_takes_size_and_refuses_other_columns(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        Image.new("RGB", (6, 5)).save(tmp_path / name / "0.png")
    train = reader_splits("image-folder", data=str(tmp_path), size=3)[0]
    assert [(image.shape, label) for image, label in train()] == [((3, 3, 3), 0), ((3, 3, 3), 1)]
    assert describe_roles(train) == (f"image = the image files under {tmp_path} (uint8[3, 3, 3]), "
                                     "label = the index of the class sub-folder")
    with pytest.raises(ValueError, match="its entries are \\(image, label\\): leave --columns out"):
        reader_splits("image-folder", data=str(tmp_path), columns="x,y")


def test_image_bytes_without_pillow_say_which_pip_install(monkeypatch):
    import sys
    png, _ = _png(1)
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL fails, as where Pillow is not installed
    with pytest.raises(ImportError, match=r"pip install pillow \(or pip install readerkit\[images\]\)"):
        list(decode_images(readers.from_sequence([(png, 0)]), ("image", "label"))())
