"""MNIST-format readers: generated IDX files, the decode cache, downloads, and the real files."""
import hashlib
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from readers.sources import mnist
from readers.sources.datafiles import DataFile, MissingDataError, cache_dir
from readers.sources.idx import IdxError, read_idx, write_idx
from tests.helpers import paths as _paths
from tests.readers.sources.test_datafiles import mirrors  # noqa: F401 (the local HTTP server fixture)

DATA = _paths.SHARED_DATA
LABELS = np.array([5, 0, 4, 1, 9], np.uint8)
NAMES = {  # split -> (images, labels) as published
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
SPLITS = {"train": mnist.train, "test": mnist.test}


def make_images(n: int = 5, seed: int = 0) -> np.ndarray:
    images = np.random.default_rng(seed).integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    images[0].flat[:256] = np.arange(256)  # every pixel value, for the scaling check
    return images


def write(folder, name: str, array: np.ndarray) -> Path:
    path = Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    write_idx(path, array, compress=name.endswith(".gz"))
    return path


def make_split(folder, split="train", images=None, labels=None, names=None):
    images = make_images() if images is None else images
    labels = LABELS if labels is None else labels
    image_name, label_name = names or NAMES[split]
    return write(folder, image_name, images), write(folder, label_name, labels)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh per-user cache for this test; returns the decoded-array folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return Path(cache_dir("decoded"))


def expected_entry(images: np.ndarray, i: int):
    return images[i].reshape(784).astype(np.float32) / np.float32(255), int(LABELS[i])


def assert_entry_equal(got, want):
    image, label = got
    assert image.dtype == np.float32 and image.shape == (784,)
    np.testing.assert_array_equal(image, want[0])
    assert type(label) is int and label == want[1]


# -- generated files --------------------------------------------------------


@pytest.mark.parametrize("split", sorted(SPLITS))
@pytest.mark.parametrize(
    "names",
    [
        None,  # the published gzipped names
        ("{}-images-idx3-ubyte", "{}-labels-idx1-ubyte"),
        ("{}-images.idx3-ubyte", "{}-labels.idx1-ubyte.gz"),  # dotted, as some archives unpack
        ("{}-images.idx3-ubyte.gz", "{}-labels.idx1-ubyte"),
    ],
    ids=["gzip", "plain", "dotted", "dotted-gzip"],
)
def test_mnist_reads_entries_from_data_dir(tmp_path, cache, split, names):
    stem = "train" if split == "train" else "t10k"
    if names is not None:
        names = tuple(n.format(stem) for n in names)
    images = make_images()
    make_split(tmp_path, split, images, names=names)
    r = SPLITS[split](tmp_path, download=False)
    assert r.split == split and len(r) == len(LABELS)
    for i in range(len(LABELS)):
        assert_entry_equal(r[i], expected_entry(images, i))
    assert_entry_equal(r[-1], expected_entry(images, 4))


def test_mnist_scales_pixels_exactly_by_division(tmp_path, cache):
    # regression: images were multiplied by float32(1/255), one ulp off x/255 for 126 of the 256 values
    images = make_images()
    make_split(tmp_path, images=images)
    image, _ = mnist.train(tmp_path)[0]
    x = np.arange(256, dtype=np.float32)
    np.testing.assert_array_equal(image[:256], x / np.float32(255))
    assert image[0] == 0.0 and image[255] == 1.0


def test_mnist_iteration_gives_every_entry_in_order_each_pass(tmp_path, cache):
    images = make_images()
    make_split(tmp_path, images=images)
    r = mnist.train(tmp_path)
    for _ in range(2):
        entries = list(r())
        assert len(entries) == len(LABELS)
        for i, entry in enumerate(entries):
            assert_entry_equal(entry, expected_entry(images, i))


@pytest.mark.parametrize("indices", [[4, 0, 2, 2], [3], list(range(5))[::-1], []])
def test_mnist_gather_and_gather_columns_agree_with_indexing(tmp_path, cache, indices):
    make_split(tmp_path)
    r = mnist.train(tmp_path)
    idx = np.array(indices, dtype=np.int64)
    entries = r.gather(idx)
    columns = r.gather_columns(idx)
    assert len(entries) == len(indices)
    for i, entry in zip(indices, entries):
        assert_entry_equal(entry, r[i])
    images, labels = columns
    assert images.dtype == np.float32 and images.shape == (len(indices), 784)
    assert labels.dtype == np.int64 and labels.tolist() == [r[i][1] for i in indices]
    np.testing.assert_array_equal(images, np.array([r[i][0] for i in indices], np.float32).reshape(-1, 784))


def test_mnist_is_lazy_and_has_a_repr(tmp_path):
    r = mnist.train(tmp_path / "nowhere", download=False)  # nothing read yet, so no error
    assert repr(r) == f"mnist('train', data_dir={str(tmp_path / 'nowhere')!r})"
    assert repr(mnist.test()) == "mnist('test')"


def test_mnist_label_count_mismatch_names_both_files(tmp_path, cache):
    image_path, label_path = make_split(tmp_path, labels=LABELS[:3])
    with pytest.raises(IdxError) as info:
        len(mnist.train(tmp_path))
    message = str(info.value)
    assert str(image_path) in message and str(label_path) in message
    assert "3 labels" in message and "5 images" in message


@pytest.mark.parametrize(
    "images, labels, bad, fault",
    [
        (np.zeros((5, 784), np.uint8), LABELS, 0, "holds uint8 of 2 dimensions, shape (5, 784), but uint8 of 3"),
        (np.zeros((5, 1, 28, 28), np.uint8), LABELS, 0, "holds uint8 of 4 dimensions"),
        (np.zeros((5, 28, 28), np.float32), LABELS, 0, "holds float32 of 3 dimensions"),
        (make_images(), LABELS.reshape(5, 1), 1, "holds uint8 of 2 dimensions"),
        (make_images(), LABELS.astype(np.float64), 1, "holds float64 of 1 dimension"),
    ],
    ids=["images-rank-2", "images-rank-4", "images-float", "labels-rank-2", "labels-float"],
)
def test_mnist_wrong_file_contents_name_the_file(tmp_path, cache, images, labels, bad, fault):
    paths = make_split(tmp_path, images=images, labels=labels)
    with pytest.raises(IdxError) as info:
        mnist.train(tmp_path)[0]
    assert str(info.value).startswith(f"{paths[bad]}: {fault}")


def test_mnist_corrupt_file_names_the_file(tmp_path, cache):
    image_path, _ = make_split(tmp_path)
    image_path.write_bytes(image_path.read_bytes()[:100])
    with pytest.raises(IdxError, match=f"^{image_path}: the gzip stream is corrupt or truncated"):
        len(mnist.train(tmp_path))


# -- the decode cache -------------------------------------------------------


def refuse_to_decode(path, **expect):
    raise AssertionError(f"read_idx({path!r}) called although a decoded copy is cached")


def test_mnist_decodes_once_then_memory_maps_the_cache(tmp_path, cache, monkeypatch):
    images = make_images()
    make_split(tmp_path, images=images)
    first = mnist.train(tmp_path)
    assert_entry_equal(first[1], expected_entry(images, 1))
    cached = sorted(os.listdir(cache))
    assert len(cached) == 2 and all(name.endswith(".npy") for name in cached)
    assert [n for n in cached if n.startswith("train-images-idx3-ubyte.gz.")]
    assert [n for n in cached if n.startswith("train-labels-idx1-ubyte.gz.")]

    monkeypatch.setattr(mnist, "read_idx", refuse_to_decode)
    second = mnist.train(tmp_path)
    assert_entry_equal(second[1], expected_entry(images, 1))
    assert all(mapped(a) for a in second.arrays())
    assert not any(isinstance(a, np.memmap) for a in second.arrays())  # (plain arrays: memmap indexes in Python)
    assert sorted(os.listdir(cache)) == cached


def mapped(a: np.ndarray) -> bool:
    """Whether ``a`` is a view of a memory-mapped file."""
    while a is not None and not isinstance(a, np.memmap):
        a = a.base if isinstance(a, np.ndarray) else None
    return a is not None


def entries(cache: Path, name: str) -> list[str]:
    """The decoded copies of the file called ``name`` in the decode cache."""
    return sorted(n for n in os.listdir(cache) if n.startswith(name + ".") and n.endswith(".npy"))


def spy_on_decoding(monkeypatch) -> list[str]:
    calls = []
    monkeypatch.setattr(mnist, "read_idx", lambda path, **expect: calls.append(os.path.basename(path)) or read_idx(path, **expect))
    return calls


@pytest.mark.parametrize("change", ["size", "content"])
def test_mnist_decodes_a_changed_file_again_and_keeps_the_old_copy(tmp_path, cache, monkeypatch, change):
    image_path, label_path = make_split(tmp_path)
    assert len(mnist.train(tmp_path)) == 5
    old = entries(cache, label_path.name)
    before = os.stat(label_path)
    if change == "size":
        write(tmp_path, label_path.name, LABELS[:4])
        write(tmp_path, image_path.name, make_images(4))
        expected = LABELS[:4].tolist()
    else:  # other bytes, same size, and the same mtime: only the content tells
        expected = LABELS[::-1].tolist()
        write(tmp_path, label_path.name, LABELS[::-1].copy())
        assert os.stat(label_path).st_size == before.st_size
        os.utime(label_path, ns=(before.st_atime_ns, before.st_mtime_ns))

    calls = spy_on_decoding(monkeypatch)
    r = mnist.train(tmp_path)
    assert [label for _, label in r()] == expected
    assert label_path.name in calls
    # a new decoding next to the old one, which is not pruned
    now = entries(cache, label_path.name)
    assert len(now) == 2 and set(old) < set(now)
    assert not [n for n in os.listdir(cache) if n.endswith(".part")]


@pytest.mark.parametrize("change", ["mtime", "rewritten"])
def test_mnist_same_content_with_a_new_mtime_reuses_the_cache(tmp_path, cache, monkeypatch, change):
    # regression: the cache was keyed by size and mtime, so touching a file decoded it again
    images = make_images()
    paths = make_split(tmp_path, images=images)
    assert len(mnist.train(tmp_path)) == 5
    cached = sorted(os.listdir(cache))
    for path in paths:
        st = os.stat(path)
        if change == "rewritten":  # a new file (inode) with the same bytes, as an unpacked archive gives
            data = path.read_bytes()
            path.unlink()
            path.write_bytes(data)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))

    monkeypatch.setattr(mnist, "read_idx", refuse_to_decode)
    r = mnist.train(tmp_path)
    assert_entry_equal(r[2], expected_entry(images, 2))
    assert sorted(os.listdir(cache)) == cached


def test_mnist_changing_a_file_back_reuses_its_first_decoding(tmp_path, cache, monkeypatch):
    _, label_path = make_split(tmp_path)
    original = label_path.read_bytes()
    assert len(mnist.train(tmp_path)) == 5
    write(tmp_path, label_path.name, LABELS[::-1].copy())
    assert [label for _, label in mnist.train(tmp_path)()] == LABELS[::-1].tolist()
    label_path.write_bytes(original)
    calls = spy_on_decoding(monkeypatch)
    assert [label for _, label in mnist.train(tmp_path)()] == LABELS.tolist()
    assert calls == []
    assert len(entries(cache, label_path.name)) == 2


def test_mnist_same_content_in_two_folders_is_decoded_and_stored_once(tmp_path, cache, monkeypatch):
    # regression: the cache was keyed by the file's path, so each folder got its own decoded copy
    images = make_images()
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    for path in make_split(first, images=images):
        (second / path.name).write_bytes(path.read_bytes())
    assert_entry_equal(mnist.train(first)[1], expected_entry(images, 1))
    cached = sorted(os.listdir(cache))
    assert len(cached) == 2

    monkeypatch.setattr(mnist, "read_idx", refuse_to_decode)
    r = mnist.train(second)
    assert r.paths() == (str(second / NAMES["train"][0]), str(second / NAMES["train"][1]))
    assert_entry_equal(r[1], expected_entry(images, 1))
    assert sorted(os.listdir(cache)) == cached


def test_mnist_different_content_in_two_folders_is_not_confused(tmp_path, cache):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    make_split(first, images=make_images(seed=1))
    make_split(second, images=make_images(seed=2), labels=LABELS[::-1].copy())
    assert [label for _, label in mnist.train(first)()] == LABELS.tolist()
    assert [label for _, label in mnist.train(second)()] == LABELS[::-1].tolist()
    np.testing.assert_array_equal(mnist.train(second)[3][0], expected_entry(make_images(seed=2), 3)[0])
    assert len(os.listdir(cache)) == 4


def test_mnist_damaged_cache_entry_is_decoded_again(tmp_path, cache):
    images = make_images()
    make_split(tmp_path, images=images)
    len(mnist.train(tmp_path))
    for name in os.listdir(cache):
        (cache / name).write_bytes(b"\x93NUMPY damaged")
    assert_entry_equal(mnist.train(tmp_path)[2], expected_entry(images, 2))


def test_mnist_works_with_an_unusable_cache_folder(tmp_path, cache):
    images = make_images()
    make_split(tmp_path, images=images)
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"")  # a file where the folder should be: nothing can be cached
    assert_entry_equal(mnist.train(tmp_path)[3], expected_entry(images, 3))


def test_mnist_failed_cache_write_leaves_no_part_file(tmp_path, cache, monkeypatch):
    # regression: a failing np.save (disk full) left a .npy.part file behind in the cache
    def disk_full(file, array):
        file.write(b"\x93NUMPY partial")
        raise OSError(28, "No space left on device")

    images = make_images()
    make_split(tmp_path, images=images)
    monkeypatch.setattr(mnist.np, "save", disk_full)
    assert_entry_equal(mnist.train(tmp_path)[3], expected_entry(images, 3))
    assert os.listdir(cache) == []


def test_mnist_pickle_does_not_carry_the_arrays(tmp_path, cache):
    images = make_images(200)
    labels = np.arange(200, dtype=np.uint8) % 10
    make_split(tmp_path, images=images, labels=labels)
    r = mnist.train(tmp_path)
    assert len(r) == 200  # loaded
    data = pickle.dumps(r)
    assert len(data) < 2000  # the images alone are 156 800 bytes
    copy = pickle.loads(data)
    assert copy._arrays is None and r._arrays is not None
    assert len(copy) == 200
    np.testing.assert_array_equal(copy[7][0], r[7][0])


# -- missing files and downloads ------------------------------------------------


@pytest.mark.parametrize("present", [(), ("images",)])
def test_mnist_offline_error_lists_missing_files_and_folders(tmp_path, cache, monkeypatch, present):
    env = tmp_path / "env"
    monkeypatch.setenv("READERKIT_DATA", str(env))
    if present:
        write(env, NAMES["train"][0], make_images())
    r = mnist.train(download=False)
    with pytest.raises(MissingDataError) as info:
        len(r)
    message = str(info.value)
    missing = NAMES["train"][1:] if present else NAMES["train"]
    assert message.startswith(f"mnist {'file' if present else 'files'} {', '.join(missing)} not found; ")
    if present:
        assert NAMES["train"][0] not in message
    assert f"looked in: {env}, {env / 'mnist'}, {cache_dir('mnist')} (" in message
    assert "all of a dataset's files must be in one folder" in message
    assert "Download: off (--no-download)" in message
    assert "--data-dir DIR" in message and "READERKIT_DATA=DIR" in message


@pytest.mark.parametrize("present", [(), ("images",)])
@pytest.mark.parametrize("download", [True, False])
def test_mnist_explicit_folder_error_lists_missing_files_and_its_folders(tmp_path, cache, monkeypatch, present,
                                                                         download):
    monkeypatch.setenv("READERKIT_DATA", str(tmp_path / "env"))
    given = tmp_path / "given"
    given.mkdir()
    if present:
        write(given, NAMES["train"][0], make_images())
    with pytest.raises(MissingDataError) as info:
        len(mnist.train(given, download=download))
    message = str(info.value)
    missing = NAMES["train"][1:] if present else NAMES["train"]
    assert message.startswith(f"mnist {'file' if present else 'files'} {', '.join(missing)} not found; "
                              f"looked in: {given}, {given / 'mnist'} (")
    assert str(tmp_path / "env") not in message and cache_dir("mnist") not in message
    assert f"Download: not tried for an explicit folder ({given})" in message
    assert not os.path.exists(cache_dir("mnist"))


@pytest.fixture
def generated_mirror(tmp_path, cache, monkeypatch, mirrors):  # noqa: F811 (the imported fixture)
    """The local server serves generated files; MIRRORS and FILES point at them."""
    src = tmp_path / "src"
    src.mkdir()
    images = make_images()
    files = []
    for path in make_split(src, images=images):
        mirrors.files[path.name] = path.read_bytes()
        files.append(DataFile(path.name, hashlib.sha256(path.read_bytes()).hexdigest()))
    monkeypatch.setattr(mnist, "MIRRORS", [mirrors.url("missing"), mirrors.url("ok")])
    monkeypatch.setitem(mnist.FILES, "train", tuple(files))
    return mirrors, images


def test_mnist_downloads_missing_files_into_the_cache(generated_mirror):
    server, images = generated_mirror
    reports = []
    r = mnist.train(progress=lambda file, url: lambda done, total: reports.append((file.name, done, total)))
    assert_entry_equal(r[4], expected_entry(images, 4))
    assert sorted(os.listdir(cache_dir("mnist"))) == sorted(NAMES["train"])
    assert server.requests == [f"/{m}/{name}" for name in NAMES["train"] for m in ("missing", "ok")]
    assert {name for name, _, _ in reports} == set(NAMES["train"])
    assert all(done == total for _, done, total in reports[-1:])
    # the second reader finds the downloaded files and asks no mirror
    assert len(mnist.train()) == 5 and len(server.requests) == 4


def test_mnist_download_rejects_files_with_the_wrong_checksum(generated_mirror, monkeypatch):
    images, labels = mnist.FILES["train"]
    monkeypatch.setitem(mnist.FILES, "train", (DataFile(images.name, "0" * 64), labels))
    with pytest.raises(MissingDataError, match=r"does not match the published 0{64}") as info:
        len(mnist.train())
    assert str(info.value).startswith(f"mnist file {images.name} not found")
    assert os.listdir(cache_dir("mnist")) == [labels.name]  # no partial or unchecked file


# -- the real files (../shared/data) ----------------------------------------------


def real(name: str) -> Path:
    folder = DATA / name
    if not folder.is_dir():
        pytest.skip(f"the real {name} files are not in {folder} (see issue 3: ../shared/data/{name})")
    return folder


@pytest.mark.parametrize("split, length, first_label", [("train", 60000, 5), ("test", 10000, 7)])
def test_mnist_real_files_have_the_published_sizes(split, length, first_label):
    r = SPLITS[split](real("mnist"), download=False)
    assert len(r) == length
    image, label = r[0]
    assert label == first_label and image.shape == (784,) and float(image.max()) == 1.0
    idx = np.array([0, length - 1, 12345 % length])
    np.testing.assert_array_equal(r.gather_columns(idx)[0], np.stack([e[0] for e in r.gather(idx)]))


@pytest.mark.parametrize("file", [f for pair in mnist.FILES.values() for f in pair], ids=lambda f: f.name)
def test_mnist_real_files_match_the_published_checksums(file):
    data = (real("mnist") / file.name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == file.sha256


@pytest.mark.parametrize("split, length, first_label", [("train", 60000, 9), ("test", 10000, 9)])
def test_mnist_reads_fashion_mnist_via_data_dir(split, length, first_label):
    r = SPLITS[split](real("fashion-mnist"), download=False)
    assert len(r) == length and r[0][1] == first_label


# -- a split's two files always come from one folder -------------------------------


def test_mnist_data_dir_with_only_fashion_images_never_borrows_mnist_labels(tmp_path, cache, monkeypatch,
                                                                            generated_mirror):
    # regression: Fashion-MNIST images from --data-dir were paired with MNIST labels from READERKIT_DATA
    # (and would have been paired with downloaded ones) and trained without an error
    server, _ = generated_mirror
    env = tmp_path / "env"
    make_split(env)  # a complete MNIST-like set
    monkeypatch.setenv("READERKIT_DATA", str(env))
    fashion = tmp_path / "fashion"
    fashion.mkdir()
    write(fashion, NAMES["train"][0], make_images(seed=7))  # Fashion-MNIST-like images only
    with pytest.raises(MissingDataError) as info:
        len(mnist.train(fashion))
    message = str(info.value)
    assert message.startswith(f"mnist file {NAMES['train'][1]} not found; looked in: {fashion}, {fashion / 'mnist'} (")
    assert str(env) not in message
    assert server.requests == []
    assert not os.path.exists(cache_dir("mnist"))


def test_mnist_partial_readerkit_data_is_passed_over_for_a_complete_cache(tmp_path, cache, monkeypatch,
                                                                          generated_mirror):
    # regression: the images in READERKIT_DATA were paired with the labels in the cache
    server, images = generated_mirror
    env = tmp_path / "env"
    write(env, NAMES["train"][0], make_images(seed=7))  # another dataset's images only
    monkeypatch.setenv("READERKIT_DATA", str(env))
    make_split(cache_dir("mnist"), images=images)
    for download in (False, True):
        r = mnist.train(download=download)
        assert r.paths() == tuple(os.path.join(cache_dir("mnist"), name) for name in NAMES["train"])
        for i in range(len(LABELS)):
            assert_entry_equal(r[i], expected_entry(images, i))
    assert server.requests == []


def test_mnist_partial_readerkit_data_downloads_the_whole_set_into_the_cache(tmp_path, cache, monkeypatch,
                                                                             generated_mirror):
    # regression: the images in READERKIT_DATA were kept and only the labels downloaded
    server, images = generated_mirror
    env = tmp_path / "env"
    write(env, NAMES["train"][0], make_images(seed=7))
    monkeypatch.setenv("READERKIT_DATA", str(env))
    r = mnist.train()
    assert r.paths() == tuple(os.path.join(cache_dir("mnist"), name) for name in NAMES["train"])
    assert_entry_equal(r[0], expected_entry(images, 0))
    assert sorted(server.requests) == sorted(f"/{m}/{name}" for name in NAMES["train"] for m in ("missing", "ok"))


def test_mnist_image_file_given_as_labels_is_named_as_the_wrong_kind_not_truncated(tmp_path, cache):
    """New-user trial (issue 12): a label file of the image file's IDX type reported a nonsense truncated count."""
    images = np.zeros((4, 28, 28), np.uint8)
    write_idx(tmp_path / "train-images-idx3-ubyte", images)
    raw = (tmp_path / "train-images-idx3-ubyte").read_bytes()
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(raw[:200])  # the images' header, cut short
    with pytest.raises(IdxError, match=r"holds uint8 of 3 dimensions.*but uint8, int8, int16 or int32 of 1 dimension") as caught:
        len(mnist.train(tmp_path, download=False))
    assert "truncated" not in str(caught.value)
