"""readers.tokens: windows of pre-tokenized text over memory-mapped .bin and .npy files."""
import os
import pickle
import re

import numpy as np
import pytest

import batching
import readers
from readers.identity import fingerprint
from readers.tokenized import token_checks, windows
from readers.tokenized.runfile_fields import MOST_IDS
from readers.tokenized.windows import TokenFileError, tokens
from tests.helpers import paths as _paths
from tests.helpers.token_ids import zipf_ids


def _bin(path, values, dtype="<u2"):
    np.asarray(values, dtype=dtype).tofile(path)
    return str(path)


def test_windows_start_every_seq_len_tokens_and_never_cross_a_file(tmp_path):
    _bin(tmp_path / "a.bin", range(11))  # 10 targets: windows [0..4], [4..8]; tokens 9, 10 are left out
    _bin(tmp_path / "b.bin", range(100, 105))  # exactly one window
    r = tokens(tmp_path, seq_len=4)
    assert len(r) == 3
    assert [w.tolist() for w in r()] == [[0, 1, 2, 3, 4], [4, 5, 6, 7, 8], [100, 101, 102, 103, 104]]
    assert r[1].dtype == np.int32 and r[-1].tolist() == [100, 101, 102, 103, 104]


def test_an_npy_file_is_read_through_its_header_not_as_raw_bytes(tmp_path):
    """The reference system mapped a .npy whole, so its first tokens were header bytes."""
    np.save(tmp_path / "t.npy", np.arange(7, 20, dtype=np.uint16))
    assert tokens(tmp_path / "t.npy", seq_len=4)[0].tolist() == [7, 8, 9, 10, 11]
    np.save(tmp_path / "big.npy", np.array([3, 2**31 - 1, 5], dtype=np.uint32))
    assert tokens(tmp_path / "big.npy", seq_len=2, token_size=4)[0].tolist() == [3, 2**31 - 1, 5]


def test_four_byte_tokens_and_a_list_of_files(tmp_path):
    a = _bin(tmp_path / "a.bin", [70000, 1, 2], "<u4")
    b = _bin(tmp_path / "b.bin", [5, 6, 7], "<u4")
    r = tokens([b, a], seq_len=2, token_size=4)
    assert [w.tolist() for w in r()] == [[5, 6, 7], [70000, 1, 2]]


@pytest.mark.parametrize("make, kwargs, message", [
    (lambda d: _bin(d / "odd.bin", range(9)), {"token_size": 4},
     r"odd.bin has 18 bytes, not a multiple of token_size=4: .*\(try token_size=2\)"),
    (lambda d: np.save(d / "f.npy", np.zeros(9, np.float32)) or str(d / "f.npy"), {},
     r"f.npy holds float32 values \(4 bytes each\), which disagrees with token_size=2: save the tokens as uint16"),
    (lambda d: np.save(d / "w.npy", np.zeros(9, np.int64)) or str(d / "w.npy"), {"token_size": 4},
     r"w.npy holds int64 values \(8 bytes each\), which disagrees with token_size=4"),
    (lambda d: np.save(d / "m.npy", np.zeros((3, 3), np.uint16)) or str(d / "m.npy"), {},
     r"m.npy holds an array of shape \(3, 3\); token files hold one sequence"),
    (lambda d: str(d), {}, r"no .bin or .npy token files in this folder \(it holds nothing\); make them with"),
    (lambda d: (d / "notes.txt").write_text("x") and str(d / "notes.txt"), {}, r"notes.txt: not a token file"),
    (lambda d: str(d / "missing.bin"), {}, r"missing.bin: no such file or folder"),
    (lambda d: _bin(d / "short.bin", range(4)), {},
     r"1 token file is shorter than one window of seq_len \+ 1 = 5 tokens \(.*short.bin holds 4\)"),
    (lambda d: _bin(d / "empty.bin", []), {}, r"empty.bin holds 0\)"),
])
def test_bad_files_are_named_with_their_fault(tmp_path, make, kwargs, message):
    path = make(tmp_path)
    with pytest.raises(TokenFileError, match=message):
        tokens(path, seq_len=4, **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"seq_len": 4, "token_size": 3}, "token_size must be 2 or 4 \\(bytes per token\\), got 3"),
    ({"seq_len": 0}, "seq_len must be an int >= 1"),
    ({"seq_len": 4.0}, "seq_len must be an int >= 1"),
])
def test_bad_options_are_refused(tmp_path, kwargs, message):
    _bin(tmp_path / "a.bin", range(20))
    with pytest.raises(ValueError, match=message):
        tokens(tmp_path, **kwargs)


def test_a_token_id_int32_cannot_hold_names_its_file(tmp_path):
    _bin(tmp_path / "huge.bin", [1, 2**31, 3], "<u4")
    r = tokens(tmp_path, seq_len=2, token_size=4)
    with pytest.raises(TokenFileError, match=r"huge.bin holds the token id 2147483648, outside 0..2,147,483,647"):
        r[0]


def test_length_comes_from_file_sizes_without_reading_the_data(tmp_path):
    big = tmp_path / "sparse.bin"
    with open(big, "wb") as f:  # 8 GiB of zeros that take no disk and are never read
        f.truncate(8 << 30)
    r = tokens(big, seq_len=1024)
    assert len(r) == ((4 << 30) - 1) // 1024
    assert r[len(r) - 1].shape == (1025,)  # one window from the end of the mapping


def test_a_batch_is_one_int32_array_through_every_decorator(tmp_path):
    _bin(tmp_path / "a.bin", range(1000))
    _bin(tmp_path / "b.bin", range(5000, 5300))
    r = tokens(tmp_path, seq_len=8)  # 124 + 37 windows
    pipeline = batching.collated(batching.batch(readers.shuffle(r, seed=3), 16))
    batches = list(pipeline())
    assert batches[0].shape == (16, 9) and batches[0].dtype == np.int32
    seen = np.concatenate(batches)
    assert sorted(map(tuple, seen.tolist())) == sorted(map(tuple, (w.tolist() for w in r())))
    shards = [np.concatenate(list(batching.collated(batching.batch(readers.shard(readers.shuffle(r, seed=3), k, 3), 7))()))
              for k in range(3)]
    assert sorted(map(tuple, np.concatenate(shards).tolist())) == sorted(map(tuple, seen.tolist()))
    prefetched = list(readers.prefetch(readers.shuffle(r, seed=3), 2, mode="process")())
    assert [w.tolist() for w in prefetched] == [w.tolist() for w in readers.shuffle(r, seed=3)()]


def test_a_pass_resumes_from_its_state(tmp_path):
    _bin(tmp_path / "a.bin", range(2000))
    pipeline = batching.batch(readers.shuffle(tokens(tmp_path, seq_len=16), seed=1), 8)
    pipeline.set_pass(2)
    whole = [np.stack(b).tolist() for b in pipeline()]
    pipeline.set_pass(2)
    first = pipeline()
    head = [np.stack(next(first)).tolist() for _ in range(5)]
    state = first.get_state()
    pipeline.set_state(state)
    assert head + [np.stack(b).tolist() for b in pipeline()] == whole


def test_a_copy_for_another_process_maps_the_files_itself(tmp_path):
    _bin(tmp_path / "a.bin", np.arange(1 << 20) % 50000)
    r = tokens(tmp_path, seq_len=64)
    r[0]  # mapped here
    copy = pickle.loads(pickle.dumps(r))
    assert len(pickle.dumps(r)) < 10_000 and copy[5].tolist() == r[5].tolist()


def test_the_fingerprint_knows_the_tokens_not_the_folder(tmp_path):
    for name in ("one", "two", "other"):
        (tmp_path / name).mkdir()
    _bin(tmp_path / "one" / "a.bin", range(100))
    _bin(tmp_path / "two" / "a.bin", range(100))
    _bin(tmp_path / "other" / "a.bin", range(1, 101))
    one, two, other = (fingerprint(tokens(tmp_path / n, seq_len=9)) for n in ("one", "two", "other"))
    assert one == two and one["content"] != other["content"]
    assert one["pipeline"] == ["tokens(seq_len=9, token_size=2: 1 file, 100 tokens)"]
    assert os.path.basename(str(tmp_path)) not in str(one)


def test_tokenize_bytes_writes_byte_level_tokens_that_tokens_reads(tmp_path):
    from readers.tokenized.windows import tokenize_bytes
    (tmp_path / "a.txt").write_bytes("héllo\n".encode())
    (tmp_path / "b.txt").write_bytes(b"no newline")
    seen = []
    path = tokenize_bytes([tmp_path / "a.txt", tmp_path / "b.txt"], tmp_path / "out", token_size=4, progress=seen.append)
    values = np.fromfile(path, "<u4").tolist()
    assert bytes(values) == "héllo\n".encode() + b"no newline\n" and seen[-1] == len("héllo\n".encode()) + 10
    assert tokens(path, seq_len=4, token_size=4)[0].tolist() == values[:5]
    with pytest.raises(TokenFileError, match="no such file"):
        tokenize_bytes([tmp_path], tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == ["tokens.bin"]  # no part file left


def test_a_corpus_of_many_files_keeps_few_open(tmp_path):
    """Review of issue 13: every file stayed mapped (a descriptor each): 3,000 shards hit the open-file limit."""
    import subprocess
    import sys
    for k in range(300):
        _bin(tmp_path / f"shard{k:04}.bin", np.arange(k, k + 17))
    code = ("import resource, sys, numpy as np, readers, batching\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))\n"
            "r = readers.tokens(sys.argv[1], seq_len=8)\n"
            "seen = np.concatenate(list(batching.collated(batching.batch(readers.shuffle(r, seed=0), 50))()))\n"
            "print(len(r), len(seen), r.max_token(), readers.fingerprint(r)['content'] is not None)\n")
    root = str(_paths.ROOT)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": root}, cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:3] == ["600", "600", "315"]


def test_a_folder_named_like_a_token_file_is_skipped_and_hints_fit_the_size(tmp_path):
    """Review of issue 13: a subfolder named x.bin gave IsADirectoryError; 3 bytes were told to try token_size=4."""
    (tmp_path / "sub.bin").mkdir()
    _bin(tmp_path / "a.bin", range(20))
    assert len(tokens(tmp_path, seq_len=4)) == 4
    (tmp_path / "three.bin").write_bytes(b"abc")
    with pytest.raises(TokenFileError, match=r"three.bin has 3 bytes, not a multiple of token_size=2: it was cut "
                                             r"short, or written with another token size$"):
        tokens(tmp_path / "three.bin", seq_len=1)


def test_four_byte_tokens_read_as_two_bytes_are_refused_at_the_first_read(tmp_path):
    """Issue 27: a 4-byte file read as 2-byte tokens gave [35 0 32 0 114 0 ...] and trained on them."""
    text = np.frombuffer(b"# rose is a rose\n" * 50, np.uint8)
    path = _bin(tmp_path / "t.bin", text, "<u4")
    r = tokens(path, seq_len=8)  # nothing is read to build it
    for read in (lambda: r[0], r.max_token, r.check_samples):
        with pytest.raises(TokenFileError, match=r"t\.bin: read as 2-byte tokens \(token_size = \"TwoBytes\"\), every "
                                                 r"second token is 0 in a sample of 1,700: probably 4-byte tokens"):
            read()
    assert tokens(path, seq_len=8, token_size=4)[0].tolist() == text[:9].tolist()


@pytest.mark.parametrize("values", [
    np.tile(np.array([7, 0], "<u2"), 4),  # too few tokens to tell
    np.zeros(1000, "<u2"),  # nothing but zeros: not this fault
    np.tile(np.array([7, 0, 0, 5], "<u2"), 250),  # zeros at some odd positions only
])
def test_two_byte_tokens_with_zeros_are_read(tmp_path, values):
    r = tokens(_bin(tmp_path / "t.bin", values), seq_len=2)
    r.check_samples()
    assert r[0].tolist() == values[:3].tolist()


def test_an_npy_file_of_two_byte_tokens_is_not_second_guessed(tmp_path):
    """A .npy file records its dtype: a 2-byte one holds 2-byte tokens, whatever their values."""
    np.save(tmp_path / "t.npy", np.tile(np.array([7, 0], "<u2"), 500))
    assert tokens(tmp_path / "t.npy", seq_len=2)[0].tolist() == [7, 0, 7]


def test_vocab_size_bounds_the_ids_and_names_the_file(tmp_path):
    _bin(tmp_path / "a.bin", range(50))
    _bin(tmp_path / "b.bin", [1, 2, 300, 3] * 10, "<u4")
    stale = tokens(tmp_path / "b.bin", seq_len=3, token_size=4, vocab_size=256)
    with pytest.raises(TokenFileError, match=r"b\.bin holds the token id 300, beyond vocab_size = 256 \(ids 0\.\.255\)"):
        stale.check_samples()
    with pytest.raises(TokenFileError, match=r"b\.bin holds the token id 300"):
        stale.gather_columns(np.array([0]))
    r = tokens(tmp_path / "a.bin", seq_len=3, vocab_size=50)
    assert r.max_token() == 49 and repr(r) == "tokens(seq_len=3, token_size=2: 1 file, 50 tokens)"  # same data
    with pytest.raises(readers.BadValue, match="vocab_size must be an int >= 2"):
        tokens(tmp_path / "a.bin", seq_len=3, vocab_size=1)


def test_tokenize_bytes_refuses_to_replace_a_corpus_unless_told(tmp_path):
    """Issue 27: tokenize replaced an existing corpus in silence."""
    from readers.tokenized.windows import tokenize_bytes
    (tmp_path / "a.txt").write_text("hello\n")
    path = tokenize_bytes([tmp_path / "a.txt"], tmp_path)
    (tmp_path / "a.txt").write_text("hi\n")
    with pytest.raises(readers.FileError, match=r"tokens\.bin already holds a corpus \(12 bytes\); replace it with "
                                                r"overwrite=True"):
        tokenize_bytes([tmp_path / "a.txt"], tmp_path)
    assert np.fromfile(path, "<u2").tolist() == list(b"hello\n")
    tokenize_bytes([tmp_path / "a.txt"], tmp_path, overwrite=True)
    assert np.fromfile(path, "<u2").tolist() == list(b"hi\n")


def test_a_utf16_like_file_reads_when_its_size_or_its_vocabulary_says_two_byte_tokens(tmp_path):
    """Review 27 finding 2: byte-level tokens of UTF-16LE text were refused as probably 4-byte tokens, and the advice
    ended in "not a multiple of token_size=4 (try token_size=2)"."""
    utf16 = np.frombuffer("a rose is a rose\n".encode("utf-16-le") * 200, np.uint8)
    odd = _bin(tmp_path / "odd.bin", np.append(utf16, 10))  # 6,802 bytes: not 4-byte tokens
    tokens(odd, seq_len=8).check_samples()
    assert tokens(odd, seq_len=8)[0].tolist() == [97, 0, 32, 0, 114, 0, 111, 0, 115]
    even = _bin(tmp_path / "even.bin", utf16)
    with pytest.raises(TokenFileError, match=r"record their vocab_size in the data\.toml \(or pass vocab_size=\)"):
        tokens(even, seq_len=8).check_samples()
    r = tokens(even, seq_len=8, vocab_size=256)
    r.check_samples()
    assert r[0].tolist() == [97, 0, 32, 0, 114, 0, 111, 0, 115]


def test_four_byte_tokens_of_llama3s_vocabulary_read_as_two_bytes_are_refused(tmp_path):
    """Review 27 finding 3: 4-byte ids over 65,535 read 2 bytes at a time were read as they came."""
    ids = zipf_ids(128_256)
    path = _bin(tmp_path / "t.bin", ids, "<u4")
    with pytest.raises(TokenFileError, match=r"every second token is under 16 while the others reach .*: probably "
                                             r"4-byte tokens"):
        tokens(path, seq_len=8)[0]
    assert tokens(path, seq_len=8, token_size=4)[0].tolist() == ids[:9].tolist()


def test_a_file_mapped_again_is_not_sampled_again(tmp_path, monkeypatch):
    """Review 27 finding 5: with more files than stay mapped, almost every read mapped a file again and re-read its
    sample (32 scattered blocks): random gathers over 300 files went from 0.7 to 1.2 ms."""
    for k in range(6):
        _bin(tmp_path / f"s{k}.bin", np.arange(k, k + 33))
    monkeypatch.setattr(windows, "MAPPED", 2)
    checked, mapped = [], []
    for name in ("four_byte_problem", "vocabulary_problem"):
        real = getattr(token_checks, name)
        monkeypatch.setattr(token_checks, name, lambda path, *a, real=real, name=name: checked.append((name, path))
                            or real(path, *a))
    real_tokens = windows.Tokens._tokens
    monkeypatch.setattr(windows.Tokens, "_tokens", lambda self, k: mapped.append(k) or real_tokens(self, k))
    r = tokens(tmp_path, seq_len=4)
    r.check_samples()  # each file once
    assert len(checked) == 2 * 6
    rng = np.random.default_rng(0)
    for _ in range(20):
        r.gather_columns(rng.integers(0, len(r), 8))
    assert len(mapped) > 6 + 20  # files were mapped again and again ...
    assert len(checked) == 2 * 6  # ... and not sampled again
    copy = pickle.loads(pickle.dumps(r))  # another process checks for itself
    copy[0]
    assert len(checked) == 2 * 7


class _Reductions(np.ndarray):
    """An array that counts the passes of min and max over it."""
    passes: list = []

    def max(self, *args, **kwargs):
        _Reductions.passes.append("max")
        return super().max(*args, **kwargs)

    def min(self, *args, **kwargs):
        _Reductions.passes.append("min")
        return super().min(*args, **kwargs)


@pytest.mark.parametrize("name, dtype, token_size, vocab_size, passes", [
    ("t.bin", "<u4", 4, 1000, ["max"]),
    ("t.bin", "<u4", 4, None, ["max"]),
    ("t.bin", "<u2", 2, 1000, ["max"]),
    ("t.bin", "<u2", 2, None, []),
    ("t.npy", "<i4", 4, 1000, ["max", "min"]),
])
def test_a_gather_finds_the_bounds_of_its_ids_once(tmp_path, monkeypatch, name, dtype, token_size, vocab_size, passes):
    """Review 27 finding 13: with vocab_size set, a gather of 4-byte ids made three passes (min and max for int32,
    max again for the vocabulary)."""
    values = np.arange(1, 100).astype(dtype)
    path = str(tmp_path / name)
    values.tofile(path) if name.endswith(".bin") else np.save(path, values)
    r = tokens(path, seq_len=4, token_size=token_size, vocab_size=vocab_size)
    real = windows.Tokens._window_view
    monkeypatch.setattr(windows.Tokens, "_window_view", lambda self, k: real(self, k).view(_Reductions))
    monkeypatch.setattr(_Reductions, "passes", [])
    assert r.gather_columns(np.array([0, 3])).tolist() == [list(range(1, 6)), list(range(13, 18))]
    assert _Reductions.passes == passes


@pytest.mark.parametrize("token_size, vocab_size, fix", [
    (2, 100_000, "pass token_size=4 if the tokens are 4 bytes each, or correct vocab_size"),
    (2, 65_537, "pass token_size=4 if the tokens are 4 bytes each, or correct vocab_size"),
    (4, 2**31 + 1, "correct vocab_size: token ids are int32"),
])
def test_vocab_size_more_than_the_token_size_holds_is_refused_as_in_a_data_toml(tmp_path, token_size, vocab_size, fix):
    """Trial of issue 27, problem 3: tokens('big4', seq_len=64, token_size=2, vocab_size=100000) over 4-byte tokens of
    a vocabulary over 65,536 gave [19526 1 63696 0 ...]; a data.toml's vocab_size = 100000 with TwoBytes is refused,
    and so is the same through the API."""
    ids = np.random.default_rng(0).integers(0, 100_000, 4096).astype("<u4")
    ids.tofile(tmp_path / "big4.bin")
    with pytest.raises(readers.BadValue, match=rf"^tokens: vocab_size={vocab_size} is more ids than {token_size}-byte "
                                               rf"tokens hold \({MOST_IDS[token_size]:,}\); {re.escape(fix)}$"):
        tokens(tmp_path / "big4.bin", seq_len=64, token_size=token_size, vocab_size=vocab_size)
    assert tokens(tmp_path / "big4.bin", seq_len=64, token_size=2, vocab_size=65_536).vocab_size == 65_536
    assert tokens(tmp_path / "big4.bin", seq_len=64, token_size=4, vocab_size=100_000)[0][:2].tolist() == \
        ids[:2].tolist()
