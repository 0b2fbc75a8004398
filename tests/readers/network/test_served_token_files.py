"""A data-provider server of token files that change under it: a typed rejection per request, and it serves on.

Issue 27, item 12: a token file cut short while `python cli.py serve --config` had it mapped killed the server with
SIGBUS (exit 135) at the next read past the new end.
"""
import os
import re
import signal
import subprocess

import numpy as np
import pytest

import readers
from tests.conftest import HANG
from tests.helpers.child_processes import python_child, read_line

ANNOUNCED = re.compile(r"serving (\d+) entries on (127\.0\.0\.1:\d+)\n")


def test_a_served_token_file_cut_short_is_refused_per_request_and_the_server_stays_up(tmp_path):
    (tmp_path / "tokens").mkdir()
    a, b = tmp_path / "tokens" / "a.bin", tmp_path / "tokens" / "b.bin"
    (np.arange(100_001) % 60_000).astype("<u2").tofile(a)  # windows 0..19999, over 49 pages
    np.arange(1000, 1101, dtype="<u2").tofile(b)  # windows 20000..20019
    (tmp_path / "data.toml").write_text('dir = "tokens"\ntoken_size = "TwoBytes"\nseq_len = 5\n')
    with python_child("cli.py", "serve", "--config", tmp_path / "data.toml", "--port", "0",
                      stderr=subprocess.DEVNULL) as server:
        found = ANNOUNCED.fullmatch(read_line(server.stdout, 30, "the server's announcement"))
        assert found and found[1] == "20020", found
        remote = readers.remote(found[2], deadline=HANG / 2)
        assert remote[19999].tolist() == list(range(39995, 40001))  # (mod 60,000)
        os.truncate(a, 100)  # cut short in place, under the server's map
        with pytest.raises(readers.RemoteError) as caught:
            remote[19999]
        assert server.poll() is None, f"the server died ({server.poll()}; SIGBUS is -{int(signal.SIGBUS)})"
        assert caught.value.kind == "server_error"
        assert (f"TokenFileChanged: {a} changed while it was being read: it had 200,002 bytes when the reader opened "
                "it and has 100 now") in caught.value.message
        assert remote[20003].tolist() == list(range(1015, 1021)), "the unchanged file still serves"
        with pytest.raises(readers.RemoteError, match="a.bin changed"):
            remote.gather_columns(np.array([20001, 3]))
        assert server.poll() is None
