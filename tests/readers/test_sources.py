"""readers.sources: from_arrays, from_sequence, np_array and text_file."""
import gc
import pickle
import warnings

import numpy as np
import pytest

import readers


def test_from_arrays_rows_are_tuples_read_in_place():
    x, y = np.arange(12).reshape(6, 2), np.arange(6) % 2
    r = readers.from_arrays(x, y)
    assert len(r) == 6 and [int(label) for _, label in r()] == y.tolist()
    image, label = r[4]
    assert np.shares_memory(image, x) and image.tolist() == [8, 9] and label == 0
    columns = r.gather_columns(np.array([5, 0]))
    assert columns[0].tolist() == [[10, 11], [0, 1]] and columns[1].tolist() == [1, 0]


@pytest.mark.parametrize("arrays, match", [
    ((), "needs at least one array"),
    ((np.zeros(3), np.float64(1.0)), "array 1 is a scalar"),
    ((np.zeros(3), np.zeros(4)), r"lengths \[3, 4\]"),
])
def test_from_arrays_refuses_what_has_no_rows_in_common(arrays, match):
    with pytest.raises(ValueError, match=match):
        readers.from_arrays(*arrays)


def test_np_array_rows_and_its_scalar_error():
    r = readers.np_array([[1, 2], [3, 4], [5, 6]])
    assert [row.tolist() for row in r.gather(np.array([2, 0]))] == [[5, 6], [1, 2]]
    assert r.gather_columns(np.array([1])).tolist() == [[3, 4]]
    with pytest.raises(ValueError, match="needs an array with at least one axis"):
        readers.np_array(5)


def test_from_sequence_keeps_none_and_empty_entries_and_pickles():
    r = readers.from_sequence(["a", None, "", 0])
    assert list(r()) == ["a", None, "", 0] and r[1] is None
    assert list(pickle.loads(pickle.dumps(r))()) == ["a", None, "", 0]
    with pytest.raises(TypeError, match="needs a sequence with len and"):
        readers.from_sequence(iter("ab"))


def test_text_file_pass_opens_the_file_only_when_iterated(tmp_path):
    """Regression from the review of issue 2."""
    path = tmp_path / "t.txt"
    path.write_text("a\nb\n")
    r = readers.text_file(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        it = r()
        del it  # never iterated: there must be no open file to leak
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert list(r()) == ["a", "b"]
    with pytest.raises(FileNotFoundError, match="no file at"):
        readers.text_file(tmp_path / "missing.txt")()


def test_text_file_strips_every_line_ending_and_keeps_empty_lines(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_bytes("é\r\n\nlast".encode("latin-1"))
    assert list(readers.text_file(path, encoding="latin-1")()) == ["é", "", "last"]


def test_from_arrays_docstring_points_to_np_array_and_says_one_array_gives_1_tuples():
    first, _, rest = readers.from_arrays.__doc__.partition("\n")
    assert "np_array" in first
    assert "1-tuples" in rest
    assert list(readers.from_arrays(np.array([5, 6]))()) == [(5,), (6,)]


BAD_UTF8 = b"first\nsecond\r\nna\xefve\nlast\n"


def test_text_file_names_the_path_and_line_of_bytes_that_do_not_decode(tmp_path):
    """Regression: a bare UnicodeDecodeError named neither the file nor the line."""
    path = tmp_path / "bad.txt"
    path.write_bytes(BAD_UTF8)
    with pytest.raises(UnicodeDecodeError) as info:
        list(readers.text_file(path)())
    message = str(info.value)
    assert f"line 3 of {str(path)!r} is not valid utf-8" in message and r"b'\xef'" in message
    assert "encoding=" in message and "errors='replace'" in message
    assert pickle.loads(pickle.dumps(info.value)).args == info.value.args  # it can cross from a worker process


def test_text_file_finds_the_line_of_a_bad_byte_far_into_a_large_file(tmp_path):
    # the file is decoded in chunks, so the error surfaces lines before the bad byte's own
    path = tmp_path / "big.txt"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(5000)) + b"\xff\n")
    with pytest.raises(UnicodeDecodeError, match="line 5001 of"):
        list(readers.text_file(path)())


@pytest.mark.parametrize("errors, lines", [
    ("replace", ["first", "second", "na\ufffdve", "last"]),
    ("ignore", ["first", "second", "nave", "last"]),
    ("surrogateescape", ["first", "second", "na\udcefve", "last"]),
])
def test_text_file_errors_option_reads_past_bad_bytes_as_open_does(tmp_path, errors, lines):
    path = tmp_path / "bad.txt"
    path.write_bytes(BAD_UTF8)
    r = readers.text_file(path, errors=errors)
    assert list(r()) == lines
    assert f"errors={errors!r}" in repr(r)
    assert list(pickle.loads(pickle.dumps(r))()) == lines


@pytest.mark.parametrize("options, match", [
    ({"errors": "lenient"}, "unknown errors 'lenient'"),
    ({"errors": None}, "unknown errors None"),
    ({"encoding": "utf-9"}, "unknown encoding 'utf-9'"),
])
def test_text_file_refuses_an_unknown_encoding_or_errors_at_once(tmp_path, options, match):
    with pytest.raises(ValueError, match=match):
        readers.text_file(tmp_path / "not-read-yet.txt", **options)
