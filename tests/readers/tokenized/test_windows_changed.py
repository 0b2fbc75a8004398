"""readers.tokens over files that change under their memory map, and .npy headers that promise too much.

Issue 27, items 12 and 18a: a token file cut short under a reader's map killed the process with SIGBUS at the next
read past its new end; one rewritten in place at the same size changed the reader's entries silently; a .npy header
announcing more tokens than its file holds was accepted, and reading it raised numpy's bare ValueError.
"""
import os
import signal
import subprocess

import numpy as np
import pytest

import readers
from readers.tokenized import windows
from readers.tokenized.windows import TokenFileChanged, TokenFileError, tokens
from tests.conftest import HANG
from tests.helpers.child_processes import python_child, read_to_end

PAST = 1_000_000_000 * 10**9  # a modification time (ns) long gone: a rewrite now moves it, whatever the clock's tick


def _bin(path, values, dtype="<u2"):
    np.asarray(values, dtype=dtype).tofile(path)
    os.utime(path, ns=(PAST, PAST))
    return str(path)


# The read past the new end runs in a child: without the check it dies of SIGBUS, which must fail this test, not
# kill pytest.
CUT_SHORT = """
import os, sys
import numpy as np
import readers
path = sys.argv[1]
r = readers.tokens(path, seq_len={seq_len})
print(r[0].tolist()[:2], flush=True)  # mapped now
os.truncate(path, 100)  # cut short in place, under the map
try:
    {read}
except readers.ReaderkitError as exc:
    print("refused:", type(exc).__name__ + ":", exc, flush=True)
"""


@pytest.mark.parametrize("read", ["r[19999]", "r.gather_columns(np.arange(19990, 20000))",
                                  "list(readers.shuffle(r, seed=0)())"],
                         ids=["getitem", "gather", "a shuffled pass"])
def test_a_token_file_cut_short_under_its_map_is_refused_not_a_sigbus(tmp_path, read):
    path = _bin(tmp_path / "t.bin", np.arange(100_001) % 60_000)
    script = CUT_SHORT.format(seq_len=5, read=read)
    with python_child("-c", script, path, stderr=subprocess.STDOUT) as child:
        out = read_to_end(child.stdout, HANG * 3, "the child's output")
        code = child.wait(HANG)
    assert code != -signal.SIGBUS, f"the read past the new end died of SIGBUS; output: {out!r}"
    assert code == 0, out
    first, refused = out.splitlines()
    assert first == "[0, 1]"
    assert refused == (f"refused: TokenFileChanged: {path} changed while it was being read: it had 200,002 bytes when the reader "
                       "opened it and has 100 now (cut short or rewritten); a token file must stay as it is while a "
                       "reader or server uses it: write new tokens to new files, then build the reader (or restart "
                       "the server) again")


def test_a_token_file_rewritten_in_place_at_the_same_size_is_refused(tmp_path, monkeypatch):
    path = _bin(tmp_path / "t.bin", range(100))
    r = tokens(path, seq_len=8)
    assert r[5].tolist()[:2] == [40, 41]
    np.arange(1000, 1100, dtype="<u2").tofile(path)  # the same size: the entry 5 became [1040, 1041]
    for a_pass in (r, readers.shuffle(r, seed=0)):  # checked at the pass's start
        with pytest.raises(TokenFileChanged, match=r"t\.bin changed while it was being read: it was rewritten in "
                                                   r"place \(its modification time moved\)"):
            list(a_pass())
    monkeypatch.setattr(windows, "CHECK_EVERY", 0.0)  # a read's own check, as when a second has passed since the last
    with pytest.raises(TokenFileChanged, match="rewritten in place"):
        r[5]


def test_a_token_file_replaced_or_removed_is_refused_with_its_name(tmp_path, monkeypatch):
    a, b = _bin(tmp_path / "a.bin", range(50)), _bin(tmp_path / "b.bin", range(100, 150))
    r = tokens(tmp_path, seq_len=4)
    assert r[0].tolist() == [0, 1, 2, 3, 4]  # a.bin mapped
    _bin(tmp_path / "new.part", range(500, 550))
    os.replace(tmp_path / "new.part", a)  # another file under the same name: the old one stays mapped
    with pytest.raises(TokenFileChanged, match=f"{a} changed .*: another file has taken its name"):
        list(r())
    monkeypatch.setattr(windows, "CHECK_EVERY", 0.0)
    with pytest.raises(TokenFileChanged, match=f"{a} changed .*: another file has taken its name"):
        r.gather_columns(np.array([0, 20]))
    assert r[20].tolist() == list(range(132, 137)), "b.bin, unchanged, still reads"
    os.unlink(b)
    with pytest.raises(TokenFileChanged, match=f"{b} changed while it was being read: it is gone"):
        r[20]


def test_max_token_and_digest_refuse_a_changed_file_before_mapping_it(tmp_path):
    path = _bin(tmp_path / "t.bin", range(100))
    r = tokens(path, seq_len=8)
    os.truncate(path, 20)
    for read in (r.max_token, r.digest):
        with pytest.raises(TokenFileChanged, match="had 200 bytes when the reader opened it and has 20 now"):
            read()


def test_a_changed_file_is_a_token_file_error_and_a_readerkit_error():
    assert issubclass(TokenFileChanged, TokenFileError) and issubclass(TokenFileChanged, readers.ReaderkitError)


def test_an_npy_header_announcing_more_tokens_than_the_file_holds_is_refused_at_open(tmp_path):
    """Issue 27 item 18a: a header announcing 10**6 tokens in a 100-token file gave len 124,999."""
    path = tmp_path / "t.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<u2", "fortran_order": False, "shape": (10**6,)})
        np.arange(100, dtype="<u2").tofile(f)
    with pytest.raises(TokenFileError) as caught:
        tokens(path, seq_len=7)
    assert str(caught.value) == (f"{path}: its .npy header announces 1,000,000 tokens (2,000,000 bytes after the "
                                 "128-byte header), but the file has 328 bytes, room for 100: it was cut short or its "
                                 "header edited; save the tokens again with np.save")


def test_a_token_file_written_to_while_mapped_is_refused_at_the_next_read(tmp_path):
    path = _bin(tmp_path / "t.bin", range(100))
    r = tokens(path, seq_len=8)
    assert r[3].tolist()[0] == 24  # mapped
    with open(path, "ab") as f:
        f.write(np.arange(100, 110, dtype="<u2").tobytes())
    with pytest.raises(TokenFileChanged, match=r"it had 200 bytes when the reader opened it and has 220 now "
                                               r"\(written to\)"):
        r[3]  # the size is checked on every read, whenever the last full check was
