"""train.feeds: what train() reads from the first entries: batched providers, model sizes, raw pixels."""
import inspect
import os
import re
import warnings

import numpy as np
import pytest

import batching
import readers
from readers.plans import CHUNK
from train.driver import train
from train.feeds import infer_sizes, warn_unscaled


def blobs(n=120, features=6, classes=3, dtype=np.float32):
    rng = np.random.default_rng(0)
    y = np.arange(n) % classes
    x = (rng.normal(size=(n, features)) + 3 * np.eye(classes, features)[y]).astype(dtype)
    return x, y


@pytest.mark.parametrize("wrap", [lambda r: batching.batch(r, 32), lambda r: batching.collated(batching.batch(r, 8)),
                                  lambda r: readers.prefetch(batching.batch(r, 8), 1)])
def test_train_given_a_batched_pipeline_says_so(wrap):
    """New-user trial (issue 12): a batched provider failed with "got float32 of shape (32, 64, 8)"."""
    x, y = blobs()
    with pytest.raises(TypeError, match=r"the provider is batched already \(it holds batch\(batch_size="):
        train(wrap(readers.from_arrays(x, y)), ["image", "label"], 16, 1, model="softmax")


def test_a_built_in_model_takes_its_sizes_from_the_data():
    """New-user trial (issue 12): model="mlp" assumed 784 inputs and 10 classes."""
    x, y = blobs(features=6, classes=3)
    history = train(readers.from_arrays(x, y), ["image", "label"], 16, 3, model="mlp")
    assert history[-1]["train_accuracy"] > 0.9


def test_infer_sizes_reads_a_stream_and_says_how_far():
    def rows():
        for i in range(20_000):
            yield np.zeros((2, 2), np.float32), i % 7
    assert infer_sizes(rows, {"image": 0, "label": 1}) == (
        4, 7, "image float32[2, 2]: 4 inputs; labels 0..6 in the first 10,000 entries: 7 classes")


@pytest.mark.parametrize("label, match", [(1.5, r"holds 1.5 \(float\)"), ("cat", "holds 'cat' \\(str\\)")])
def test_infer_sizes_refuses_labels_that_are_not_integers(label, match):
    with pytest.raises(TypeError, match=match):
        infer_sizes(readers.from_sequence([(np.zeros(2), label)]), {"image": 0, "label": 1})


def test_infer_sizes_of_an_empty_reader_is_an_error():
    with pytest.raises(ValueError, match="gave no entries"):
        infer_sizes(readers.from_sequence([]), {"image": 0, "label": 1})


def test_unscaled_uint8_images_draw_one_warning():
    """New-user trial (issue 12): uint8 pixels trained silently and badly."""
    x, y = blobs(dtype=np.float32)
    pixels = np.clip(x * 40 + 128, 0, 255).astype(np.uint8)
    with pytest.warns(RuntimeWarning, match=r"input 'image' holds uint8 values up to 255") as caught:
        train(readers.from_arrays(pixels, y), ["image", "label"], 16, 2, model="softmax")
    assert len([w for w in caught if "far outside" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(readers.from_arrays(x / 4, y), ["image", "label"], 16, 1, model="softmax")


def test_warn_unscaled_ignores_labels_and_per_entry_values():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_unscaled({"label": np.array([200, 3]), "target": np.array([900.0, 1.0]),
                                  "image": np.zeros((2, 3))})


def test_infer_sizes_needs_the_image_and_label_inputs():
    with pytest.raises(ValueError, match=r"names no 'label' input; a built-in model reads 'image' and 'label'"):
        infer_sizes(readers.from_sequence([(np.zeros(2), 1)]), {"image": 0, "y": 1})


class SortedLabels(readers.IndexedReader):
    """n entries whose labels run 0..classes-1 in order, as files sorted by class are; counts what is read."""

    name = "sorted_labels"

    def __init__(self, n, classes, columnar):
        super().__init__()
        self.n, self.classes, self.columnar, self.reads = n, classes, columnar, []

    def __len__(self):
        return self.n

    def _get(self, i):
        self.reads.append(1)
        return np.zeros(3, np.float32), i * self.classes // self.n

    def gather_columns(self, indices):
        if not self.columnar:
            return None
        self.reads.append(len(indices))
        return np.zeros((len(indices), 3), np.float32), indices * self.classes // self.n


@pytest.mark.parametrize("columnar", [True, False])
@pytest.mark.parametrize("n, where", [(60_000, "in 10,000 entries spread over all 60,000"), (6, "in all 6 entries")])
def test_infer_sizes_counts_sorted_labels_over_all_of_an_indexed_reader(n, where, columnar):
    """New-user trial: labels sorted by class (all 0s first) read from the first 10,000 entries gave 2 classes."""
    reader = SortedLabels(n, 10 if n > 10 else 3, columnar)
    classes = reader.classes
    assert infer_sizes(reader, {"image": 0, "label": 1}) == (
        3, classes, f"image float32[3]: 3 inputs; labels 0..{classes - 1} {where}: {classes} classes")
    assert sum(reader.reads) == min(n, 10_000)  # at most 10,000 entries, however long the reader
    assert max(reader.reads) <= (CHUNK if columnar else 1)
    assert reader.next_pass == 0  # random access: no pass was started


def test_infer_sizes_counts_sorted_labels_of_from_arrays():
    x, y = np.zeros((60_000, 2), np.uint8), np.repeat(np.arange(10), 6_000)
    assert infer_sizes(readers.from_arrays(x, y), ["image", "label"]) == (
        2, 10, "image uint8[2]: 2 inputs; labels 0..9 in 10,000 entries spread over all 60,000: 10 classes")


def negative_at_30000(n=60_000):
    y = np.zeros(n, np.int64)
    y[30_000:] = -1
    return readers.from_arrays(np.zeros((n, 2), np.float32), y), y


@pytest.mark.parametrize("make", [
    lambda: (readers.from_arrays(np.zeros((6, 2)), np.array([0, 1, 1, 0, -1, 2])), 4),
    lambda: (readers.from_sequence([(np.zeros(2), y) for y in [0, 1, 1, 0, -1, 2]]), 4),
    lambda: (lambda: iter([(np.zeros(2), y) for y in [0, 1, 1, 0, -1, 2]]), 4),
    lambda: (negative_at_30000()[0], None),
])
def test_infer_sizes_names_a_negative_label(make):
    """New-user trial: a -1 label showed "labels 0..0"; it is an error naming the entry's index in the reader."""
    reader, index = make()
    with pytest.raises(ValueError, match=r"^entry (\d+): the 'label' column holds the label -1; labels must be "
                                         r"0\.\.classes-1: renumber them in the reader") as info:
        infer_sizes(reader, {"image": 0, "label": 1})
    at = int(str(info.value).split(":")[0].split()[1])
    if index is not None:
        assert at == index
    else:  # a position in the reader, not in the spread-out sample (whose 5,000th entry is the reader's 30,000th)
        assert at >= 30_000 and negative_at_30000()[1][at] == -1


ONE_HOT_HINT = "for one-hot labels give the index of the 1, e.g. readers.map_readers(lambda e: (e[0], int(np.argmax(e[1]))), reader)"


@pytest.mark.parametrize("reader, message", [
    (readers.from_sequence([(np.zeros(2), 0), (np.zeros(2), True)]),
     "entry 1: the 'label' column holds True (bool); a classifier needs one int label per entry, 0..classes-1"),
    (readers.from_arrays(np.zeros((3, 2)), np.array([False, True, True])),
     "entry 0: the 'label' column holds False (bool); a classifier needs one int label per entry"),
    (lambda: iter([(np.zeros(2), [0, 0, 1])]),
     "entry 0: the 'label' column holds [0, 0, 1] (list), not one int; a classifier needs one int label per entry, "
     f"0..classes-1: {ONE_HOT_HINT}"),
    (readers.from_arrays(np.zeros((3, 2)), np.eye(3, dtype=np.float32)),
     f"entry 0: the 'label' column holds [1.0, 0.0, 0.0] (a float32 array of shape (3,)), not one int; a classifier "
     f"needs one int label per entry, 0..classes-1: {ONE_HOT_HINT}"),
])
def test_infer_sizes_says_what_a_bool_or_one_hot_label_needs(reader, message):
    """New-user trial: a bool or one-hot label drew no useful hint."""
    with pytest.raises(TypeError) as info:
        infer_sizes(reader, {"image": 0, "label": 1})
    assert str(info.value).startswith(message)


def hinted(message, reader):
    """The reader that the ``e.g. readers.map_readers(...)`` of an error or warning message makes of ``reader``."""
    return eval(message.rsplit("e.g. ", 1)[1], {"readers": readers, "np": np, "reader": reader})


def test_the_one_hot_hint_works():
    one_hot = readers.from_arrays(np.zeros((4, 2), np.float32), np.eye(3, dtype=np.float32)[[0, 2, 1, 2]])
    with pytest.raises(TypeError, match="one-hot") as info:
        infer_sizes(one_hot, ["image", "label"])
    assert infer_sizes(hinted(str(info.value), one_hot), ["image", "label"])[:2] == (2, 3)


def ragged(images):
    column = np.empty(len(images), dtype=object)
    column[:] = images
    return column


@pytest.mark.parametrize("reader", [
    readers.from_sequence([(np.zeros((2, 2)), 0), (np.zeros((2, 2)), 1), (np.zeros((2, 3)), 0)]),
    lambda: iter([(np.zeros((2, 2)), 0), (np.zeros((2, 2)), 1), (np.zeros((2, 3)), 0)]),
    readers.from_arrays(ragged([np.zeros((2, 2)), np.zeros((2, 2)), np.zeros((2, 3))]), np.array([0, 1, 0])),
])
def test_infer_sizes_names_images_of_differing_shapes(reader):
    """New-user trial: images of differing shapes were not named, and failed later in collate."""
    with pytest.raises(ValueError, match=re.escape(
            "entry 2: the 'image' column has shape [2, 3], but entry 0's has [2, 2]; a model needs one shape for every "
            "entry: resize or pad the images in the reader")):
        infer_sizes(reader, {"image": 0, "label": 1})


@pytest.mark.parametrize("image, seen, advice", [
    (np.array([[0, 255]], np.uint8), "uint8 values up to 255", "divide them by 255"),
    (np.array([[0.0, 200.0]], np.float32), "float32 values up to 200", "divide them by 255"),
    (np.array([[-900.0, 1200.0]]), "float64 values from -900 to 1200", "Standardise them"),
    (np.array([[0, 4000]], np.uint16), "uint16 values from 0 to 4000", "Standardise them"),
])
def test_warn_unscaled_advice_fits_the_values(image, seen, advice):
    """New-user trial: the advice divided by 255 whatever the values were."""
    with pytest.warns(RuntimeWarning) as caught:
        assert warn_unscaled({"image": image})
    message = str(caught[0].message)
    assert message.startswith(f"input 'image' holds {seen}, far outside [0, 1]") and advice in message
    assert ("255" in message.split(":", 1)[1]) == (advice == "divide them by 255")


def test_the_divide_by_255_hint_works():
    """Review: the hint's lambda x, y: ... failed, since map_readers passes a tuple entry as one argument."""
    x, y = blobs()
    pixels = readers.from_arrays(np.clip(x * 40 + 128, 0, 255).astype(np.uint8), y)
    with pytest.warns(RuntimeWarning) as caught:
        warn_unscaled({"image": np.array([[0, 255]], np.uint8)})
    fixed = hinted(str(caught[0].message), pixels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(fixed, ["image", "label"], 16, 1, model="softmax")


@pytest.mark.parametrize("checkpoints", [False, True])
def test_warn_unscaled_points_at_the_users_call_of_train(checkpoints, tmp_path):
    """New-user trial: the warning pointed at a line inside train/driver.py."""
    x, y = blobs()
    data = readers.from_arrays((x * 100).astype(np.float32), y)
    folder = str(tmp_path) if checkpoints else None
    with pytest.warns(RuntimeWarning, match="far outside") as caught:
        line = inspect.currentframe().f_lineno + 1
        train(data, ["image", "label"], 16, 1, model="softmax", checkpoints=folder)
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)


def test_warn_unscaled_points_at_its_caller_or_where_told():
    with pytest.warns(RuntimeWarning) as caught:
        line = inspect.currentframe().f_lineno + 1
        warn_unscaled({"image": np.full((2, 2), 99.0)})
        warn_unscaled({"image": np.full((2, 2), 99.0)}, stacklevel=1)
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)
    assert caught[1].filename.endswith(os.path.join("train", "feeds.py"))
