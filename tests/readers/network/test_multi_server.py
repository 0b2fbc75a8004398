"""readers.remote over several servers (issue 30): replicas, failover, parts, refusals, stats.

Servers here run in this process (readers.serve); tests/test_cli_serve_many.py starts them by the CLI.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import readers
from readers.errors import BadValue
from readers.network.client import Remote, RemoteUnavailable
from readers.network.multi_server import Servers

N = 300


def _data(shift: int = 0) -> readers.IndexedReader:
    return readers.from_arrays(np.arange(N * 3).reshape(N, 3) + shift, np.arange(N) % 7)


def _parts(bounds: list[tuple[int, int]], shift: int = 0) -> list:
    """A server of each part (which answers an index outside its part with an out_of_range error)."""
    return [readers.serve(_data(shift), part=part, log=lambda line: None) for part in bounds]


@pytest.fixture
def parted():
    made = []
    yield lambda bounds, shift=0: made.extend(_parts(bounds, shift)) or made[-len(bounds):]
    for s in made:
        s.stop()


def _rows(reader) -> list:
    return [(a.tolist(), int(b)) for a, b in reader]


@pytest.fixture
def three():
    servers = [readers.serve(_data(), log=lambda line: None) for _ in range(3)]
    yield servers
    for s in servers:
        s.stop()


def test_remote_list_of_one_address_is_one_remote(three):
    r = readers.remote([three[0].address])
    assert type(r) is Remote and len(r) == N


def test_remote_replicas_pass_equals_local_and_share(three):
    r = readers.remote([s.address for s in three], request_bytes=256, in_flight=2)
    assert isinstance(r, Servers) and len(r) == N
    local = readers.shuffle(_data(), seed=3)
    assert _rows(readers.shuffle(r, seed=3)()) == _rows(local())
    stats = r.stats()
    assert stats["total"]["rows"] == N and stats["total"]["failures"] == 0
    assert all(s["requests"] > 0 for s in stats["servers"].values()), stats  # every replica took a share
    assert set(stats["servers"]) == {s.address for s in three}


def test_remote_replicas_shard_and_workers(three):
    r = readers.remote([s.address for s in three], request_bytes=512)
    got = []
    for k in range(3):
        pipe = readers.shard(readers.shuffle(r, seed=1), k, 3)
        got += _rows(readers.prefetch(pipe, workers=2, mode="process")())
    local = [_rows(readers.shard(readers.shuffle(_data(), seed=1), k, 3)()) for k in range(3)]
    assert sorted(got) == sorted(x for part in local for x in part)


def test_remote_failover_server_stopped_mid_pass(three):
    """Issue 30: a server that fails has its requests moved to the others; the pass equals the local one."""
    r = readers.remote([s.address for s in three], request_bytes=96, in_flight=2, deadline=20.0, timeout=5.0)
    it, got = iter(readers.shuffle(r, seed=5)()), []
    for entry in it:
        got.append((entry[0].tolist(), int(entry[1])))
        if len(got) == 40:
            three[1].stop()
    assert got == _rows(readers.shuffle(_data(), seed=5)())
    stats = r.stats()["servers"]
    assert stats[three[1].address]["failures"] >= 1, stats


def test_remote_failover_two_down_then_back(three):
    """Two of three servers stop, the third carries the pass; they come back on their ports and rejoin."""
    addresses = [s.address for s in three]
    r = readers.remote(addresses, request_bytes=96, in_flight=2, deadline=20.0)
    three[0].stop()
    three[2].stop()
    assert _rows(r()) == _rows(_data()())
    ports = [int(a.rsplit(":", 1)[1]) for a in addresses]
    back = [readers.serve(_data(), port=ports[k], log=lambda line: None) for k in (0, 2)]
    try:
        import time
        time.sleep(0.3)  # past the first back-off (BACKOFF = 0.25 s): the next pieces try them again
        for _ in range(3):
            assert _rows(r()) == _rows(_data()())
        served = r.stats()["servers"]
        assert served[addresses[0]]["requests"] > 0 and served[addresses[2]]["requests"] > 0, served
    finally:
        for s in back:
            s.stop()


def test_remote_parts_without_replicas(parted):
    bounds = [(0, 100), (100, 250), (250, N)]
    three = parted(bounds)
    r = readers.remote([s.address for s in three], request_bytes=200)
    assert _rows(readers.shuffle(r, seed=2)()) == _rows(readers.shuffle(_data(), seed=2)())
    rows = {a: s["rows"] for a, s in r.stats()["servers"].items()}
    assert rows == {s.address: hi - lo for s, (lo, hi) in zip(three, bounds)}


def test_remote_parts_with_replicas_and_failover(parted):
    """Two replicas of [0, 150), two of [150, N), a third server over [100, 200): a pass rides out the loss of a
    replica."""
    four = parted([(0, 150), (0, 150), (150, N), (150, N), (100, 200)])
    r = readers.remote([s.address for s in four], request_bytes=96, in_flight=2, deadline=20.0)
    got = []
    for entry in readers.shuffle(r, seed=4)():
        got.append((entry[0].tolist(), int(entry[1])))
        if len(got) == 50:
            four[0].stop()
    assert got == _rows(readers.shuffle(_data(), seed=4)())
    assert r.stats()["servers"][four[0].address]["failures"] >= 1


def test_remote_part_nobody_holds_raises_naming_interval(parted):
    three = parted([(0, 100), (100, 200), (200, N)])
    r = readers.remote([s.address for s in three], deadline=0.5, timeout=2.0)
    three[1].stop()
    with pytest.raises(RemoteUnavailable, match=r"entries \[100, 200\).*" + three[1].address.replace(".", r"\.")):
        r.gather_columns(np.array([150]))
    assert int(r[250][1]) == 250 % 7  # the other parts still read


@pytest.mark.parametrize("parts, message", [
    ([(0, 100), (150, N)], r"no server holds entries \[100, 150\)"),
    ([(0, 200), (100, N)], None),  # overlapping, the same data: accepted
])
def test_remote_parts_cover(parted, parts, message):
    addresses = [s.address for s in parted(parts)]
    if message is None:
        assert len(readers.remote(addresses)) == N
    else:
        with pytest.raises(BadValue, match=message):
            readers.remote(addresses)


@pytest.mark.parametrize("mine, theirs, overlap", [
    (None, None, (0, N)),  # whole: the content digests differ
    ((0, 150), (0, 150), (0, 150)),  # one part: the part digests differ
    ((0, 200), (100, N), (100, 200)),  # overlapping, unequal parts: rows of the overlap compared
])
def test_remote_replica_of_other_data_refused(mine, theirs, overlap):
    """Issue 30: a replica serving other data is refused at the start, naming both servers."""
    with readers.serve(_data(), part=mine, log=lambda line: None) as one, \
            readers.serve(_data(shift=1), part=theirs, log=lambda line: None) as other:
        message = f"{one.address} and {other.address} both hold entries \\[{overlap[0]}, {overlap[1]}\\)"
        with pytest.raises(BadValue, match=message):
            readers.remote([one.address, other.address])  # (refused before what no one holds is looked for)


def test_remote_servers_of_other_lengths_refused(three):
    with readers.serve(readers.from_arrays(np.zeros((5, 3), np.int64), np.zeros(5, np.int64)),
                       log=lambda line: None) as short:
        with pytest.raises(BadValue, match=f"{short.address} serves 5 entries"):
            readers.remote([three[0].address, short.address])


def test_remote_servers_pickle_into_threads(three):
    import pickle
    r = pickle.loads(pickle.dumps(readers.remote([s.address for s in three], request_bytes=128)))
    out = [None] * 2

    def read(k: int) -> None:
        out[k] = _rows(r())

    threads = [threading.Thread(target=read, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert out[0] == out[1] == _rows(_data()())


def _plus_one(entry):
    return entry[0] + 1, entry[1]


def test_remote_servers_of_other_pipelines_refused(three):
    with readers.serve(readers.map_readers(_plus_one, _data()), log=lambda line: None) as mapped:
        with pytest.raises(BadValue, match=f"{mapped.address} serves map_readers.* and {three[0].address} from_arrays"):
            readers.remote([three[0].address, mapped.address])


def test_remote_replicas_a_slower_server_gets_less(three):
    """Issue 30: requests go by outstanding bytes: a replica that answers slower is asked less."""
    import time

    served = three[0].server.served
    gather = served.gather

    def slow(indices, pass_id=None):
        time.sleep(0.02)
        return gather(indices, pass_id)

    served.gather = slow
    r = readers.remote([three[0].address, three[1].address], request_bytes=240, in_flight=8)
    assert _rows(r()) == _rows(_data()())
    rows = r.stats()["servers"]
    assert rows[three[0].address]["rows"] < rows[three[1].address]["rows"], rows


def test_remote_parts_empty_gather_has_the_columns_types(parted):
    r = readers.remote([s.address for s in parted([(0, 100), (100, N)])])
    a, b = r.gather_columns(np.array([], np.int64))
    assert a.shape == (0, 3) and b.shape == (0,) and a.dtype == np.int64


def _noisy(entry, rng):
    return entry[0] + rng.integers(0, 1000, 3), entry[1]


def test_remote_replicas_of_a_reader_drawn_per_pass_equal_local(three):
    """Each piece names its pass, whichever server answers it: two passes equal the local ones."""
    local = readers.random_map(_noisy, _data(), seed=7)
    servers = [readers.serve(readers.random_map(_noisy, _data(), seed=7), log=lambda line: None) for _ in range(2)]
    try:
        r = readers.remote([s.address for s in servers], request_bytes=400)
        remote_pass, local_pass = readers.shuffle(r, seed=1), readers.shuffle(local, seed=1)
        for _ in range(2):
            assert _rows(remote_pass()) == _rows(local_pass())
    finally:
        for s in servers:
            s.stop()


def test_remote_failover_on_a_timeout(three):
    """Issue 30: a server that stops answering (a timeout, not a reset) has its requests moved to the others."""
    served, release = three[0].server.served, threading.Event()
    gather = served.gather

    def stuck(indices, pass_id=None):
        release.wait(10)  # until the test ends: longer than the reader's timeout
        return gather(indices, pass_id)

    served.gather = stuck
    try:
        r = readers.remote([s.address for s in three], request_bytes=400, timeout=0.5, deadline=20.0)
        assert _rows(readers.shuffle(r, seed=8)()) == _rows(readers.shuffle(_data(), seed=8)())
        assert r.stats()["servers"][three[0].address]["failures"] >= 1
    finally:
        release.set()
