"""readers.sources.locations: the paths a format reader is given, expanded, and its files opened."""
import os

import pytest

from readers.errors import BadType, MissingFile
from readers.sources.locations import expand_braces, expand_paths, read_range


def test_brace_ranges_keep_their_padding_and_nest_with_alternatives():
    assert expand_braces("s-{08..11}.tar") == ["s-08.tar", "s-09.tar", "s-10.tar", "s-11.tar"]
    assert expand_braces("{a,b}-{1..2}") == ["a-1", "a-2", "b-1", "b-2"]
    assert expand_braces("{3..1}") == ["3", "2", "1"]


def test_folders_globs_braces_and_lists_expand_in_order(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ["b.tar", "a.tar", "sub/c.tar", "skip.txt", ".hidden.tar"]:
        (tmp_path / name).write_bytes(b"x")
    names = lambda paths: [os.path.relpath(p, tmp_path) for p in paths]  # noqa: E731
    assert names(expand_paths(tmp_path, suffixes=[".tar"])) == ["a.tar", "b.tar", "sub/c.tar"]
    assert names(expand_paths(str(tmp_path / "*.tar"))) == ["a.tar", "b.tar"]
    assert names(expand_paths([tmp_path / "b.tar", str(tmp_path / "{a,b}.tar")])) == ["b.tar", "a.tar", "b.tar"]


def test_what_matches_nothing_is_named(tmp_path):
    (tmp_path / "shard-0.tar").write_bytes(b"")
    with pytest.raises(MissingFile, match=r"shard-1\.tar: no tar shards there"):
        expand_paths(str(tmp_path / "shard-{0..1}.tar"), what="tar shards")
    with pytest.raises(BadType, match="not a path"):
        expand_paths([3])


def test_read_range_reads_bytes_from_an_offset(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(10)))
    assert read_range(str(path), 8, 5) == bytes([8, 9])
