"""readers.sources.file_access: files opened locally, by ranges or from a cache_dir; a changed URL refused."""
import os

import pytest

from readers.sources import locations
from readers.sources.file_access import (
    FileCacheSetting,
    download,
    open_checked,
    whole_file,
)
from readers.sources.locations import FileChanged, Stat


def test_file_cache_setting_checks_its_options_and_makes_no_folder_for_local_paths(tmp_path):
    with pytest.raises(ValueError, match="tar_shards: cache_dir_bytes must be an int >= 1"):
        FileCacheSetting(tmp_path, 0, "tar_shards")
    with pytest.raises(ValueError, match="parquet: cache_dir_bytes must be an int >= 1"):
        FileCacheSetting(tmp_path, True, "parquet")
    with pytest.raises(TypeError, match=r"cache_dir=3: give a folder"):
        FileCacheSetting(3, 10, "arrow")
    with pytest.raises(ValueError, match="is a URL: give a local folder"):
        FileCacheSetting("s3://bucket/cache", 10, "arrow")
    setting = FileCacheSetting(tmp_path / "cache", 10, "arrow")
    assert setting.cache(str(tmp_path / "a.arrow")) is None and not (tmp_path / "cache").exists()


def test_local_files_open_as_they_are_and_are_never_copied(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"abc")
    seen = {}
    with open_checked(str(path), seen, cache=object()) as f:  # a cache is not asked for a local file
        assert f.read() == b"abc"
    assert whole_file(str(path), seen, object()) == str(path) and seen == {}


def test_url_files_are_read_whole_into_the_cache_once_and_refused_when_changed(tmp_path):
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    pytest.importorskip("readers.sources.file_cache")
    from tests.helpers.fsspec_io import stop_io
    from tests.helpers.http_server import serve_folder

    (tmp_path / "data").mkdir()
    path = tmp_path / "data" / "a.bin"
    path.write_bytes(os.urandom(5000))
    try:
        with serve_folder(tmp_path / "data") as server:
            url, seen = server.url + "/a.bin", {}
            setting = FileCacheSetting(tmp_path / "cache", 1 << 20, "test")
            local = whole_file(url, seen, setting.cache(url))
            assert open(local, "rb").read() == path.read_bytes() and seen[url].size == 5000
            gets = len([q for q in server.requests if q.method == "GET"])
            with open_checked(url, seen, setting.cache(url)) as f:
                assert f.read() == path.read_bytes()
            assert len([q for q in server.requests if q.method == "GET"]) == gets  # from the copy
            with open_checked(url, seen, buffered=False) as f:  # by ranges: each read one request
                f.seek(4990)
                assert f.read(10) == path.read_bytes()[-10:]
            path.write_bytes(os.urandom(5001))
            with pytest.raises(FileChanged, match=rf"{url} changed since the reader first read it"):
                open_checked(url, seen, setting.cache(url))
            with pytest.raises(FileChanged, match=rf"{url} changed"):
                download(url, str(tmp_path / "dest"), Stat(5000, seen[url].version))
    finally:
        stop_io()
    assert locations.is_url(url)
