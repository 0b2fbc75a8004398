"""readers.tokens over URLs (issue 29): token files behind HTTP and S3 read by byte ranges, as the local read."""
import pickle
import traceback

import numpy as np
import pytest

import batching
import readers
from readers.identity import fingerprint
from readers.sources import locations
from readers.sources.locations import RemoteReadError, Retry
from readers.testing import assert_resumes_at_every_step, assert_seeded_passes
from readers.tokenized.windows import TokenFileChanged, TokenFileError, tokens

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

from tests.helpers.fsspec_io import stop_io  # noqa: E402
from tests.helpers.http_server import serve_folder  # noqa: E402


@pytest.fixture(autouse=True)
def _no_io_thread_left():
    """fsspec's IO thread stopped after each test: a thread left in the process makes later tests' process workers
    start by spawn instead of fork."""
    yield
    stop_io()


def _corpus(folder):
    """Three token files: two .bin, one .npy, 210 windows of 8 tokens."""
    folder.mkdir(exist_ok=True)
    np.arange(1000, dtype="<u2").tofile(folder / "a.bin")
    np.save(folder / "b.npy", np.arange(5000, 5300, dtype="<u2"))
    (np.arange(400, dtype="<u2") * 7 % 3001).astype("<u2").tofile(folder / "c.bin")
    (folder / "notes.txt").write_text("not tokens")
    return folder


@pytest.fixture(params=["http", "s3"])
def remote(request, tmp_path):
    """(local folder, URL of the same folder behind HTTP or S3, the HTTP server or None)."""
    folder = _corpus(tmp_path / "tokens")
    if request.param == "http":
        with serve_folder(folder) as server:
            yield folder, f"{server.url}/", server
        return
    pytest.importorskip("s3fs")
    s3 = request.getfixturevalue("s3_server")
    bucket = s3.make_bucket()
    s3.upload(folder, bucket, "corpus/tokens")
    yield folder, f"s3://{bucket}/corpus/tokens", None


@pytest.fixture
def short_retries(monkeypatch):
    monkeypatch.setattr(locations, "RETRY", Retry(deadline=0.6, first=0.01, most=0.05))


def _rows(reader):
    return [w.tolist() for w in reader()]


def test_remote_tokens_equal_the_local_read(remote):
    folder, url, _ = remote
    here, there = tokens(folder, seq_len=8), tokens(url, seq_len=8)
    assert len(there) == len(here) == 210 and repr(there) == repr(here)
    assert _rows(there) == _rows(here)
    picks = np.random.default_rng(0).permutation(len(here))[:50]
    assert np.array_equal(there.gather_columns(picks), here.gather_columns(picks))
    assert there[-1].tolist() == here[-1].tolist() and there[3].dtype == np.int32
    assert there.max_token() == here.max_token() == 5299
    there.check_samples()


def test_remote_tokens_fingerprint_is_the_content_so_a_local_state_resumes_from_the_url(remote):
    folder, url, _ = remote
    def make(where):
        return batching.batch(readers.shuffle(tokens(where, seq_len=8), seed=5), 16)
    local, far = make(folder), make(url)
    assert fingerprint(local) == fingerprint(far)
    local.set_pass(1)
    whole = [np.stack(b).tolist() for b in local()]
    local.set_pass(1)
    first = local()
    head = [np.stack(next(first)).tolist() for _ in range(4)]
    far.set_state(first.get_state())  # saved on local files, resumed from the URL
    assert head + [np.stack(b).tolist() for b in far()] == whole


def test_remote_tokens_shuffle_shard_and_process_workers_give_each_window_once(remote):
    folder, url, _ = remote
    r, want = tokens(url, seq_len=8), _rows(tokens(folder, seq_len=8))
    shuffled = _rows(readers.shuffle(r, seed=3))
    assert shuffled != want and sorted(shuffled) == sorted(want)
    shards = [_rows(readers.shard(readers.shuffle(r, seed=3), k, 3)) for k in range(3)]
    assert sorted(sum(shards, [])) == sorted(want)
    prefetched = _rows(readers.prefetch(readers.shuffle(r, seed=3), 2, mode="process"))
    assert prefetched == shuffled
    copy = pickle.loads(pickle.dumps(r))
    assert len(pickle.dumps(r)) < 10_000 and copy[7].tolist() == want[7]


def test_remote_tokens_resume_at_every_step(remote):
    _, url, server = remote
    def make():
        return batching.batch(readers.shuffle(tokens(url, seq_len=8), seed=2), 48)  # 5 steps a pass
    assert_resumes_at_every_step(make, max_steps=5)
    if server is not None:  # the same reader either way: over HTTP alone, which is quicker
        assert_seeded_passes(make, passes=2, max_steps=3)


def test_remote_tokens_take_a_glob_and_a_list_of_objects(tmp_path):
    folder = _corpus(tmp_path / "tokens")
    with serve_folder(folder) as server:
        globbed = tokens(f"{server.url}/*.bin", seq_len=8)
        listed = tokens([f"{server.url}/c.bin", f"{server.url}/a.bin"], seq_len=8)
        assert _rows(globbed) == _rows(tokens([folder / "a.bin", folder / "c.bin"], seq_len=8))
        assert _rows(listed) == _rows(tokens([folder / "c.bin", folder / "a.bin"], seq_len=8))
        mixed = tokens([str(folder / "b.npy"), f"{server.url}/c.bin", str(folder / "a.bin")], seq_len=8)
        want = tokens([folder / "b.npy", folder / "c.bin", folder / "a.bin"], seq_len=8)
        assert _rows(mixed) == _rows(want) and fingerprint(mixed) == fingerprint(want)
        picks = np.random.default_rng(2).permutation(len(want))[:60]
        assert np.array_equal(mixed.gather_columns(picks), want.gather_columns(picks))
        with pytest.raises(TokenFileError, match=r"^http://127\.0\.0\.1:\d+/notes\.txt: not a token file"):
            tokens(f"{server.url}/notes.txt", seq_len=8)


def test_remote_tokens_len_costs_a_stat_an_object_and_a_batch_few_range_requests(tmp_path):
    folder = tmp_path / "tokens"
    folder.mkdir()
    np.save(folder / "a.npy", np.arange(300, dtype="<u2"))
    (np.arange(1 << 20) % 50000).astype("<u2").tofile(folder / "big.bin")  # 2 MiB: 16,383 windows of 64
    with serve_folder(folder) as server:
        r = tokens(f"{server.url}/", seq_len=64)
        built = server.requests
        assert len(r) == 4 + 16383
        objects = sorted((q.method, q.path, q.range) for q in built if q.path != "/")
        assert objects == [("GET", "/a.npy", "bytes=0-727"), ("HEAD", "/a.npy", None), ("HEAD", "/big.bin", None)]
        r.check_samples()  # a few KiB of each, once in this process; and each object's stat for this pass
        before = len(server.requests)
        picks = np.sort(np.random.default_rng(1).choice(np.arange(4, len(r)), 40, replace=False))
        batch = r.gather_columns(picks)
        reads = server.requests[before:]
        local = tokens(folder, seq_len=64)
        assert np.array_equal(batch, local.gather_columns(picks))
        # 40 windows 50 KiB apart on average: a few merged ranges of one object, no other request
        assert all(q.method == "GET" and q.path == "/big.bin" and q.range for q in reads)
        assert 1 <= len(reads) < 40
        before = len(server.requests)
        r.gather_columns(picks[:1])
        assert [(q.method, q.path) for q in server.requests[before:]] == [("GET", "/big.bin")]  # _get: one range


def test_remote_tokens_digest_reads_what_array_digest_reads_of_a_large_file(tmp_path):
    folder = tmp_path / "tokens"
    folder.mkdir()
    (np.arange(2_300_000) % 65000).astype("<u2").tofile(folder / "big.bin")  # over digests.WHOLE: sampled
    with serve_folder(folder) as server:
        before = fingerprint(tokens(f"{server.url}/", seq_len=512))
        assert before == fingerprint(tokens(folder, seq_len=512))
        edited = np.fromfile(folder / "big.bin", "<u2")
        edited[-1] += 1  # the last run is always read
        edited.tofile(folder / "big.bin")
        after = fingerprint(tokens(f"{server.url}/", seq_len=512))
        assert after == fingerprint(tokens(folder, seq_len=512)) != before


def test_remote_tokens_a_connection_dropped_mid_range_is_read_again(tmp_path):
    folder = _corpus(tmp_path / "tokens")
    with serve_folder(folder) as server:
        r = tokens(f"{server.url}/a.bin", seq_len=8)
        r.check_samples()
        server.drop_next(2, after_bytes=10)
        assert r[20].tolist() == list(range(160, 169))


def test_remote_tokens_a_503_storm_shorter_than_the_deadline_is_waited_out(tmp_path):
    folder = _corpus(tmp_path / "tokens")
    with serve_folder(folder) as server:
        r = tokens(f"{server.url}/", seq_len=8)
        server.fail_next(4, status=503)
        assert _rows(r) == _rows(tokens(folder, seq_len=8))


def test_remote_tokens_a_storm_past_the_deadline_is_one_error_naming_the_url(tmp_path, short_retries):
    folder = _corpus(tmp_path / "tokens")
    with serve_folder(folder) as server:
        r = tokens(f"{server.url}/a.bin", seq_len=8)
        r.check_samples()
        server.fail_next(10_000, status=503)
        with pytest.raises(RemoteReadError, match=r"^http://127\.0\.0\.1:\d+/a\.bin: .*failed \d+ times .*HTTP 503"):
            r[5]


def test_remote_tokens_an_object_rewritten_between_passes_is_refused_naming_it(remote, request):
    folder, url, server = remote
    r = tokens(url, seq_len=8)
    assert len(_rows(r)) == 210
    new = np.arange(1, 1001, dtype="<u2")  # the same size, other tokens
    if server is None:  # replaced by another client of the store, as a user would
        bucket, key = url[len("s3://"):].split("/", 1)
        request.getfixturevalue("s3_server").client().put_object(Bucket=bucket, Key=f"{key}/a.bin", Body=new.tobytes())
    else:
        new.tofile(folder / "a.bin")
    shown = locations.redact(url).rstrip("/") + "/a.bin"
    with pytest.raises(TokenFileChanged, match=rf"^{shown} changed while it was being read: it had 2,000 bytes"):
        _rows(r)


def test_remote_tokens_wrong_s3_credentials_are_one_error_without_the_secret(tmp_path, s3_server):
    folder = _corpus(tmp_path / "tokens")
    bucket = s3_server.make_bucket()
    s3_server.upload(folder, bucket, "t")
    with s3_server.wrong_credentials():
        with pytest.raises(RemoteReadError) as caught:
            tokens(f"s3://{bucket}/t/", seq_len=8)
    text = "".join(traceback.format_exception(caught.value))
    assert str(caught.value).startswith(f"s3://{bucket}/t/") and "credentials" in str(caught.value)
    assert s3_server.secret not in text and "not-the-secret" not in text


def test_remote_tokens_a_wrong_token_size_is_refused_on_a_range_sample_naming_the_url(tmp_path):
    folder = tmp_path / "tokens"
    folder.mkdir()
    np.frombuffer(b"a rose is a rose. " * 40, np.uint8).astype("<u4").tofile(folder / "wide.bin")
    with serve_folder(folder) as server:
        r = tokens(f"{server.url}/", seq_len=8)  # 2-byte tokens asked of 4-byte ones
        with pytest.raises(TokenFileError, match=r"^http://127\.0\.0\.1:\d+/wide\.bin: read as 2-byte tokens .*"
                                                 r"every second token is 0 .*probably 4-byte tokens"):
            r.check_samples()
        with pytest.raises(TokenFileError, match="probably 4-byte tokens"):
            r[0]
        assert tokens(f"{server.url}/", seq_len=8, token_size=4)[0].tolist() == list(b"a rose is")


def test_remote_tokens_a_password_in_the_url_is_in_no_repr_fingerprint_or_message(tmp_path):
    folder = _corpus(tmp_path / "tokens")
    with serve_folder(folder, auth=("reader", "s3cr3t-word")) as server:
        url = server.url.replace("http://", "http://reader:s3cr3t-word@") + "/"
        r = tokens(url, seq_len=8)
        assert _rows(r) == _rows(tokens(folder, seq_len=8))
        shown = [repr(r), repr(fingerprint(r)), repr(readers.shuffle(r, seed=1))]
        (folder / "a.bin").write_bytes(b"\0" * 10)
        with pytest.raises(TokenFileChanged) as caught:
            _rows(r)
        text = "".join(traceback.format_exception(caught.value))
        assert str(caught.value).startswith(f"{server.url}/a.bin changed while it was being read: it had 2,000 bytes")
        assert not any("s3cr3t" in t for t in shown + [text])


def test_remote_tokens_check_each_object_once_a_pass_with_one_stat(tmp_path):
    folder = _corpus(tmp_path / "tokens")
    with serve_folder(folder) as server:
        pipeline = batching.batch(readers.shuffle(tokens(f"{server.url}/", seq_len=8), seed=4), 16)
        before = len(server.requests)
        for _ in range(3):
            assert sum(len(b) for b in pipeline()) == 210
        heads = sorted(q.path for q in server.requests[before:] if q.method != "GET")
        assert heads == ["/a.bin"] * 3 + ["/b.npy"] * 3 + ["/c.bin"] * 3
