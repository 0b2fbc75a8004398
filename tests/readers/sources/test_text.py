"""readers.sources.text: text_file."""
import gc
import pickle
import warnings

import pytest

import readers


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
