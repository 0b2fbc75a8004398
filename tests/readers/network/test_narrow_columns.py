"""Columns sent narrower than the served reader gives them, and widened by the client (issue 30, section 2).

Before, a served token set went over the wire as int32 windows (the server widened the file's 2-byte ids, a second
copy, twice the bytes) and MNIST as float32 images (four times the file's bytes). Now a client that says so in its
hello gets the files' own bytes and turns them back itself, bit for bit; a client that does not gets the reader's
own columns, as before.
"""
import numpy as np
import pytest

import readers
from readers.sources import mnist
from readers.sources.idx import write_idx
from readers.tokenized.windows import TokenFileError
from tests.conftest import wait_until
from tests.helpers.serve_helpers import WAIT, Client, serving

SEQ_LEN = 16


def token_set(folder, vocab_size=None):
    np.random.default_rng(0).integers(0, 65536, 40 * SEQ_LEN + 1, dtype=np.uint16).astype("<u2").tofile(
        folder / "a.bin")
    np.arange(3 * SEQ_LEN + 1, dtype="<u2").tofile(folder / "b.bin")
    return readers.tokens(str(folder), seq_len=SEQ_LEN, vocab_size=vocab_size)


def mnist_set(folder):
    images = np.random.default_rng(1).integers(0, 256, (30, 28, 28), dtype=np.uint8)
    write_idx(str(folder / "train-images-idx3-ubyte"), images)
    write_idx(str(folder / "train-labels-idx1-ubyte"), (np.arange(30) % 10).astype(np.uint8))
    return mnist.train(str(folder), download=False)


@pytest.mark.parametrize("make, wire_row", [(token_set, (SEQ_LEN + 1) * 2), (mnist_set, 784 + 1)])
def test_served_columns_travel_in_the_files_bytes_and_arrive_as_the_local_readers(tmp_path, make, wire_row):
    local = make(tmp_path)
    indices = np.array([len(local) - 1, 0, 5, 5, 2])  # over both token files, repeated, out of order
    with serving(local) as server:
        remote = readers.remote(server.address)
        found = remote.gather_columns(indices)
        # (a server counts an answer's bytes once it is sent, the client may have it first)
        wait_until(lambda: server.stats["bytes"] >= len(indices) * wire_row, WAIT, "the answer's bytes counted")
        sent = server.stats["bytes"]
        in_order = remote.gather_columns(np.arange(len(local)))
    for got, want in zip(*((found, local.gather_columns(indices)) if isinstance(found, tuple)
                           else ((found,), (local.gather_columns(indices),)))):
        assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
    assert sent == len(indices) * wire_row  # (int32 windows were twice this, float32 images four times)
    want = local.gather_columns(np.arange(len(local)))
    assert all(g.tobytes() == w.tobytes() for g, w in zip(in_order if isinstance(in_order, tuple) else (in_order,),
                                                           want if isinstance(want, tuple) else (want,)))


def test_a_client_whose_hello_does_not_ask_gets_the_readers_own_columns(tmp_path):
    local = token_set(tmp_path)
    with serving(local) as server, Client(server.address) as client:
        client.login()  # a hello of version 1 without "narrow", as clients before it sent
        client.send({"type": "get", "id": 1, "interval": [2, 3]})
        header, body = client.receive()
    assert header["columns"] == {"dtype": "<i4", "shape": [2, SEQ_LEN + 1]}
    assert np.frombuffer(body, "<i4").reshape(2, -1).tolist() == local.gather_columns(np.arange(2, 4)).tolist()


def test_narrowed_token_windows_are_checked_against_vocab_size_as_the_widened_ones(tmp_path):
    local = token_set(tmp_path, vocab_size=1000)  # b.bin's ids are under 1000, a.bin's reach past it
    windows, way = local.wire_columns(np.array([41, 40]))
    assert windows.dtype == np.uint16 and way == {"as": "<i4"}
    assert windows.astype(np.int32).tolist() == local.gather_columns(np.array([41, 40])).tolist()
    with pytest.raises(TokenFileError, match="beyond vocab_size = 1000"):
        local.wire_columns(np.array([0]))


def test_a_reader_with_nothing_narrower_sends_its_own_columns_to_a_narrow_hello():
    with serving() as server, Client(server.address) as client:
        client.send({"type": "hello", "version": 1, "narrow": True})
        header, _ = client.receive()
        client.send({"type": "get", "id": 1, "interval": [0, 1]})
        answer, _ = client.receive()
    assert header["type"] == "welcome"
    assert all("as" not in column for column in answer["columns"])
