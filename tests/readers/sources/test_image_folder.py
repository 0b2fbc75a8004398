"""image_folder: classes and labels, decoding and modes, resizing, exactly once under shuffle/shard/workers/resume,
bad files named, the plugin. Every image is written by Pillow."""
import os
import pickle
import sys

import numpy as np
import pytest

Image = pytest.importorskip("PIL.Image")

import batching  # noqa: E402
import cli  # noqa: E402
import readers  # noqa: E402
from readers.identity import fingerprint  # noqa: E402
from readers.plugins.registry import find_reader, reader_splits  # noqa: E402
from readers.sources import image_folder as module  # noqa: E402
from readers.sources.image_folder import ImageDecodeError, PillowMissing, image_folder  # noqa: E402
from readers.testing import assert_resumes_at_every_step, assert_seeded_passes  # noqa: E402
from tests.helpers.layouts import as_rank  # noqa: E402

CLASSES = ["bird", "cat", "dog"]
PER_CLASS = {"bird": 3, "cat": 4, "dog": 2}  # uneven, so shards and classes do not line up


def pixels(label: int, k: int, shape=(5, 7, 3)) -> np.ndarray:
    """An image unique to (label, k): its first pixel says which."""
    rng = np.random.default_rng(100 * label + k)
    image = rng.integers(0, 256, size=shape, dtype=np.uint8)
    image[0, 0, :2] = label, k
    return image


def write_folder(root, *, png=True) -> list[tuple[str, np.ndarray, int]]:
    """PNG files (lossless, so compared exactly; else JPEGs of one colour) in one sub-folder per class; (path,
    pixels, label) in order."""
    written = []
    for label, name in enumerate(CLASSES):
        os.makedirs(root / name, exist_ok=True)
        for k in range(PER_CLASS[name]):
            path = root / name / f"{k:03d}.{'png' if png else 'jpg'}"
            image = pixels(label, k) if png else np.full((8, 8, 3), (60 * label, 40 * k, 128), np.uint8)
            Image.fromarray(image).save(path, **({} if png else {"quality": 95}))
            written.append((str(path), image, label))
    return written


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "images"
    return root, write_folder(root)


def key(entry) -> tuple[int, int]:
    image, label = entry
    return int(image[0, 0, 0]), int(image[0, 0, 1])


def every_key(written) -> list[tuple[int, int]]:
    return sorted((label, int(image[0, 0, 1])) for _, image, label in written)


def test_image_folder_reads_back_what_pillow_wrote_with_sorted_classes_as_labels(folder):
    root, written = folder
    r = image_folder(root)
    assert r.classes == CLASSES and r.class_to_idx == {"bird": 0, "cat": 1, "dog": 2}
    assert len(r) == len(written)
    entries = list(r())
    for (path, image, label), (got, got_label), i in zip(written, entries, range(len(r))):
        assert got.dtype == np.uint8 and got.shape == (5, 7, 3)
        np.testing.assert_array_equal(got, image)
        assert got_label == label and type(got_label) is int
        assert r.path(i) == path


def test_image_folder_jpeg_decodes_as_pillow_does(tmp_path):
    written = write_folder(tmp_path, png=False)
    r = image_folder(tmp_path)
    for (path, image, _), (got, _) in zip(written, r()):
        with Image.open(path) as stored:
            np.testing.assert_array_equal(got, np.asarray(stored.convert("RGB")))
        assert np.abs(got.astype(int) - image).max() <= 3  # lossy, but the same picture


def test_image_folder_orders_classes_sorted_and_files_within_each(tmp_path):
    for name in ["cat-x/b.png", "cat/z.png", "cat/a.png", "cat/deeper/m.png", "Zebra/q.png"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (2, 2)).save(tmp_path / name)
    Image.new("RGB", (2, 2)).save(tmp_path / "loose.png")  # in no class folder: left out
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    r = image_folder(tmp_path)
    assert r.classes == ["Zebra", "cat", "cat-x"]
    below = [os.path.relpath(r.path(i), tmp_path) for i in range(len(r))]
    assert below == ["Zebra/q.png", "cat/a.png", "cat/deeper/m.png", "cat/z.png", "cat-x/b.png"]
    assert [label for _, label in r()] == [0, 1, 1, 1, 2]


def test_image_folder_classes_fix_the_labels_of_a_folder_missing_some(folder, tmp_path):
    root, _ = folder
    val = tmp_path / "val"
    (val / "dog").mkdir(parents=True)
    Image.fromarray(pixels(2, 0)).save(val / "dog" / "0.png")
    assert [label for _, label in image_folder(val)()] == [0]
    r = image_folder(val, classes=image_folder(root).classes)
    assert [label for _, label in r()] == [2] and r.classes == CLASSES
    with pytest.raises(readers.BadValue, match=r"the sub-folders \['dog'\] hold images but are not in classes"):
        len(image_folder(val, classes=["bird", "cat"]))


@pytest.mark.parametrize("mode, source_mode, want", [
    ("RGB", "L", lambda a: np.repeat(a[:, :, None], 3, axis=2)),  # gray copied to three channels
    ("RGB", "RGBA", lambda a: a[:, :, :3]),  # alpha dropped, not composited
    ("RGB", "LA", lambda a: np.repeat(a[:, :, :1], 3, axis=2)),
    ("L", "L", lambda a: a[:, :, None]),
    ("RGBA", "RGB", lambda a: np.concatenate([a, np.full(a.shape[:2] + (1,), 255, np.uint8)], axis=2)),
    ("RGBA", "RGBA", lambda a: a),
])
def test_image_folder_converts_every_image_to_its_mode(tmp_path, mode, source_mode, want):
    channels = {"L": (), "LA": (2,), "RGB": (3,), "RGBA": (4,)}[source_mode]
    stored = np.random.default_rng(0).integers(0, 256, size=(4, 6, *channels), dtype=np.uint8)
    (tmp_path / "c").mkdir()
    Image.fromarray(stored, source_mode).save(tmp_path / "c" / "0.png")
    image, _ = image_folder(tmp_path, mode=mode)[0]
    np.testing.assert_array_equal(image, want(stored))


def test_image_folder_l_mode_of_a_colour_image_is_pillows_luma(folder):
    root, written = folder
    image, _ = image_folder(root, mode="L")[0]
    assert image.shape == (5, 7, 1)
    np.testing.assert_array_equal(image[:, :, 0], np.asarray(Image.fromarray(written[0][1]).convert("L")))


@pytest.mark.parametrize("size, shape", [(4, (4, 4)), ((3, 9), (3, 9)), ((5, 7), (5, 7))])
def test_image_folder_size_resizes_as_pillow_and_batches_stack(folder, size, shape):
    root, written = folder
    r = image_folder(root, size=size)
    image, _ = r[1]
    want = Image.fromarray(written[1][1]).resize((shape[1], shape[0]), Image.Resampling.BILINEAR)
    np.testing.assert_array_equal(image, np.asarray(want))
    images, labels = r.gather_columns(np.array([4, 0, 8]))
    assert images.shape == (3, *shape, 3) and images.dtype == np.uint8
    assert labels.tolist() == [1, 0, 2] and labels.dtype == np.int64
    np.testing.assert_array_equal(images[1], r[0][0])
    first = next(iter(batching.batch(r, 4)()))
    assert np.stack([image for image, _ in first]).shape == (4, *shape, 3)


def test_image_folder_a_large_jpeg_decodes_at_reduced_scale_close_to_a_full_decode(tmp_path):
    yy, xx = np.mgrid[0:64, 0:96]
    smooth = np.stack([xx * 2, yy * 3, (xx + yy) % 256], -1).astype(np.uint8)
    (tmp_path / "c").mkdir()
    Image.fromarray(smooth).save(tmp_path / "c" / "0.jpg", quality=95)
    image, _ = image_folder(tmp_path, size=(16, 24))[0]
    with Image.open(tmp_path / "c" / "0.jpg") as stored:
        full = np.asarray(stored.convert("RGB").resize((24, 16), Image.Resampling.BILINEAR))
    assert image.shape == (16, 24, 3) and np.abs(image.astype(int) - full).mean() < 3


def test_image_folder_without_size_keeps_each_images_own_size(tmp_path):
    for name, (w, h) in [("a/0.png", (3, 2)), ("a/1.png", (5, 4))]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        Image.new("RGB", (w, h)).save(tmp_path / name)
    r = image_folder(tmp_path)
    assert [image.shape for image, _ in r()] == [(2, 3, 3), (4, 5, 3)]
    assert r.gather_columns(np.array([0, 1])) is None


@pytest.mark.parametrize("options, message", [
    ({"size": 0}, "size must be an int >= 1 (a square) or a pair (height, width) of them, got 0"),
    ({"size": (3,)}, "got (3,)"),
    ({"size": True}, "got True"),
    ({"size": "28"}, "got '28'"),
    ({"mode": "CMYK"}, "mode must be one of ['L', 'RGB', 'RGBA'], got 'CMYK'"),
    ({"classes": "cat"}, "classes must be a list of sub-folder names"),
    ({"classes": ["a", "a"]}, "classes has repeated names"),
])
def test_image_folder_refuses_bad_options_when_called(tmp_path, options, message):
    with pytest.raises((readers.BadValue, readers.BadType)) as info:
        image_folder(tmp_path, **options)
    assert message in str(info.value)


def test_image_folder_is_lazy_and_names_a_folder_without_classes(tmp_path):
    r = image_folder(tmp_path / "later")  # nothing is listed yet
    (tmp_path / "later").mkdir()
    Image.new("RGB", (2, 2)).save(tmp_path / "later" / "loose.png")
    with pytest.raises(readers.MissingFile, match="no class sub-folders with images; image_folder reads root/<class>"):
        len(r)
    with pytest.raises(readers.MissingFile, match="nothing.*: no image files"):
        list(image_folder(tmp_path / "nothing")())
    (tmp_path / "later" / "c").mkdir()
    Image.new("RGB", (2, 2)).save(tmp_path / "later" / "c" / "0.png")
    assert len(image_folder(tmp_path / "later")) == 1


# -- exactly once -------------------------------------------------------------------------------


def test_image_folder_shuffle_and_three_shards_give_each_image_once(folder):
    root, written = folder
    shuffled = readers.shuffle(image_folder(root), seed=3)
    parts = [[key(e) for e in readers.shard(shuffled, i, 3)()] for i in range(3)]
    assert sorted(sum(parts, [])) == every_key(written)
    assert [key(e) for e in shuffled()] != every_key(written)  # shuffled indeed (pass 1 of a seeded shuffle)


def test_image_folder_three_ranks_shard_by_global_worker_id(folder):
    root, written = folder
    got = []
    for rank in range(3):
        as_rank(rank, 3)
        got += [key(e) for e in readers.shard(readers.shuffle(image_folder(root), seed=1))()]
    assert sorted(got) == every_key(written)


def test_image_folder_process_workers_give_each_image_once(folder):
    root, written = folder
    r = readers.prefetch(readers.shard(readers.shuffle(image_folder(root, size=(5, 7)), seed=2)), 3, mode="process")
    got = [key(e) for e in r()]
    assert sorted(got) == every_key(written)
    alone = [key(e) for e in readers.shard(readers.shuffle(image_folder(root, size=(5, 7)), seed=2), 0, 1)()]
    assert got == alone  # round-robin merge of the global workers' shares: the order of one reader


@pytest.mark.parametrize("shuffled", [False, True])
def test_image_folder_resumes_at_every_step(folder, shuffled):
    root, _ = folder
    assert_resumes_at_every_step(lambda: readers.shuffle(image_folder(root), seed=5) if shuffled else image_folder(root))


def test_image_folder_shuffle_is_seeded_per_pass(folder):
    root, _ = folder
    assert_seeded_passes(lambda: readers.shuffle(image_folder(root), seed=7))


def test_image_folder_resumed_on_three_shards_sees_the_rest_once(folder):
    root, written = folder
    make = lambda: readers.shuffle(image_folder(root), seed=4)  # noqa: E731
    it = make()()
    head = [key(next(it)) for _ in range(4)]
    state = it.get_state()
    rest = []
    for i in range(3):
        part = readers.shard(make(), i, 3)
        part.set_state(state)
        rest += [key(e) for e in part()]
    assert sorted(head + rest) == every_key(written)


# -- pickles, identity ---------------------------------------------------------------------------


def test_image_folder_pickles_with_its_listing(folder):
    root, written = folder
    r = image_folder(root, size=3)
    len(r)
    again = pickle.loads(pickle.dumps(r))
    assert again._listing is not None and len(again) == len(written)
    np.testing.assert_array_equal(again[2][0], r[2][0])


def test_image_folder_fingerprint_follows_the_images_not_the_folder(folder, tmp_path):
    root, written = folder
    copy = tmp_path / "copy"
    write_folder(copy)
    a, b = fingerprint(image_folder(root, size=4)), fingerprint(image_folder(copy, size=4))
    assert a == b and "folder" in a["pipeline"][0]
    Image.fromarray(pixels(9, 9)).save(written[0][0])  # same names, other pixels
    assert fingerprint(image_folder(root, size=4))["content"] != a["content"]


# -- faults -------------------------------------------------------------------------------------


def test_image_folder_names_a_file_that_is_not_an_image(folder):
    root, written = folder
    bad = root / "cat" / "999.jpg"
    bad.write_bytes(b"this is no JPEG")
    r = image_folder(root)
    i = next(i for i in range(len(r)) if r.path(i) == str(bad))
    with pytest.raises(ImageDecodeError, match=rf"{bad} does not decode as an image \(UnidentifiedImageError"):
        r[i]
    with pytest.raises(ImageDecodeError, match="replace the file, or remove it from the folder"):
        list(r())


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_image_folder_names_a_truncated_image(folder, fmt):
    root, _ = folder
    path = root / "dog" / f"cut.{fmt.lower()}"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(path, fmt)
    whole = path.read_bytes()
    path.write_bytes(whole[:len(whole) // 2])
    r = image_folder(root)
    i = next(i for i in range(len(r)) if r.path(i) == str(path))
    with pytest.raises(ImageDecodeError, match=rf"{path} does not decode as an image \("):
        r[i]


def test_image_folder_bad_file_in_a_process_worker_reaches_the_consumer_named(folder):
    root, _ = folder
    bad = root / "bird" / "zzz.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    r = readers.prefetch(image_folder(root), 2, mode="process")
    with pytest.raises(ImageDecodeError, match=str(bad)):
        list(r())


def test_image_folder_without_pillow_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(PillowMissing, match=r"pip install pillow \(or pip install readerkit\[images\]\)") as info:
        image_folder(tmp_path)
    assert isinstance(info.value, ModuleNotFoundError) and isinstance(info.value, readers.ReaderkitError)


# -- the plugin ---------------------------------------------------------------------------------


def test_image_folder_is_the_builtin_reader_image_folder(folder):
    root, written = folder
    assert find_reader("image-folder") is module.from_data_dir
    train, test = reader_splits("image-folder", data_dir=str(root), download=False)
    assert len(train) == len(written) and test is None
    with pytest.raises(readers.BadValue, match="give --data-dir ROOT"):
        reader_splits("image-folder", data_dir=None)


def test_cli_inspect_reads_an_image_folder(folder):
    from click.testing import CliRunner
    root, written = folder
    result = CliRunner().invoke(cli.main, ["inspect", "--reader", "image-folder", "--data-dir", str(root)])
    assert result.exit_code == 0, result.output
    assert "column 0: uint8[5, 7, 3]" in result.output and "column 1: int (int64)" in result.output
    assert f"length: {len(written)}" in result.output
