"""readers.tokenized.token_objects: the byte-range reads of token files behind URLs (local paths read the same way)."""
import threading

import numpy as np
import pytest

from readers import digests
from readers.sources.locations import FileChanged
from readers.tokenized import token_checks, token_objects


def test_at_once_keeps_the_order_and_uses_threads():
    seen = set()

    def where(x):
        seen.add(threading.current_thread().name)
        return x * 2

    assert token_objects.at_once(where, list(range(40))) == list(range(0, 80, 2))
    assert token_objects.at_once(where, [5]) == [10]
    assert any(name.startswith("token-objects") for name in seen)
    # joined before it returns: a thread left behind would make later process workers spawn instead of fork
    assert not [t.name for t in threading.enumerate() if t.name.startswith("token-objects")]


def test_a_long_npy_header_is_read_in_a_second_range(tmp_path):
    fields = np.dtype([(f"field_{k:04}", "<u2") for k in range(400)])  # a header of about 10 KiB
    path = tmp_path / "wide.npy"
    np.save(path, np.zeros(3, fields))
    f = token_objects.header(str(path), path.stat().st_size)
    assert np.lib.format.read_magic(f) == (1, 0)
    shape, _, dtype = np.lib.format.read_array_header_1_0(f)
    assert shape == (3,) and dtype == fields and f.tell() > token_objects.HEADER


@pytest.mark.parametrize("n", [7, 4096, 100_001])
def test_the_sample_is_what_token_checks_samples(tmp_path, n):
    a = (np.arange(n) * 31 % 60000).astype("<u2")
    a.tofile(tmp_path / "t.bin")
    got = token_objects.sample(str(tmp_path / "t.bin"), a.nbytes, a.dtype, 0, n)
    assert np.array_equal(got, token_checks.sample(a))


@pytest.mark.parametrize("n", [10, 3_000_000])
def test_the_digest_is_array_digest_of_the_tokens_after_a_header(tmp_path, n):
    a = (np.arange(n) % 65000).astype("<u2")
    np.save(tmp_path / "t.npy", a)
    size = (tmp_path / "t.npy").stat().st_size
    got = token_objects.digest(str(tmp_path / "t.npy"), size, a.dtype, size - a.nbytes, n)
    assert got == digests.array_digest(a)


def test_rows_of_an_object_cut_short_are_refused_as_changed(tmp_path):
    np.arange(100, dtype="<u2").tofile(tmp_path / "t.bin")
    rows = token_objects.read_rows(str(tmp_path / "t.bin"), 200, np.dtype("<u2"), 0, np.array([90, 10]), 5)
    assert rows.tolist() == [[90, 91, 92, 93, 94], [10, 11, 12, 13, 14]]
    np.arange(50, dtype="<u2").tofile(tmp_path / "t.bin")
    with pytest.raises(FileChanged, match="t.bin changed since the reader first read it"):
        token_objects.read_rows(str(tmp_path / "t.bin"), 200, np.dtype("<u2"), 0, np.array([90]), 5)
