"""Finding and downloading data files, against a local HTTP server on 127.0.0.1 only."""
import hashlib
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from readers.sources import datafiles
from readers.sources.datafiles import (
    DataFile,
    MissingDataError,
    cache_dir,
    fetch,
    fetch_all,
    locate,
    search_dirs,
)

BODY = bytes(range(256)) * 1200  # 300 kB: several 64 kB chunks for the progress callback
FILE = DataFile("data.bin.gz", hashlib.sha256(BODY).hexdigest(), aliases=("data.bin",))


class MirrorHandler(BaseHTTPRequestHandler):
    """Serves ``/<mode>[-tag]/<name>`` from ``server.files``; the mode picks the behaviour."""

    def do_GET(self):
        self.server.requests.append(self.path)
        first, _, name = self.path.lstrip("/").partition("/")
        mode = first.split("-")[0]
        body = self.server.files.get(name)
        if mode == "garbage":  # not HTTP at all
            self.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
            return
        if mode == "error":
            self.send_error(500, "Internal Server Error")
            return
        if mode != "ok" and mode != "wrong" and mode != "short" or body is None:
            self.send_error(404, "Not Found")
            return
        if mode == "wrong":  # same length, wrong bytes
            body = body[::-1]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if mode == "short" else body)

    def log_message(self, format, *args):  # keep test output clean
        pass


class Mirrors:
    """The running local server: ``url(mode)`` is a mirror base URL, ``requests`` the paths asked for."""

    def __init__(self, server: ThreadingHTTPServer):
        self.server = server
        self.files = server.files
        self.requests = server.requests

    def url(self, mode: str) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/{mode}"


@pytest.fixture
def mirrors(monkeypatch):
    """A local HTTP server on 127.0.0.1 with an OS-chosen port, stopped afterwards."""
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "*")  # never send a test request anywhere but 127.0.0.1
    server = ThreadingHTTPServer(("127.0.0.1", 0), MirrorHandler)
    server.files = {FILE.name: BODY}
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Mirrors(server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def closed_port_url() -> str:
    """A URL on 127.0.0.1 whose port nobody listens on: connecting is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/closed"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh, empty per-user cache for this test; returns the dataset's cache folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return cache_dir("demo")


def leftovers(folder: str) -> list[str]:
    """Partial downloads left in ``folder`` (hidden ``.name.XXXX.part`` files included)."""
    return [n for n in os.listdir(folder) if n.endswith(".part")] if os.path.isdir(folder) else []


# -- where files are looked for -------------------------------------------------


def test_cache_dir_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir("mnist") == os.path.join(str(tmp_path), "readerkit", "mnist")


def test_cache_dir_defaults_to_home_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir("mnist") == os.path.join(str(tmp_path), ".cache", "readerkit", "mnist")


@pytest.mark.parametrize("data_dir", [None, "given"])
@pytest.mark.parametrize("env", [None, "env"])
def test_search_dirs_order(tmp_path, monkeypatch, data_dir, env, cache):
    if env:
        monkeypatch.setenv("READERKIT_DATA", str(tmp_path / env))
    given = None if data_dir is None else tmp_path / data_dir
    if given is not None:  # an explicit folder (and its <dataset> subfolder) is the only place looked in
        expected = [str(given), str(given / "demo")]
    else:
        expected = ([str(tmp_path / env), str(tmp_path / env / "demo")] if env else []) + [cache]
    assert search_dirs("demo", given) == expected


def test_search_dirs_accepts_a_path_like_data_dir(tmp_path, monkeypatch, cache):
    monkeypatch.setenv("READERKIT_DATA", str(tmp_path / "env"))
    expected = [str(tmp_path), str(tmp_path / "demo")]
    assert search_dirs("demo", tmp_path) == search_dirs("demo", str(tmp_path)) == expected


def put(folder, name: str, content: bytes | str) -> str:
    """Write ``content`` to ``folder/name`` (folders created); returns the path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(content.encode() if isinstance(content, str) else content)
    return path


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


EXPLICIT_PLACES = ["data_dir", "data_dir_dataset"]


@pytest.mark.parametrize("first", range(len(EXPLICIT_PLACES)), ids=EXPLICIT_PLACES)
def test_fetch_lookup_order_with_an_explicit_folder(tmp_path, monkeypatch, mirrors, cache, first):
    given = tmp_path / "given"
    folders = {"data_dir": given, "data_dir_dataset": given / "demo"}
    # READERKIT_DATA and the cache hold the file too, but an explicit folder is the only place looked in
    monkeypatch.setenv("READERKIT_DATA", str(tmp_path / "env"))
    put(tmp_path / "env", FILE.name, "env")
    put(cache, FILE.name, "cache")
    for place in EXPLICIT_PLACES[first:]:
        put(folders[place], FILE.name, place)
    path = fetch("demo", FILE, [mirrors.url("ok")], given)
    assert path == os.path.join(str(folders[EXPLICIT_PLACES[first]]), FILE.name)
    assert read(path) == EXPLICIT_PLACES[first].encode()
    assert mirrors.requests == []


PLACES = ["env", "env_dataset", "cache"]


@pytest.mark.parametrize("first", range(len(PLACES)), ids=PLACES)
def test_fetch_lookup_order_without_an_explicit_folder(tmp_path, monkeypatch, cache, first):
    folders = {"env": tmp_path / "env", "env_dataset": tmp_path / "env" / "demo", "cache": cache}
    monkeypatch.setenv("READERKIT_DATA", str(folders["env"]))
    for place in PLACES[first:]:  # the file is in this place and every later one
        put(folders[place], FILE.name, place)
    path = fetch("demo", FILE, [], download=False)
    assert path == os.path.join(str(folders[PLACES[first]]), FILE.name)
    assert read(path) == PLACES[first].encode()


@pytest.mark.parametrize("name", ["data.bin.gz", "data.bin"])
def test_fetch_finds_the_name_or_an_alias(tmp_path, name):
    (tmp_path / name).write_bytes(b"x")
    assert fetch("demo", FILE, [], tmp_path, download=False) == str(tmp_path / name)


def test_locate_prefers_the_name_to_an_alias_in_the_same_folder(tmp_path):
    (tmp_path / "data.bin").write_bytes(b"unzipped")
    (tmp_path / "data.bin.gz").write_bytes(b"zipped")
    assert locate(FILE, [str(tmp_path)]) == str(tmp_path / "data.bin.gz")


def test_locate_prefers_an_earlier_folder_to_the_exact_name(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "data.bin").write_bytes(b"alias")
    (tmp_path / "b" / "data.bin.gz").write_bytes(b"name")
    assert locate(FILE, [str(tmp_path / "a"), str(tmp_path / "b")]) == str(tmp_path / "a" / "data.bin")


def test_locate_ignores_a_folder_with_the_file_name(tmp_path):
    (tmp_path / "data.bin.gz").mkdir()
    assert locate(FILE, [str(tmp_path)]) is None


def test_fetch_does_not_check_files_found_on_disk(tmp_path, mirrors):
    # a user's own files (Fashion-MNIST under MNIST's names) have other checksums
    (tmp_path / FILE.name).write_bytes(b"not the published bytes")
    assert fetch("demo", FILE, [mirrors.url("ok")], tmp_path) == str(tmp_path / FILE.name)
    assert mirrors.requests == []


# -- downloading ----------------------------------------------------------------


def test_fetch_downloads_from_the_second_mirror_after_a_404(mirrors, cache):
    calls, reports = [], []

    def progress(file, url):
        calls.append((file.name, url))
        return lambda done, total: reports.append((done, total))

    path = fetch("demo", FILE, [mirrors.url("missing"), mirrors.url("ok")], progress=progress, timeout=10)
    assert path == os.path.join(cache, FILE.name)
    with open(path, "rb") as f:
        assert f.read() == BODY
    assert mirrors.requests == ["/missing/data.bin.gz", "/ok/data.bin.gz"]
    assert calls == [(FILE.name, mirrors.url("missing") + "/data.bin.gz"), (FILE.name, mirrors.url("ok") + "/data.bin.gz")]
    done = [d for d, _ in reports]
    assert len(done) >= 3 and done == sorted(set(done)) and done[-1] == len(BODY)
    assert {t for _, t in reports} == {len(BODY)}
    assert os.listdir(cache) == [FILE.name]


def test_fetch_uses_the_cache_on_the_second_call(mirrors, cache):
    first = fetch("demo", FILE, [mirrors.url("ok")], timeout=10)
    second = fetch("demo", FILE, [mirrors.url("ok")], timeout=10)
    assert first == second == os.path.join(cache, FILE.name)
    assert mirrors.requests == ["/ok/data.bin.gz"]


def test_fetch_accepts_a_mirror_url_with_a_trailing_slash(mirrors, cache):
    assert fetch("demo", FILE, [mirrors.url("ok") + "/"], timeout=10) == os.path.join(cache, FILE.name)


BAD_MIRRORS = {
    "missing": "HTTP 404 Not Found",
    "error": "HTTP 500 Internal Server Error",
    "wrong": f"does not match the published {FILE.sha256}",
    "short": f"the download stopped after {len(BODY) // 2} of {len(BODY)} bytes",
    "garbage": "SSH-2.0",  # regression: http.client.BadStatusLine escaped fetch instead of trying the next mirror
    "closed": "refused",
}


def bad_url(mirrors: Mirrors, mode: str) -> str:
    return closed_port_url() if mode == "closed" else mirrors.url(mode)


@pytest.mark.parametrize("mode", sorted(BAD_MIRRORS))
def test_fetch_tries_the_next_mirror_after_a_failure(mirrors, cache, mode):
    path = fetch("demo", FILE, [bad_url(mirrors, mode), mirrors.url("ok")], timeout=10)
    with open(path, "rb") as f:
        assert f.read() == BODY
    assert mirrors.requests[-1] == "/ok/data.bin.gz"
    assert leftovers(cache) == []


@pytest.mark.parametrize("mode", sorted(BAD_MIRRORS))
def test_fetch_failure_explains_everything(tmp_path, monkeypatch, mirrors, cache, mode):
    monkeypatch.setenv("READERKIT_DATA", str(tmp_path / "env"))
    urls = [mirrors.url("missing-a"), bad_url(mirrors, mode)]
    with pytest.raises(MissingDataError) as info:
        fetch("demo", FILE, urls, timeout=10)
    message = str(info.value)
    assert message.startswith("demo file data.bin.gz not found; looked in: ")
    looked = [str(tmp_path / "env"), str(tmp_path / "env" / "demo"), cache]
    assert search_dirs("demo") == looked
    assert f"looked in: {', '.join(looked)} (all of a dataset's files must be in one folder)" in message
    assert f"{urls[0]}/data.bin.gz: HTTP 404 Not Found" in message
    assert f"{urls[1]}/data.bin.gz: " in message and BAD_MIRRORS[mode] in message
    assert "--data-dir DIR" in message and "READERKIT_DATA=DIR" in message
    assert "\n" not in message  # one line for the CLI
    assert leftovers(cache) == []
    assert not os.path.exists(os.path.join(cache, FILE.name))


def test_fetch_closed_port_fails_fast_with_connection_refused(cache):
    # refused at once rather than waiting for the (long) timeout: the reason says so
    with pytest.raises(MissingDataError, match=r"/closed/data\.bin\.gz: \[Errno \d+\] Connection refused"):
        fetch("demo", FILE, [closed_port_url()], timeout=60)


def test_fetch_progress_error_propagates_and_leaves_no_part_file(mirrors, cache):
    class Stop(Exception):
        pass

    def progress(file, url):
        def report(done, total):
            raise Stop

        return report

    with pytest.raises(Stop):
        fetch("demo", FILE, [mirrors.url("ok")], progress=progress, timeout=10)
    assert leftovers(cache) == []
    assert not os.path.exists(os.path.join(cache, FILE.name))


def test_fetch_offline_never_touches_the_network(tmp_path, monkeypatch, mirrors, cache):
    monkeypatch.setenv("READERKIT_DATA", str(tmp_path / "env"))
    with pytest.raises(MissingDataError) as info:
        fetch("demo", FILE, [mirrors.url("ok")], download=False)
    assert mirrors.requests == []
    message = str(info.value)
    assert f"looked in: {tmp_path / 'env'}, {tmp_path / 'env' / 'demo'}, {cache} (" in message
    assert "Download: off (--no-download)." in message
    assert "--data-dir DIR" in message and "READERKIT_DATA=DIR" in message
    assert not os.path.exists(cache)


def test_fetch_without_mirrors_says_so(cache):
    with pytest.raises(MissingDataError, match="Download: no mirrors to try"):
        fetch("demo", FILE, [])


def test_fetch_all_lists_every_missing_file(tmp_path, mirrors, cache):
    other = DataFile("other.gz", "0" * 64)
    (tmp_path / "data.bin").write_bytes(b"here")
    # an explicit folder: only the file missing there is named, and nothing is downloaded
    with pytest.raises(MissingDataError, match=r"^demo file other\.gz not found; .*Put the file ") as info:
        fetch_all("demo", [FILE, other], [mirrors.url("ok")], tmp_path, timeout=10)
    assert "data.bin.gz" not in str(info.value).split(" not found")[0]
    assert mirrors.requests == []
    # the cache: every file the mirrors could not supply is named, with each mirror's answer
    with pytest.raises(MissingDataError, match=r"^demo file other\.gz not found; .*/ok/other\.gz: HTTP 404"):
        fetch_all("demo", [FILE, other], [mirrors.url("ok")], timeout=10)
    os.unlink(os.path.join(cache, FILE.name))
    with pytest.raises(MissingDataError, match=r"^demo files data\.bin\.gz, other\.gz not found; .*Put the files"):
        fetch_all("demo", [FILE, other], [mirrors.url("ok")], download=False)


SECOND_BODY = b"the second file of the set" * 100
SECOND = DataFile("second.bin.gz", hashlib.sha256(SECOND_BODY).hexdigest(), aliases=("second.bin",))


def test_fetch_all_returns_paths_in_order(tmp_path, mirrors, cache):
    (tmp_path / "first").write_bytes(b"")
    (tmp_path / "data.bin").write_bytes(b"")
    got = fetch_all("demo", [FILE, DataFile("first", "")], [mirrors.url("ok")], tmp_path, timeout=10)
    assert got == [str(tmp_path / "data.bin"), str(tmp_path / "first")]
    mirrors.files[SECOND.name] = SECOND_BODY
    got = fetch_all("demo", [SECOND, FILE], [mirrors.url("ok")], timeout=10)
    assert got == [os.path.join(cache, SECOND.name), os.path.join(cache, FILE.name)]
    assert [read(p) for p in got] == [SECOND_BODY, BODY]


def test_fetch_calls_fetch_all_with_the_one_file(monkeypatch, cache):
    calls = []

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return ["/somewhere/data.bin.gz"]

    monkeypatch.setattr(datafiles, "fetch_all", spy)

    def progress(file, url):
        return None

    assert fetch("demo", FILE, ["m"], "dir", download=False, progress=progress, timeout=5) == "/somewhere/data.bin.gz"
    assert calls == [(("demo", [FILE], ["m"], "dir"), {"download": False, "progress": progress, "timeout": 5})]


# -- a set of files always comes from one folder ------------------------------------


def test_explicit_folder_never_falls_back_nor_downloads(tmp_path, monkeypatch, mirrors, cache):
    # regression: a file missing from --data-dir was taken from READERKIT_DATA, the cache or a mirror
    given = tmp_path / "given"
    given.mkdir()
    monkeypatch.setenv("READERKIT_DATA", str(tmp_path / "env"))
    mirrors.files[SECOND.name] = SECOND_BODY
    for folder in (tmp_path / "env", tmp_path / "env" / "demo", cache):
        put(folder, FILE.name, BODY)
        put(folder, SECOND.name, SECOND_BODY)
    put(given, FILE.name, b"the user's own")
    with pytest.raises(MissingDataError) as info:
        fetch_all("demo", [FILE, SECOND], [mirrors.url("ok")], given, download=True, timeout=10)
    assert mirrors.requests == []
    message = str(info.value)
    assert message.startswith(f"demo file {SECOND.name} not found; looked in: {given}, {given / 'demo'} (")
    assert "all of a dataset's files must be in one folder" in message
    assert f"Download: not tried for an explicit folder ({given})." in message
    assert str(tmp_path / "env") not in message and cache not in message
    assert "--data-dir DIR" in message and "READERKIT_DATA=DIR" in message


@pytest.mark.parametrize("download", [True, False])
def test_explicit_empty_folder_lists_every_file(tmp_path, mirrors, cache, download):
    with pytest.raises(MissingDataError, match=r"^demo files data\.bin\.gz, second\.bin\.gz not found; "
                       r".*Download: not tried for an explicit folder"):
        fetch_all("demo", [FILE, SECOND], [mirrors.url("ok")], tmp_path, download=download, timeout=10)
    assert mirrors.requests == []
    assert not os.path.exists(cache)


def test_explicit_folder_dataset_subfolder_holds_the_whole_set(tmp_path, cache):
    put(tmp_path, FILE.name, "top")  # the top folder has only part of the set
    put(tmp_path / "demo", FILE.name, "sub")
    put(tmp_path / "demo", SECOND.name, "sub")
    got = fetch_all("demo", [FILE, SECOND], [], tmp_path, download=False)
    assert got == [str(tmp_path / "demo" / FILE.name), str(tmp_path / "demo" / SECOND.name)]


def test_explicit_folder_split_over_its_two_folders_is_refused(tmp_path, mirrors, cache):
    put(tmp_path, FILE.name, "top")
    put(tmp_path / "demo", SECOND.name, "sub")
    with pytest.raises(MissingDataError, match="all of a dataset's files must be in one folder"):
        fetch_all("demo", [FILE, SECOND], [mirrors.url("ok")], tmp_path, timeout=10)
    assert mirrors.requests == []


def test_explicit_folder_split_over_its_two_folders_names_the_files(tmp_path, cache):
    put(tmp_path, FILE.name, "top")
    put(tmp_path / "demo", SECOND.name, "sub")
    with pytest.raises(MissingDataError) as info:
        fetch_all("demo", [FILE, SECOND], [], tmp_path, download=False)
    # named against the fuller folder: the one file that would make it whole
    assert str(info.value).startswith("demo file second.bin.gz not found; ")


@pytest.mark.parametrize("download", [True, False])
def test_partial_set_in_readerkit_data_is_passed_over_for_a_complete_cache(tmp_path, monkeypatch, mirrors,
                                                                           cache, download):
    # regression: the file in READERKIT_DATA was paired with the cache's copy of the other one
    monkeypatch.setenv("READERKIT_DATA", str(tmp_path / "env"))
    put(tmp_path / "env", FILE.name, b"another dataset's")
    put(tmp_path / "env" / "demo", SECOND.name, b"another dataset's")
    put(cache, FILE.name, BODY)
    put(cache, SECOND.name, SECOND_BODY)
    got = fetch_all("demo", [FILE, SECOND], [mirrors.url("ok")], download=download, timeout=10)
    assert got == [os.path.join(cache, FILE.name), os.path.join(cache, SECOND.name)]
    assert mirrors.requests == []


def test_complete_set_in_readerkit_data_is_used_before_the_cache(tmp_path, monkeypatch, cache):
    monkeypatch.setenv("READERKIT_DATA", str(tmp_path / "env"))
    put(tmp_path / "env" / "demo", FILE.name, b"mine")
    put(tmp_path / "env" / "demo", "second.bin", b"mine")  # an alias
    put(cache, FILE.name, BODY)
    put(cache, SECOND.name, SECOND_BODY)
    got = fetch_all("demo", [FILE, SECOND], [], download=False)
    assert got == [str(tmp_path / "env" / "demo" / FILE.name), str(tmp_path / "env" / "demo" / "second.bin")]


def test_partial_sets_everywhere_download_only_what_the_cache_lacks(tmp_path, monkeypatch, mirrors, cache):
    # regression: the file in READERKIT_DATA was used and only the other one downloaded, mixing two folders
    monkeypatch.setenv("READERKIT_DATA", str(tmp_path / "env"))
    mirrors.files[SECOND.name] = SECOND_BODY
    put(tmp_path / "env", FILE.name, b"another dataset's")
    put(cache, SECOND.name, SECOND_BODY)
    got = fetch_all("demo", [FILE, SECOND], [mirrors.url("missing"), mirrors.url("ok")], timeout=10)
    assert got == [os.path.join(cache, FILE.name), os.path.join(cache, SECOND.name)]
    assert [read(p) for p in got] == [BODY, SECOND_BODY]
    assert mirrors.requests == ["/missing/data.bin.gz", "/ok/data.bin.gz"]  # the cached file is not fetched again
    assert sorted(os.listdir(cache)) == sorted([FILE.name, SECOND.name])


def test_a_file_outside_the_cache_is_downloaded_into_it(tmp_path, monkeypatch, mirrors, cache):
    monkeypatch.setenv("READERKIT_DATA", str(tmp_path / "env"))
    mirrors.files[SECOND.name] = SECOND_BODY
    put(tmp_path / "env", FILE.name, b"another dataset's")
    got = fetch_all("demo", [FILE, SECOND], [mirrors.url("ok")], timeout=10)
    assert got == [os.path.join(cache, FILE.name), os.path.join(cache, SECOND.name)]
    assert sorted(mirrors.requests) == ["/ok/data.bin.gz", "/ok/second.bin.gz"]
    assert read(str(tmp_path / "env" / FILE.name)) == b"another dataset's"  # left alone


def test_failed_download_of_part_of_the_set_explains_everything(tmp_path, monkeypatch, mirrors, cache):
    monkeypatch.setenv("READERKIT_DATA", str(tmp_path / "env"))
    put(tmp_path / "env", SECOND.name, b"another dataset's")  # the server has no second.bin.gz
    with pytest.raises(MissingDataError) as info:
        fetch_all("demo", [FILE, SECOND], [mirrors.url("ok")], timeout=10)
    message = str(info.value)
    assert f"looked in: {tmp_path / 'env'}, {tmp_path / 'env' / 'demo'}, {cache} (" in message
    assert "all of a dataset's files must be in one folder" in message
    assert f"{mirrors.url('ok')}/second.bin.gz: HTTP 404 Not Found" in message
    assert "--data-dir DIR" in message and "READERKIT_DATA=DIR" in message
    assert leftovers(cache) == []


@pytest.mark.parametrize("download", [True, False])
def test_a_set_split_between_readerkit_data_and_its_subfolder_is_not_mixed(tmp_path, monkeypatch, mirrors,
                                                                           cache, download):
    monkeypatch.setenv("READERKIT_DATA", str(tmp_path / "env"))
    put(tmp_path / "env", FILE.name, BODY)
    put(tmp_path / "env" / "demo", SECOND.name, SECOND_BODY)
    with pytest.raises(MissingDataError, match="all of a dataset's files must be in one folder"):
        fetch_all("demo", [FILE, SECOND], [], download=download)
