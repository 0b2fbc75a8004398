"""readers.remote: a served reader reads exactly as the local one, through every stage, pass and worker kind.

Each test serves a small reader of its own on 127.0.0.1 (port 0) from a
background thread (``readers.serve``) and compares what the remote reader gives
with what the same pipeline gives over the local reader. Auth and versions are
in test_connection.py; failures, retries and restarts in test_client_restart.py.
"""
import pickle
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import batching
import readers
from readers.network import client as client_module
from readers.network import connection as connection_module
from readers.network.wire import decode
from readers.testing import assert_resumes_at_every_step, assert_same
from tests.conftest import HANG, wait_until

N = 257  # no multiple of a batch or shard count below, so last batches and shards are short


def quiet(line: str) -> None:
    """The servers' log: one line per connection, of no interest here."""


def make_source(kind: str, folder) -> readers.IndexedReader:
    """A small local indexed reader of each kind the server holds: arrays (a tuple entry), one array (a single
    value) and token windows over two files."""
    rng = np.random.default_rng(0)
    if kind == "arrays":
        return readers.from_arrays(rng.normal(size=(N, 3)).astype(np.float32), np.arange(N) * 10)
    if kind == "np_array":
        return readers.np_array(rng.integers(-1000, 1000, size=(N, 5), dtype=np.int16))
    rng.integers(0, 60000, 1000, dtype=np.uint16).astype("<u2").tofile(folder / "a.bin")
    rng.integers(0, 60000, 777, dtype=np.uint16).astype("<u2").tofile(folder / "b.bin")
    return readers.tokens(str(folder), seq_len=8)


@pytest.fixture
def serving():
    """``serving(reader, **options)``: a server of ``reader``, stopped when the test ends."""
    handles = []

    def start(reader, **options):
        handles.append(readers.serve(reader, log=quiet, **options))
        return handles[-1]

    yield start
    for handle in handles:
        handle.stop()


@pytest.fixture(params=["arrays", "np_array", "tokens"])
def pair(request, tmp_path, serving):
    """(local reader, its remote reader, the server's handle) for each kind of source."""
    local = make_source(request.param, tmp_path)
    server = serving(local)
    return local, readers.remote(server.address), server


def shuffled(r):
    return readers.shuffle(r, seed=3)


def collated(r, size=16):
    return batching.collated(batching.batch(shuffled(r), size))


PIPELINES = {
    "plain": lambda r: r,
    "shuffle": shuffled,
    "shard": lambda r: readers.shard(shuffled(r), 1, 3),
    "shard_pad": lambda r: readers.shard(shuffled(r), 2, 4, equalize="pad"),
    "batch": lambda r: batching.batch(shuffled(r), 10),
    "collated": collated,
    "collated_shard": lambda r: batching.collated(batching.batch(readers.shard(shuffled(r), 0, 2), 8)),
    "prefetch_threads": lambda r: readers.prefetch(collated(r), 2),
}


def test_remote_has_the_local_length_entries_and_gathers(pair):
    local, remote, _ = pair
    assert len(remote) == len(local)
    for i in (0, 1, 17, len(local) - 1, -1, -len(local)):
        assert_same(remote[i], local[i], f"[{i}]")
    idx = np.concatenate([np.random.default_rng(1).permutation(len(local))[:60], [5, 5, 0, 5]]).astype(np.int64)
    assert_same(list(remote.gather(idx)), list(local.gather(idx)))
    assert_same(remote.gather_columns(idx), local.gather_columns(idx))
    assert_same(remote.gather_columns(np.arange(3, 40)), local.gather_columns(np.arange(3, 40)))  # an interval


def test_remote_out_of_range_raises_the_typed_error_at_once(pair):
    local, remote, server = pair
    n = len(local)
    with pytest.raises(IndexError):
        remote[n]
    before = server.stats["requests"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # trying again would warn
        for bad in ([n], [0, n + 5], [-1], list(range(n - 2, n + 2))):
            with pytest.raises(readers.RemoteError) as caught:
                remote.gather(np.array(bad))
            assert caught.value.kind == "out_of_range" and caught.value.address == remote.address, caught.value
    assert server.stats["requests"] - before == 4  # once each: not tried again
    assert_same(remote[3], local[3])


def test_remote_gathers_nothing_as_the_local_reader_does(pair):
    local, remote, _ = pair
    empty = np.zeros(0, np.int64)
    assert remote.gather(empty) == []
    assert_same(remote.gather_columns(empty), local.gather_columns(empty))
    assert_same(list(remote.gather_ahead([empty, np.arange(2), empty])),
                [(c, local.gather_columns(c)) for c in (empty, np.arange(2), empty)])


@pytest.mark.parametrize("name", PIPELINES)
def test_remote_pipeline_passes_equal_the_local_ones(pair, name):
    local, remote, _ = pair
    make = PIPELINES[name]
    want, got = make(local), make(remote)
    for pass_id in range(2):
        assert_same(list(got()), list(want()), f"{name}, pass {pass_id}")


def test_remote_round_shares_equal_the_local_ones(pair):
    """Rounds of the coordinator over a remote reader, across the end of a pass: each client's share is the
    local share, and the round's shares together are its global batch."""
    local, remote, _ = pair
    n, size = len(local), 50
    for step in range(n // size + 2):  # the last rounds cross into the next pass
        assignment = readers.assign_batches(range(3), data_index=step * size, global_batch_size=size, seed=step)
        together = []
        for client in assignment:
            got, want = (batching.collated(batching.batch(readers.round_share(shuffled(r), assignment, client),
                                                          size)) for r in (remote, local))
            batch = list(got())
            assert_same(batch, list(want()), f"round {step}, client {client}")
            together.append(batch[0])
        whole = readers.round_share(shuffled(local), {"all": (step * size, step * size + size - 1)}, "all")
        want_all = list(batching.collated(batching.batch(whole, size))())[0]
        assert_same(tuple(np.concatenate(c) for c in zip(*together)) if isinstance(together[0], tuple)
                    else np.concatenate(together), want_all, f"round {step}: the shares together")


def test_remote_pass_resumes_from_its_state_at_every_step(pair):
    local, remote, _ = pair
    states = assert_resumes_at_every_step(lambda: collated(remote, 32), max_steps=6)
    want = list(collated(local, 32)())
    for state in states[1:-1]:  # a state saved over the remote reader resumes the local pass too
        resumed = collated(remote, 32)
        resumed.set_state(state)
        assert_same(list(resumed()), want[-(-state["cursor"] // 32):], f"resumed from {state}")


@pytest.mark.parametrize("in_flight", [1, 8])
def test_remote_in_flight_gives_the_same_entries(tmp_path, serving, in_flight):
    local = make_source("arrays", tmp_path)
    remote = readers.remote(serving(local).address, in_flight=in_flight)
    assert_same(list(collated(remote, 7)()), list(collated(local, 7)()))
    chunks = [np.random.default_rng(k).integers(0, N, 1 + 13 * k) for k in range(12)]
    assert_same(list(remote.gather_ahead(chunks)), [(c, local.gather_columns(c)) for c in chunks])


@pytest.mark.parametrize("in_flight", [1, 3])
def test_remote_has_its_next_requests_under_way_while_a_batch_is_used(tmp_path, serving, in_flight):
    """in_flight requests travel while the consumer works on a batch (with 1, the next batch's). Regression: the
    requests of the chunk taken after a job was done went out only once the consumer came back for the next.
    The first batch is asked for alone (issue 27: a read of one entry costs one request); the window opens when
    the consumer comes back for the second."""
    local = make_source("arrays", tmp_path)
    server = serving(local)
    it = collated(readers.remote(server.address, in_flight=in_flight), 16)()
    want = collated(local, 16)()
    assert_same(next(it), next(want))
    assert_same(next(it), next(want))
    wait_until(lambda: server.stats["requests"] == 2 + in_flight, HANG,
               lambda: f"{in_flight} requests under way beyond the two batches taken (the server has had "
                       f"{server.stats['requests']})")
    it.close()


def test_remote_splits_large_requests_and_reassembles_them(tmp_path, serving, monkeypatch):
    local = make_source("arrays", tmp_path)  # 20 bytes an entry
    server = serving(local)
    monkeypatch.setattr(client_module, "REQUEST_BYTES", 200)  # 10 entries a request
    monkeypatch.setattr(client_module, "INDEX_ROWS", 4)  # a list of indices: at most 4 a request
    remote = readers.remote(server.address, in_flight=3)
    before = server.stats["requests"]
    assert_same(remote.gather_columns(np.arange(95)), local.gather_columns(np.arange(95)))
    assert server.stats["requests"] - before == 10
    idx = np.random.default_rng(2).permutation(N)[:30]
    assert_same(list(remote.gather(idx)), list(local.gather(idx)))
    assert server.stats["requests"] - before == 10 + 8
    assert_same(list(collated(remote, 25)()), list(collated(local, 25)()))


def test_remote_lists_the_indices_of_many_small_entries_in_requests_that_fit_a_frame(serving, monkeypatch):
    """Regression: a request asked for REQUEST_BYTES of entries whatever their size, so a shuffled gather of
    millions of one-byte entries listed them all in one JSON header, over MAX_FRAME (a ProtocolError: a frame
    of 22,888,927 bytes here, with 64 MiB requests; with 2 MiB ones, entries past 10 million)."""
    monkeypatch.setattr(client_module, "REQUEST_BYTES", 64 << 20)
    x = np.random.default_rng(4).integers(0, 256, 3_000_000, dtype=np.uint8)
    server = serving(readers.np_array(x))
    remote = readers.remote(server.address)
    idx = np.random.default_rng(5).permutation(len(x))
    assert_same(remote.gather_columns(idx), x[idx])
    assert server.stats["requests"] == -(-len(x) // client_module.INDEX_ROWS)


@pytest.mark.parametrize("request_bytes", [64 << 20, client_module.REQUEST_BYTES])
def test_remote_reassembles_responses_larger_than_a_frame(serving, monkeypatch, request_bytes):
    """40 MB of entries, over the 16 MiB MAX_FRAME: asked for at once, the response comes in parts."""
    rng = np.random.default_rng(3)
    big = rng.integers(0, 256, size=(40, 1 << 20), dtype=np.uint8)
    sources = {"tuple": readers.from_arrays(big, np.arange(40)), "single": readers.np_array(big)}
    monkeypatch.setattr(client_module, "REQUEST_BYTES", request_bytes)
    for kind, local in sources.items():
        server = serving(local)
        remote = readers.remote(server.address)
        before = server.stats["requests"]
        idx = rng.permutation(40)
        assert_same(remote.gather_columns(idx), local.gather_columns(idx), kind)
        assert_same(remote.gather_columns(np.arange(2, 40)), local.gather_columns(np.arange(2, 40)), kind)
        if request_bytes > 40 << 20:
            assert server.stats["requests"] - before == 2  # one request each, answered in parts
        server.stop()


def test_remote_pickles_without_its_connection(pair):
    local, remote, server = pair
    clone = pickle.loads(pickle.dumps(remote))
    before = server.stats["connections"]
    assert_same(list(collated(clone)()), list(collated(local)()))
    assert server.stats["connections"] == before + 1
    pipeline = pickle.loads(pickle.dumps(collated(remote)))
    assert_same(list(pipeline()), list(collated(local)()))


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_remote_reads_in_process_workers_each_with_its_own_connection(no_leaks, tmp_path, serving, start_method):
    local = make_source("arrays", tmp_path)
    server = serving(local)
    remote = readers.remote(server.address)
    remote[0]  # the parent's own connection, idle: a forked worker must not use it
    before = server.stats["connections"]
    got = readers.prefetch(collated(remote), workers=2, mode="process", start_method=start_method)
    assert_same(list(got()), list(collated(local)()))
    assert server.stats["connections"] >= before + 2


def test_remote_reads_in_torch_dataloader_workers(tmp_path, serving):
    torch = pytest.importorskip("torch")
    local = make_source("arrays", tmp_path)
    server = serving(local)
    remote = readers.remote(server.address)
    remote[0]

    def ids(r):
        dataset = readers.torch_dataset(readers.shard(readers.shuffle(r, seed=0)))
        loader = torch.utils.data.DataLoader(dataset, batch_size=8, num_workers=2)
        return [int(i) for _, label in loader for i in label]

    before = server.stats["connections"]
    got = ids(remote)
    assert got == ids(local) and sorted(got) == list(range(0, 10 * N, 10))
    assert server.stats["connections"] >= before + 2


def test_remote_reuses_its_connection_across_reads(tmp_path, serving):
    """Regression: each [i] and gather opened a new connection (its read-ahead generator was dropped unfinished,
    which closed it), so a loop of single reads logged in again for every entry."""
    local = make_source("np_array", tmp_path)
    server = serving(local)
    remote = readers.remote(server.address)
    for i in range(20):
        assert_same(remote[i], local[i])
        remote.gather(np.array([i, i + 1]))
    assert server.stats["connections"] == 1
    pipeline = collated(remote, 128)
    next(iter(pipeline()))  # a pass stopped after its first batch: only that batch was asked for, nothing in flight
    assert server.stats["connections"] == 1
    it = iter(pipeline())
    next(it), next(it)  # stopped after its second batch, the next ones under way: that connection closes
    it.close()
    assert_same(list(pipeline()), list(collated(local, 128).run(2)))
    assert server.stats["connections"] == 2
    next(iter(remote.gather_ahead([np.arange(4)])))  # stopped after its last answer: nothing in flight
    assert_same(remote[0], local[0])
    assert server.stats["connections"] == 2


def test_remote_pass_abandoned_with_requests_in_flight_leaves_the_next_pass_right(tmp_path, serving, monkeypatch):
    local = make_source("arrays", tmp_path)
    server = serving(local)
    monkeypatch.setattr(client_module, "REQUEST_BYTES", 60)  # 3 requests a batch of 8: several under way
    remote = readers.remote(server.address, in_flight=8)
    got, want = collated(remote, 8), collated(local, 8)
    for k, _ in enumerate(got()):
        if k == 2:
            break  # six batches' requests still in flight
    assert_same(list(got()), list(want.run(1)))
    kept = got()  # abandoned, and still open while another pass reads
    next(kept)
    assert_same(list(got()), list(want.run(3)))
    assert_same(remote[5], local[5])
    kept.close()
    assert_same(list(got()), list(want.run(4)))
    wait_until(lambda: len(server.server.sessions) <= 2, HANG, "the abandoned passes' connections to close")


def test_remote_passes_interleaved_in_one_thread(pair):
    local, remote, _ = pair
    other = lambda r: batching.collated(batching.batch(readers.shuffle(r, seed=4), 11))  # noqa: E731
    want = list(zip(collated(local)(), other(local)()))
    got = []
    for k, (a, b) in enumerate(zip(collated(remote)(), other(remote)())):
        assert_same(remote[k], local[k])  # a third read between the two passes' read-ahead
        got.append((a, b))
    assert_same(got, want)


def test_remote_reads_from_several_threads_at_once(pair):
    local, remote, server = pair
    together = threading.Barrier(4, timeout=HANG)

    def read(seed):
        pipeline = lambda r: batching.collated(batching.batch(readers.shuffle(r, seed=seed), 9))  # noqa: E731
        want = list(pipeline(local)())
        together.wait()
        for _ in range(2):
            assert_same(list(pipeline(remote)()), want, f"thread of seed {seed}")
            idx = np.random.default_rng(seed).integers(0, len(local), 50)
            assert_same(list(remote.gather(idx)), list(local.gather(idx)))

    with ThreadPoolExecutor(4) as pool:
        for done in [pool.submit(read, seed) for seed in range(4)]:
            done.result(timeout=HANG)
    # each thread's idle connection closes with the thread's storage, not when the server gives up on it
    wait_until(lambda: len(server.server.sessions) <= 1, HANG, "the ended threads' connections to close")


def test_remote_checks_its_options():
    with pytest.raises(ValueError, match="in_flight must be an int >= 1"):
        readers.remote("127.0.0.1:1", in_flight=0)
    with pytest.raises(ValueError, match="deadline must be >= 0"):
        readers.remote("127.0.0.1:1", deadline=-1)
    with pytest.raises(ValueError, match='is not "host:port"'):
        readers.remote("localhost")


def test_remote_says_what_it_serves(tmp_path, serving):
    local = make_source("tokens", tmp_path)
    server = serving(local, info={"seq_len": 8})
    remote = readers.remote(server.address)
    assert remote.info == {"seq_len": 8}
    assert remote.identity() == f"remote({local.title()})"
    assert repr(remote).startswith(f"remote({server.address}: {len(local)} entries of tokens(")
    assert remote.digest() == readers.fingerprint(local)["content"]


def test_remote_passes_of_small_batches_travel_in_shared_requests(tmp_path, serving):
    """Consecutive batches share requests of about request_bytes, each batch whole (its columns arrive as views of
    one answer); request_bytes=1 asks for every batch alone."""
    local = make_source("arrays", tmp_path)  # 20 bytes an entry
    server = serving(local)
    for request_bytes, requests in ((200, -(-N // 10)), (1, -(-N // 5))):
        remote = readers.remote(server.address, request_bytes=request_bytes)
        before = server.stats["requests"]
        assert_same(list(collated(remote, 5)()), list(collated(local, 5)()))
        assert server.stats["requests"] - before == requests, request_bytes
    with pytest.raises(ValueError, match="request_bytes must be an int >= 1"):
        readers.remote(server.address, request_bytes=0)


def test_remote_gathers_of_long_index_lists_finish(serving):
    """Regression: every request of a large gather was sent before any answer was read; with long index lists
    both ends could end up blocked in send. Requests now wait while SEND_AHEAD bytes of them are unanswered."""
    x = np.arange(1_500_000, dtype=np.int64)
    server = serving(readers.np_array(x), frame_timeout=3.0)
    remote = readers.remote(server.address, in_flight=64, deadline=1.0, timeout=3.0)
    before = server.stats["connections"]
    idx = np.random.default_rng(7).permutation(len(x))
    assert_same(remote.gather_columns(idx), x[idx])
    assert server.stats["connections"] == before  # no connection was given up on the way


def test_remote_data_has_the_local_fingerprint(pair):
    """The same data read through a server is the same data: a checkpoint of either resumes on the other."""
    local, remote, _ = pair
    for build in (lambda r: r, shuffled, collated):
        assert readers.fingerprint(build(remote)) == readers.fingerprint(build(local))


def _noise(entry, rng):
    """A served augmentation: a column of draws beside the sample (module level: the server pickles nothing)."""
    (sample,) = entry
    return sample, rng.random(2).astype(np.float32)


def test_remote_of_a_reader_that_draws_per_pass_gives_each_pass_its_own_draws_as_local():
    """Issue 26: random access knows the pass, across the wire too: a get names the pass it reads."""
    local = readers.random_map(_noise, readers.from_arrays(np.arange(40)), seed=3)
    with readers.serve(local, log=quiet) as server:
        r = readers.remote(server.address)
        assert r.draws_per_pass
        for make in (lambda src: src, lambda src: readers.shuffle(src, seed=1),
                     lambda src: batching.collated(batching.batch(readers.shuffle(src, seed=1), 8))):
            there, here = make(r), make(local)
            for pass_id in range(3):
                there.set_pass(pass_id)
                here.set_pass(pass_id)
                assert_same(list(there()), list(here()))
        assert_same(r[5], local[5])  # outside a pass: pass 0, both sides
    plain = readers.from_arrays(np.arange(4))
    with readers.serve(plain, log=quiet) as server:
        r = readers.remote(server.address)
        assert not r.draws_per_pass and r.for_pass(2) is r  # nothing drawn: no copy, no pass on the wire


# -- issue 27: what is asked for ahead of the consumer is bounded in bytes ---------------------------------------
ENTRY = 16 << 10  # bytes an entry: the issue's 256 KiB entries and 2 MiB requests, shrunk alike (4 a request)
BIG = 200


class Asked:
    """The rows each ``get`` the client sends asks for, and the entries the consumer has taken or is asking for
    at that moment: what was asked for ahead of it, at every send."""

    def __init__(self, monkeypatch):
        self.reset()
        send = connection_module.Connection.send_frame

        def counted(conn, frame):
            header = decode(memoryview(frame)[4:])[0]
            if header.get("type") == "get":
                self.requests += 1
                listed = header.get("indices")  # (a list, or the description of the body's int64 column)
                self.rows += (header["interval"][1] - header["interval"][0] + 1 if "interval" in header
                              else listed["shape"][0] if isinstance(listed, dict) else len(listed))
                self.most_ahead = max(self.most_ahead, self.rows - self.taken - self.demand)
            return send(conn, frame)

        monkeypatch.setattr(connection_module.Connection, "send_frame", counted)

    def reset(self) -> None:
        self.rows = self.taken = self.demand = self.most_ahead = self.requests = 0

    def consume(self, iterator, size: int = 1) -> None:
        """Take every entry (or batch of ``size``) of ``iterator``, saying each time what is asked for next."""
        while True:
            self.demand = size
            try:
                item = next(iterator)
            except StopIteration:
                return
            self.taken += len(item) if size > 1 else 1  # (a batch of one column: an array of size rows)
            self.demand = 0


ISSUE_27_PIPELINES = {
    "plain": (lambda r: r, 1),
    "global shuffle": (lambda r: readers.shuffle(r, seed=0), 1),
    "buffer shuffle": (lambda r: readers.shuffle(r, 64, seed=0), 1),
    "batches under the window": (lambda r: batching.collated(batching.batch(readers.shuffle(r, seed=0), 8)), 8),
    "batches over the window": (lambda r: batching.collated(batching.batch(r, 40)), 40),
}


@pytest.mark.parametrize("name", ISSUE_27_PIPELINES)
def test_remote_reads_one_entry_with_one_request_and_bounds_what_it_asks_ahead_in_bytes(serving, monkeypatch, name):
    """Regression (issue 27): a pass asked for a whole plan chunk (4,096 entries, or the whole pass behind a
    global shuffle) before handing over its first entry: 3,000 entries of 256 KiB cost 786 MB for one entry, MNIST
    behind a shuffle 90 requests. Now one entry costs one request of at most request_bytes, and what is asked for
    and not yet taken stays within in_flight x request_bytes over a whole pass, whatever the order or batch."""
    data = np.random.default_rng(27).integers(0, 256, (BIG, ENTRY), dtype=np.uint8)
    server = serving(readers.np_array(data))
    build, size = ISSUE_27_PIPELINES[name]
    in_flight, request_bytes = 3, 4 * ENTRY
    remote = readers.remote(server.address, in_flight=in_flight, request_bytes=request_bytes)
    asked = Asked(monkeypatch)
    it = build(remote)()
    first = next(it)
    window = in_flight * request_bytes // ENTRY
    requests = 1 if size <= window else -(-size * ENTRY // request_bytes)  # a batch over the window: in pieces
    assert server.stats["requests"] == asked.requests == requests, name
    assert asked.rows * ENTRY <= max(request_bytes, size * ENTRY), name
    it.close()
    local = build(readers.np_array(data))
    asked.reset()
    asked.consume(build(remote)(), size)
    assert asked.taken == BIG and asked.rows >= BIG
    assert asked.most_ahead * ENTRY <= in_flight * request_bytes, f"{name}: {asked.most_ahead} entries ahead"
    assert_same(first, next(local()), name)


def test_remote_bounds_what_it_asks_ahead_when_one_entry_is_over_request_bytes(serving, monkeypatch):
    """An entry larger than request_bytes goes one a request, in_flight of them ahead at most."""
    data = np.arange(BIG * 64, dtype=np.int64).reshape(BIG, 64)  # 512 bytes an entry
    server = serving(readers.np_array(data))
    remote = readers.remote(server.address, in_flight=2, request_bytes=100)
    asked = Asked(monkeypatch)
    asked.consume(readers.shuffle(remote, seed=1)())
    assert asked.taken == BIG and asked.requests == BIG and asked.most_ahead <= 2


@pytest.mark.parametrize("in_flight", [8, 2])
@pytest.mark.parametrize("name", ISSUE_27_PIPELINES)
def test_remote_bounds_in_bytes_what_it_asks_ahead_when_entries_are_over_request_bytes(serving, monkeypatch, name,
                                                                                        in_flight):
    """Regression (trial of issue 27, problem 4): entries larger than request_bytes went one a request with in_flight
    of them ahead: 4 MiB entries (2 MiB requests, 8 in flight) had 32 MiB asked ahead against the 16 MiB stated,
    and 8 MiB against 4 MiB with in_flight=2. Now no more entries than in_flight x request_bytes holds: 4 with 8 in
    flight, and one with 2 (an entry as large as the whole bound, read one at a time)."""
    entry, request_bytes = 1024, 512  # the trial's 4 MiB entries and 2 MiB requests, shrunk alike
    data = np.random.default_rng(4).integers(0, 256, (64, entry), dtype=np.uint8)
    server = serving(readers.np_array(data))
    remote = readers.remote(server.address, in_flight=in_flight, request_bytes=request_bytes)
    build, size = ISSUE_27_PIPELINES[name]
    asked = Asked(monkeypatch)
    asked.consume(build(remote)(), size)
    assert asked.taken == 64 and asked.rows >= 64
    assert asked.most_ahead <= max(1, in_flight * request_bytes // entry), f"{name}: {asked.most_ahead} entries ahead"
    assert_same(list(build(remote)()), list(build(readers.np_array(data))()), name)


@pytest.mark.parametrize("binary", [True, False])
def test_remote_sends_listed_indices_in_the_body_only_to_a_server_that_takes_them(serving, monkeypatch, binary):
    """A server's welcome says ``binary_indices``; to one of before (no such field) the list goes in the JSON
    header, as it always did."""
    if not binary:
        from readers.network.served_reader import Served
        made = Served.__init__

        def old_welcome(self, *args, **kwargs):
            made(self, *args, **kwargs)
            del self.welcome["binary_indices"]

        monkeypatch.setattr(Served, "__init__", old_welcome)
    local = readers.from_arrays(np.arange(100) * 3, np.arange(100, dtype=np.int32))
    server = serving(local)
    sent = []
    send = connection_module.Connection.send_frame
    monkeypatch.setattr(connection_module.Connection, "send_frame",
                        lambda conn, frame: (sent.append(decode(memoryview(frame)[4:])), send(conn, frame))[1])
    idx = np.random.default_rng(0).permutation(100)[:40]
    assert_same(readers.remote(server.address).gather_columns(idx), local.gather_columns(idx))
    (header, body), = [(h, b) for h, b in sent if h["type"] == "get"]
    if binary:
        assert header["indices"] == {"dtype": "<i8", "shape": [40]} and np.frombuffer(body, "<i8").tolist() == \
            idx.tolist()
    else:
        assert header["indices"] == idx.tolist() and len(body) == 0
