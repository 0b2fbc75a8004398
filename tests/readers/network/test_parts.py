"""readers.network.parts: the intervals of --part K/N and --range, and the digest of a part's rows (issue 30)."""
import re

import numpy as np
import pytest

import readers
from readers.digests import WHOLE
from readers.network.parts import (
    check_part,
    digest_rows,
    parse_part,
    parse_range,
    part_digest,
    part_interval,
)


@pytest.mark.parametrize("entries, n", [(10, 3), (10, 4), (7, 7), (1000, 7), (5, 1), (13, 4), (150, 100),
                                        (10 ** 12 + 3, 9)])
def test_part_interval_covers_every_index_once_over_k_1_to_n(entries, n):
    parts = [part_interval(k, n, entries) for k in range(1, n + 1)]
    assert parts[0][0] == 0 and parts[-1][1] == entries
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:])), "no gap, no overlap"
    sizes = [stop - start for start, stop in parts]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1, sizes


@pytest.mark.parametrize("k, n, entries, words", [
    (0, 4, 10, "part 0/4: parts count from 1 to 4 (1/4 is the first, 4/4 the last)"),
    (5, 4, 10, "part 5/4: parts count from 1 to 4"),
    (1, 0, 10, "part 1/0: N, the number of parts, must be 1 or more"),
    (1, 5, 3, "part 1/5 of 3 entries is empty: 5 parts of 3 entries leave some empty; give at most 3 parts"),
])
def test_part_interval_refuses_a_part_out_of_range_or_empty(k, n, entries, words):
    with pytest.raises(readers.BadValue, match="^" + re.escape(words)):
        part_interval(k, n, entries)


@pytest.mark.parametrize("text, words", [
    ("0/4", "--part '0/4': parts count from 1 to 4 (1/4 is the first, 4/4 the last); give K/N with 1 <= K <= N"),
    ("5/4", "--part '5/4': parts count from 1 to 4"),
    ("1/0", "--part '1/0': N, the number of parts, must be 1 or more"),
    ("2-4", "--part '2-4' is not K/N; give the part and the number of parts, such as --part 1/4"),
    ("-1/4", "--part '-1/4' is not K/N"),
    ("1/4/2", "--part '1/4/2' is not K/N"),
    ("", "--part '' is not K/N"),
])
def test_parse_part_refuses_bad_text_naming_it(text, words):
    with pytest.raises(readers.BadValue) as caught:
        parse_part(text)
    assert str(caught.value).startswith(words)


@pytest.mark.parametrize("text, want", [("2/4", (2, 4)), (" 1/1 ", (1, 1)), ("4/4", (4, 4))])
def test_parse_part_reads_k_of_n(text, want):
    assert parse_part(text) == want


@pytest.mark.parametrize("text, want", [("0:10", (0, 10)), ("5:", (5, None)), (":7", (0, 7)), (" 3 : 9 ", (3, 9))])
def test_parse_range_reads_a_half_open_interval(text, want):
    assert parse_range(text) == want


@pytest.mark.parametrize("text, words", [
    ("9:3", "--range '9:3' holds no entries: it is START:STOP, half-open, so it needs START < STOP"),
    ("4:4", "--range '4:4' holds no entries"),
    ("3", "--range '3' is not START:STOP; give the first sample index and the one after the last"),
    ("-1:3", "--range '-1:3' is not START:STOP"),
    ("a:b", "--range 'a:b' is not START:STOP"),
])
def test_parse_range_refuses_bad_text_naming_it(text, words):
    with pytest.raises(readers.BadValue) as caught:
        parse_range(text)
    assert str(caught.value).startswith(words)


@pytest.mark.parametrize("part, error, words", [
    ((5, 12), readers.BadValue, "part [5, 12) runs past the data: it has 10 entries, so a part ends at 10 at most"),
    ((-1, 3), readers.BadValue, "part [-1, 3) starts before 0"),
    ((4, 4), readers.BadValue, "part [4, 4) holds no entries"),
    ((10, None), readers.BadValue, "part [10, 10) holds no entries"),
    ((1, 2, 3), readers.BadType, "part must be (start, stop), two ints"),
    ((1.0, 2), readers.BadType, "part must be (start, stop)"),
    ((True, 2), readers.BadType, "part must be (start, stop)"),
    ("0:3", readers.BadType, "part must be (start, stop)"),
])
def test_check_part_refuses_what_is_not_a_part_of_the_data(part, error, words):
    with pytest.raises(error) as caught:
        check_part(part, 10)
    assert str(caught.value).startswith(words)


def rows_reader(values: np.ndarray, asked: list):
    """An indexed reader over ``values`` that records every index it is asked for."""
    def entry(i):
        asked.append(int(i))
        return values[i]
    return readers.map_readers(entry, readers.np_array(np.arange(len(values))))


def test_part_digest_is_the_same_for_the_same_rows_and_differs_for_other_rows():
    values = np.arange(100, dtype=np.int64) * 3
    changed_inside, changed_outside = values.copy(), values.copy()
    changed_inside[25] += 1
    changed_outside[75] += 1
    digest = part_digest(readers.from_arrays(values), (20, 40))
    assert digest == part_digest(readers.from_arrays(values.copy()), (20, 40))
    assert digest == part_digest(readers.from_arrays(changed_outside), (20, 40)), "rows outside the part count not"
    assert digest != part_digest(readers.from_arrays(changed_inside), (20, 40))
    assert digest != part_digest(readers.from_arrays(values), (20, 41)), "another interval is another part"


def test_part_digest_reads_only_rows_of_its_part_and_a_bounded_sample_of_a_large_one():
    row = 4096  # bytes: 10,000 rows are 40 MiB, so the digest samples them
    values = np.random.default_rng(0).integers(0, 256, size=(12_000, row), dtype=np.uint8)
    asked: list[int] = []
    part_digest(rows_reader(values, asked), (1_000, 11_000))
    assert min(asked) == 1_000 and max(asked) == 10_999, "nothing outside the part is read"
    picked = digest_rows((1_000, 11_000), row)
    assert len(set(asked)) == len(picked) == WHOLE // row and len(asked) <= len(picked) + 1
    edited = values.copy()
    edited[picked[7]] ^= 1  # a sampled row changed: seen
    assert part_digest(readers.from_arrays(values), (1_000, 11_000)) != \
        part_digest(readers.from_arrays(edited), (1_000, 11_000))
