"""A server of a part of the data (issue 30, "Parts"): it answers the indices of its part as the local reader
does, refuses the others with ``out_of_range`` naming the interval it holds (the connection stays open), announces
the part and a digest of its rows in its welcome, and reads nothing outside its part: token files outside it are
never opened."""
import builtins

import numpy as np
import pytest

import readers
import readers.tokenized.windows
from readers.network.parts import part_digest, part_interval
from readers.network.served_reader import RequestError, Served
from tests.helpers.serve_helpers import (
    VALUES,
    WORDS,
    Client,
    expect_rows,
    serving,
    small_reader,
)

OUTSIDE = "is outside the part this server holds: entries [50, 120) of 200 (50..119); ask a server that holds it"


def test_served_part_checks_requests_against_the_interval_it_holds():
    served = Served(small_reader(), part=(50, 120))
    assert list(served.indices({"interval": [50, 119]})) == list(range(50, 120))
    for header, index in [({"interval": [49, 60]}, 49), ({"interval": [100, 120]}, 120), ({"indices": [60, 10]}, 10),
                          ({"indices": [130, 70]}, 130), ({"interval": [0, 199]}, 0)]:
        with pytest.raises(RequestError) as caught:
            served.indices(header)
        assert caught.value.kind == "out_of_range" and caught.value.message == f"index {index} {OUTSIDE}", header
    with pytest.raises(RequestError, match="index 200 is past the last entry"):
        served.indices({"indices": [200]})


def failing_outside(lo: int, hi: int):
    """The small reader's rows, failing on any index outside [lo, hi): a read outside the part shows."""
    def row(i):
        if not lo <= i < hi:
            raise RuntimeError(f"read row {i}, outside the part")
        return VALUES[i], WORDS[i]
    return readers.map_readers(row, readers.np_array(np.arange(len(VALUES))))


def test_served_part_reads_nothing_outside_it():
    with pytest.raises(readers.BadValue, match="outside the part"):
        Served(failing_outside(50, 120))  # the whole reader is sampled at the start: this one fails
    served = Served(failing_outside(50, 120), part=(50, 120))
    assert served.welcome["entries"] == 200 and served.welcome["part"] == [50, 120]
    assert served.welcome["fingerprint"]["content"] is None and served.welcome["fingerprint"]["length"] == 200
    meta, buffers = served.part(served.indices({"interval": [50, 119]}))
    assert meta[0]["shape"] == [70]


def test_served_parts_of_the_same_data_have_the_same_digest_and_of_other_data_another():
    first, again = Served(small_reader(), part=(50, 120)), Served(small_reader(), part=(50, 120))
    assert first.welcome["part_digest"] == again.welcome["part_digest"] == part_digest(small_reader(), (50, 120))
    other_words = WORDS.copy()
    other_words[100] += 1
    other = Served(readers.from_arrays(VALUES, other_words), part=(50, 120))
    assert other.welcome["part_digest"] != first.welcome["part_digest"]
    assert Served(small_reader(), part=(50, 121)).welcome["part_digest"] != first.welcome["part_digest"]
    assert "part" not in Served(small_reader()).welcome and "part_digest" not in Served(small_reader()).welcome


@pytest.mark.parametrize("part", [(0, 0), (150, 201), (-1, 5), (7, 3)])
def test_serve_refuses_a_part_outside_the_data(part):
    with pytest.raises(readers.BadValue, match=r"part \["):
        readers.serve(small_reader(), part=part)


def test_a_served_part_answers_its_indices_refuses_others_and_stays_open():
    with serving(part=(50, 120)) as server, Client(server.address) as client:
        welcome = client.login()
        assert (welcome["entries"], welcome["part"]) == (200, [50, 120])
        assert welcome["part_digest"] == part_digest(small_reader(), (50, 120))
        client.send({"type": "get", "id": 1, "interval": [50, 119]})
        expect_rows(client.rows(1, 70), range(50, 120))
        client.send({"type": "get", "id": 2, "indices": [60, 49]})
        assert client.rejected("out_of_range", 2) == f"index 49 {OUTSIDE}"
        client.send({"type": "get", "id": 3, "interval": [119, 120]})
        assert client.rejected("out_of_range", 3) == f"index 120 {OUTSIDE}"
        client.send({"type": "get", "id": 4, "indices": [119, 50, 77]})  # the same connection serves on
        expect_rows(client.rows(4, 3), [119, 50, 77])
        remote = readers.remote(server.address)
        assert len(remote) == 200
        expect_rows(remote.gather_columns(np.arange(50, 120)), range(50, 120))
        with pytest.raises(readers.RemoteError) as caught:
            remote.gather_columns(np.array([10]))
        assert caught.value.kind == "out_of_range" and caught.value.message == f"index 10 {OUTSIDE}"
        assert repr(server) == f"<serving entries [50, 120) of 200 on {server.address}>"


def test_a_token_server_of_a_part_opens_only_the_files_of_its_part(tmp_path, monkeypatch):
    """`serve --config data.toml --part 2/3` over three files of 50 windows each: the server starts (checks,
    fingerprint, part digest, no max_token scan) and answers its part having opened the second file alone."""
    import cli

    (tmp_path / "tokens").mkdir()
    for k, name in enumerate("abc"):
        (np.arange(201, dtype="<u2") + 1000 * k).tofile(tmp_path / "tokens" / f"{name}.bin")
    config = tmp_path / "data.toml"
    config.write_text('dir = "tokens"\ntoken_size = "TwoBytes"\nseq_len = 4\n')  # no vocab_size: no scan of a part
    local = readers.tokens(tmp_path / "tokens", seq_len=4)
    want = local.gather_columns(np.arange(50, 100))
    opened: list[str] = []
    monkeypatch.setattr(readers.tokenized.windows, "open",
                        lambda path, *args, **kw: opened.append(str(path)) or builtins.open(path, *args, **kw),
                        raising=False)
    holds = cli._part_option("2/3", None)
    with cli.serve.make_context("serve", ["--config", str(config), "--part", "2/3"]):
        reader, info = cli._served(None, None, False, str(config), "train", holds=holds)
    assert holds(len(reader)) == part_interval(2, 3, 150) == (50, 100)
    assert info["max_token"] is None and info["tokens"] == 603
    with serving(reader, part=holds(len(reader)), info=info) as server:
        remote = readers.remote(server.address)
        np.testing.assert_array_equal(remote.gather_columns(np.arange(50, 100)), want)
        with pytest.raises(readers.RemoteError, match="index 100 is outside the part this server holds: entries "
                                                      r"\[50, 100\) of 150"):
            remote.gather_columns(np.array([100]))
    assert opened and set(opened) == {str(tmp_path / "tokens" / "b.bin")}, opened
