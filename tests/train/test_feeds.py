"""train.feeds: what train() reads from the first entries: batched providers, model sizes, raw pixels."""
import warnings

import numpy as np
import pytest

import batching
import readers
from train.driver import train
from train.feeds import check_unbatched, infer_sizes, warn_unscaled


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


def test_check_unbatched_passes_readers_of_single_entries():
    check_unbatched(readers.shuffle(readers.from_sequence(range(4)), seed=0))


def test_infer_sizes_needs_the_image_and_label_inputs():
    with pytest.raises(ValueError, match=r"names no 'label' input; a built-in model reads 'image' and 'label'"):
        infer_sizes(readers.from_sequence([(np.zeros(2), 1)]), {"image": 0, "y": 1})
