"""Remote reads: readers.remote over loopback, against a raw socket copy and the same pipeline read locally.

Every server here is ``python cli.py serve`` in a process of its own, and the
raw baseline's sender is a process too, so no client shares a GIL with what
it reads from. Entries are counted as the bytes they are handed over as (token
windows int32: 4,100 bytes a window; MNIST entries 3,144 bytes). On the wire
they are narrower (``wire_columns``): a window travels as the file's 2-byte ids
(2,050 bytes) and an MNIST entry as its 785 bytes, widened by the client.

a. Throughput: token windows (seq_len 1024, from --tokens random 2-byte tokens
   in a temporary folder) and MNIST entries (../shared/data/mnist; the row is
   skipped when absent), through collated(batch(R, --batch)) over a global
   shuffle and in order, for --batches batches. "raw" is a plain socket
   sending as many messages of the same size as the server's responses
   (consecutive batches share a request of about readers.remote's
   REQUEST_BYTES, 2 MiB), the client receiving
   them with recv_into into one buffer: what loopback TCP between two
   processes gives with no request, no gather, no framing and no Python per
   message beyond recv_into; goal: remote >= 0.7x raw. "local" is the same
   pipeline over the local reader in this process: what the data costs to
   gather at all. "raw wire" is the raw socket sending the bytes that travel
   (the narrowed frames): remote / raw wire says how close the wire itself
   comes to the socket, remote / raw how close the entries come to a socket
   that sends them as they are handed over. All are the best of --repeats
   runs, interleaved. Limits:
   the cores: the server gathers (copies) every entry before it is sent, the
   client takes each batch apart, and on a 2-core machine those copies and
   both ends' Python share the cores the raw copy has for itself; the CPU
   columns, the share of one core each end used, say which end is busy.
b. Many clients: --clients processes read different intervals of the token
   windows at once, each with gather_ahead over its interval's batches (8 in
   flight), released together, counted for --seconds after a second of
   warm-up (the same span of time for all); the server's aggregate MB/s and entries/s, and
   fairness: the slowest client's rate over the fastest's (1.0: all served
   alike). Limits: the server's threads (one per connection, and one
   sending) share a GIL, about one core of Python whatever the clients; on a
   machine with fewer cores than clients, also the cores the clients take
   from it, and the operating system's scheduling of the client processes
   (which sets the fairness more than the server does).
c. Small requests: --requests one-entry reads at random positions with 1 and
   with 8 in flight (gather_ahead over 1-entry chunks, in_flight 1 or 8); the
   latency of each entry from the moment the reader asks for it until it is
   handed over: p50, p99, and the entries per second. "raw round trip" is the
   floor: a 64-byte request answered by a message the size of one entry's
   frame, over a plain socket to another process. "r[i]" is one
   ``reader[i]`` call after another, as user code would write it. The CPU
   column is the server's CPU time per request: while it is about the
   interval between requests, the server is the bound, and more in flight
   adds queueing (latency), not entries per second.

d. Replicas: one client reads shuffled token windows through readers.remote
   over 1, 2 and 3 servers of the same data (--replicas N: up to N); the
   aggregate MB/s against one server, and the spread: the fewest entries one
   server served over the most (requests go by outstanding bytes). Limits:
   one client on this machine's cores, which the servers share with it.
   --replica-clients K: K client processes read at once instead (as b.),
   each through readers.remote over the N servers: the aggregate against
   one server, and the fairness; on a machine with cores for the servers
   and the clients, what replicas add when the server is the bound.

Usage: python benchmarks/remote.py [--tokens 50000000] [--batches 600] [--batch 64] [--repeats 3]
                                   [--clients 64] [--seconds 5] [--requests 2000] [--mnist DIR] [--json FILE]
                                   [--replicas 3] [--replica-clients 1] [--sections abcd]
Smaller: --tokens 10000000 --batches 100 --repeats 1 --clients 8 --seconds 2 --requests 500.
Machines here are shared and noisy: read the ratios within one run, not the absolute rates.
"""
from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import batching  # noqa: E402
import readers  # noqa: E402
from readers.network.wire import frame_parts, pack_columns  # noqa: E402
from readers.sources import mnist  # noqa: E402

SEQ_LEN = 1024
_ASK = struct.Struct(">iii")  # the raw baseline's request: mode (0 stream, 1 round trips), count, size
REQUEST = 64  # bytes of a raw round trip's request: about a one-entry get's frame


# -- the servers: the CLI in a process, and the raw sender in another ----------------------------
def start_server(args: list[str], log: str) -> tuple[subprocess.Popen, str]:
    """``python cli.py serve ARGS --port 0`` and the address its first line names."""
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "cli.py"), "serve", *args, "--port", "0"],
                                stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT)
    line = proc.stdout.readline()
    if not line.startswith("serving "):
        stop_server(proc)
        with open(log) as f:
            raise RuntimeError(f"cli.py serve {' '.join(args)} did not start: {line!r}\n{f.read()}")
    return proc, line.split()[-1]


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdout.close()


def raw_sender(ports: multiprocessing.Queue) -> None:
    """Answer each connection's ``_ASK``: stream ``count`` messages of ``size`` bytes, or ``count`` round trips."""
    listener = socket.create_server(("127.0.0.1", 0))
    ports.put(listener.getsockname()[1])
    while True:
        conn, _ = listener.accept()
        with conn:
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                mode, count, size = _ASK.unpack(_recv_exactly(conn, bytearray(_ASK.size)))
                message, request = bytes(size), bytearray(REQUEST)
                for _ in range(count):
                    if mode == 1:
                        _recv_exactly(conn, request)
                    conn.sendall(message)
            except OSError:  # a client that left early: the next one is served all the same
                pass


def _recv_exactly(sock: socket.socket, buffer: bytearray) -> bytearray:
    view, got = memoryview(buffer), 0
    while got < len(buffer):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionResetError("the peer closed the connection")
        got += n
    return buffer


def raw_stream(port: int, count: int, size: int) -> float:
    """Seconds to receive ``count`` messages of ``size`` bytes from the raw sender."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        buffer = bytearray(size)
        start = time.perf_counter()
        sock.sendall(_ASK.pack(0, count, size))
        for _ in range(count):
            _recv_exactly(sock, buffer)
        return time.perf_counter() - start


def raw_round_trips(port: int, count: int, size: int) -> list[float]:
    """The latency of each of ``count`` round trips: a ``REQUEST``-byte ask, a ``size``-byte answer."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(_ASK.pack(1, count, size))
        buffer, ask, times = bytearray(size), bytes(REQUEST), []
        for _ in range(count):
            start = time.perf_counter()
            sock.sendall(ask)
            _recv_exactly(sock, buffer)
            times.append(time.perf_counter() - start)
        return times


def frame_size(local, rows: int, narrow: bool = False) -> int:
    """Bytes of the server's response frame for ``rows`` entries (its header included); ``narrow``: as they travel
    to readers.remote, in the reader's ``wire_columns`` where it has them."""
    found = local.wire_columns(np.arange(rows)) if narrow else None
    meta, buffers = pack_columns(*found) if found is not None else pack_columns(local.gather_columns(np.arange(rows)))
    return sum(len(p) for p in frame_parts({"type": "entries", "id": 99999, "first": 0, "count": rows,
                                            "columns": meta}, buffers))


# -- a. throughput -------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process ``pid`` has used so far (Linux's /proc; NaN elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def pipeline_time(reader, shuffled: bool, batches: int, seed: int, batch: int) -> float:
    """Seconds for the first ``batches`` collated batches of ``batch`` entries of one pass."""
    source = readers.shuffle(reader, seed=seed) if shuffled else reader
    it = batching.collated(batching.batch(source, batch))()
    start = time.perf_counter()
    for _ in zip(range(batches), it):
        pass
    elapsed = time.perf_counter() - start
    it.close()
    return elapsed


def bench_throughput(name: str, local, address: str, server: int, raw_port: int, batches: int, batch: int,
                     repeats: int) -> list[dict]:
    batches = min(batches, len(local) // batch)
    row_bytes = frame_size(local, 1) - frame_size(local, 0)
    remote = readers.remote(address)
    # the responses' size: consecutive batches share requests of about REQUEST_BYTES (remote.request_rows rows)
    per_message = min(remote.request_rows, batches * batch)
    size, data = frame_size(local, per_message), batches * batch * row_bytes
    wire = frame_size(local, per_message, narrow=True)  # what travels: the files' own bytes (wire_columns)
    messages = -(-batches * batch // per_message)
    pipeline_time(remote, True, 5, 99, batch)  # connect and page the data in once
    pipeline_time(local, True, 5, 99, batch)
    rows = []
    for shuffled in (True, False):
        best = {"remote": 1e9, "raw": 1e9, "raw_wire": 1e9, "local": 1e9}
        wall = client_cpu = server_cpu = 0.0
        for k in range(repeats):  # interleaved, so that a noisy neighbour hits every row alike
            cpu, server_before = time.process_time(), cpu_seconds(server)
            seconds = pipeline_time(remote, shuffled, batches, k, batch)
            client_cpu += time.process_time() - cpu
            server_cpu += cpu_seconds(server) - server_before
            wall, best["remote"] = wall + seconds, min(best["remote"], seconds)
            best["raw"] = min(best["raw"], raw_stream(raw_port, messages, size))
            best["raw_wire"] = best["raw"] if wire == size else min(best["raw_wire"], raw_stream(raw_port, messages, wire))
            best["local"] = min(best["local"], pipeline_time(local, shuffled, batches, k, batch))
        rates = {key: data / 1e6 / seconds for key, seconds in best.items()}
        rows.append({"data": name, "order": "shuffled" if shuffled else "in order", "batch": batch, "batches": batches,
                     "message_bytes": size, "wire_bytes": wire, **{f"{k}_MBps": round(v, 1) for k, v in rates.items()},
                     "remote_vs_raw": round(rates["remote"] / rates["raw"], 3),
                     "remote_vs_raw_wire": round(rates["remote"] / rates["raw_wire"], 3),
                     "remote_vs_local": round(rates["remote"] / rates["local"], 3),
                     "client_cpu": round(client_cpu / wall, 2), "server_cpu": round(server_cpu / wall, 2)})
    return rows


# -- b. many clients -----------------------------------------------------------------------------
def client(address: str, k: int, clients: int, batch: int, seconds: float, warmup: float, ready, results) -> None:
    """Read interval ``k`` of ``clients`` in batches, over and over, once all are ready: for ``warmup`` seconds
    uncounted (every client connected and its first requests answered), then ``seconds`` counted. The barrier
    releases every client at once, so the counted windows are the same span of time, give or take a wake-up."""
    remote = readers.remote(address, deadline=10)
    share = len(remote) // clients
    lo = k * share
    chunks = (np.arange(lo + s, lo + min(s + batch, share), dtype=np.int64)
              for _ in itertools.count() for s in range(0, share, batch))  # the interval, again and again
    ready.wait()
    entries, nbytes = 0, 0
    begin = time.monotonic() + warmup
    it = remote.gather_ahead(chunks)
    for idx, columns in it:
        now = time.monotonic()
        if now >= begin + seconds:
            break
        if now >= begin:
            entries, nbytes = entries + len(idx), nbytes + columns.nbytes
    it.close()
    results.put((k, entries, nbytes, seconds))


def bench_clients(address: str, server: int, clients: int, batch: int, seconds: float, warmup: float = 1.0) -> dict:
    context = multiprocessing.get_context("spawn")
    ready, results = context.Barrier(clients + 1), context.Queue()
    procs = [context.Process(target=client, args=(address, k, clients, batch, seconds, warmup, ready, results), daemon=True)
             for k in range(clients)]
    try:
        for p in procs:
            p.start()
        ready.wait(timeout=120)
        start, server_before = time.perf_counter(), cpu_seconds(server)
        found = [results.get(timeout=warmup + seconds + 60) for _ in procs]
        server_cpu = (cpu_seconds(server) - server_before) / (time.perf_counter() - start)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.terminate()
                p.join()
    rates = [nbytes / elapsed for _, _, nbytes, elapsed in found]
    return {"clients": clients, "seconds": seconds, "warmup": warmup,
            "MBps": round(sum(rates) / 1e6, 1),
            "entries_per_s": round(sum(entries / elapsed for _, entries, _, elapsed in found)),
            "fairness": round(min(rates) / max(rates), 3),
            "slowest_MBps": round(min(rates) / 1e6, 2), "fastest_MBps": round(max(rates) / 1e6, 2),
            "server_cpu": round(server_cpu, 2), "client_MBps": [round(r / 1e6, 2) for r in rates]}


# -- c. small requests ---------------------------------------------------------------------------
def gather_latencies(remote, positions: np.ndarray) -> list[float]:
    """Each entry's time from being asked for (gather_ahead takes its chunk) to being handed over."""
    asked: deque[float] = deque()

    def chunks():
        for i in positions:
            asked.append(time.perf_counter())
            yield np.array([i], np.int64)

    times = []
    for _ in remote.gather_ahead(chunks()):
        times.append(time.perf_counter() - asked.popleft())
    return times


def item_latencies(remote, positions: np.ndarray) -> list[float]:
    times = []
    for i in positions.tolist():
        start = time.perf_counter()
        remote[i]
        times.append(time.perf_counter() - start)
    return times


def summary(name: str, how: str, times: list[float], wall: float, cpu: float) -> dict:
    ms = np.array(times) * 1e3
    return {"data": name, "how": how, "requests": len(times), "p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3), "entries_per_s": round(len(times) / wall),
            "server_cpu_us": round(cpu / len(times) * 1e6)}


def timed(name: str, how: str, server: int, work) -> dict:
    """``work()``'s latencies as a row, with the entries per second and the server's CPU time per request."""
    start, before = time.perf_counter(), cpu_seconds(server)
    times = work()
    return summary(name, how, times, time.perf_counter() - start, cpu_seconds(server) - before)


def bench_small(name: str, local, address: str, server: int, sender: int, raw_port: int, requests: int) -> list[dict]:
    positions = np.random.default_rng(0).integers(0, len(local), requests)
    rows = []
    for in_flight in (1, 8):
        remote = readers.remote(address, in_flight=in_flight, request_bytes=1)  # one entry a request
        gather_latencies(remote, positions[:50])  # warm
        rows.append(timed(name, f"gather_ahead, {in_flight} in flight", server,
                          lambda: gather_latencies(remote, positions)))
    remote = readers.remote(address)
    rows.append(timed(name, "r[i], one call after another", server,
                      lambda: item_latencies(remote, positions[:max(50, requests // 5)])))
    size = frame_size(local, 1)
    raw_round_trips(raw_port, 50, size)
    rows.append(timed(name, "raw round trip", sender, lambda: raw_round_trips(raw_port, requests, size)))
    return rows


# -- d. replicas ---------------------------------------------------------------------------------
def bench_replicas(tokens_dir: str, first: str, folder: str, most: int, batches: int, batch: int,
                   repeats: int, clients: int = 1, seconds: float = 5.0) -> list[dict]:
    """d. One client reads collated shuffled batches of token windows through readers.remote over 1, 2, 3 (up to
    ``most``: then 1, 2, 4, ... and ``most``) replica servers, ``first`` and more started here on the same data:
    the aggregate MB/s against one server, and the spread of the entries over the servers (the fewest one served
    over the most: 1.0 when shared evenly; by outstanding bytes, a server that answers slower gets less). With
    ``clients`` > 1, that many client processes read at once instead, each its interval of the windows in
    order for ``seconds`` (as b. reads one server), each through readers.remote over the N servers: the
    aggregate MB/s against one server, and the fairness between the clients."""
    counts = sorted({1, 2, *[2 ** k for k in range(most.bit_length()) if 2 ** k <= most], most})
    counts = [n for n in counts if n <= most] if most > 3 else [n for n in (1, 2, 3) if n <= most]
    procs, addresses = [], [first]
    try:
        for k in range(1, max(counts)):
            proc, address = start_server(["--config", os.path.join(tokens_dir, "data.toml")],
                                         os.path.join(folder, f"replica-{k}.log"))
            procs.append(proc)
            addresses.append(address)
        rows, one = [], None
        for n in counts:
            if clients > 1:
                many = bench_clients(addresses[:n], os.getpid(), clients, batch, seconds)  # (its server CPU: unused)
                one = one or many["MBps"]
                rows.append({"servers": n, "clients": clients, "seconds": seconds, "batch": batch,
                             "MBps": many["MBps"], "vs_one": round(many["MBps"] / one, 3),
                             "fairness": many["fairness"]})
                continue
            remote = readers.remote(addresses[:n]) if n > 1 else readers.remote([addresses[0]])
            pipeline_time(remote, True, 5, 99, batch)  # connect, and page the data in
            before = remote.stats()["servers"] if n > 1 else None
            best = min(pipeline_time(remote, True, batches, k, batch) for k in range(repeats))
            mbps = batches * batch * (SEQ_LEN + 1) * 4 / 1e6 / best
            one = one or mbps
            row = {"servers": n, "batches": batches, "batch": batch, "MBps": round(mbps, 1),
                   "vs_one": round(mbps / one, 3), "spread": 1.0, "rows_per_server": None}
            if n > 1:
                after = remote.stats()["servers"]
                served = [after[a]["rows"] - before[a]["rows"] for a in addresses[:n]]
                row.update(spread=round(min(served) / max(max(served), 1), 3), rows_per_server=served)
            rows.append(row)
        return rows
    finally:
        for proc in procs:
            stop_server(proc)


def print_replicas(rows: list[dict]) -> None:
    if "clients" in rows[0]:
        print(f"d. replicas: {rows[0]['clients']} clients at once for {rows[0]['seconds']:g} s, token windows in "
              "intervals, each through readers.remote over N servers of the same data:")
        print(f"   {'servers':>7} {'MB/s':>8} {'vs one':>7} {'fairness':>9}")
        for r in rows:
            print(f"   {r['servers']:>7} {r['MBps']:>8.1f} {r['vs_one']:>6.2f}x {r['fairness']:>9.2f}")
        return
    print(f"d. replicas: one client, shuffled token windows in batches of {rows[0]['batch']} (best of the repeats), "
          "through readers.remote over N servers of the same data:")
    print(f"   {'servers':>7} {'MB/s':>8} {'vs one':>7} {'spread':>7}  entries per server")
    for r in rows:
        print(f"   {r['servers']:>7} {r['MBps']:>8.1f} {r['vs_one']:>6.2f}x {r['spread']:>7.2f}  "
              f"{'' if r['rows_per_server'] is None else ', '.join(f'{x:,}' for x in r['rows_per_server'])}")


# -- the run -------------------------------------------------------------------------------------
def write_tokens(folder: str, n: int) -> None:
    """n random 2-byte tokens and a data.toml beside them, written in blocks to keep the writer small."""
    rng = np.random.default_rng(0)
    with open(os.path.join(folder, "tokens.bin"), "wb") as f:
        for lo in range(0, n, 1 << 24):
            rng.integers(0, 50257, size=min(1 << 24, n - lo), dtype=np.uint16).astype("<u2").tofile(f)
    with open(os.path.join(folder, "data.toml"), "w") as f:
        f.write(f'dir = "."\ntoken_size = "TwoBytes"\nseq_len = {SEQ_LEN}\n')


def print_table(throughput: list[dict], many: dict | None, small: list[dict], skipped: list[str]) -> None:
    print(f"{os.cpu_count()} CPU cores. CPU: the share of one core the process used while the remote reader ran")
    if throughput:
        print_throughput(throughput, skipped)
    if many:
        print(f"b. {many['clients']} clients at once for {many['seconds']:g} s after {many['warmup']:g} s, token "
              f"windows in intervals: {many['MBps']:.1f} MB/s, {many['entries_per_s']:,} entries/s in all; fairness "
              f"{many['fairness']:.2f} (slowest {many['slowest_MBps']:.2f} MB/s, fastest {many['fastest_MBps']:.2f} "
              f"MB/s); server CPU {many['server_cpu']:.0%}")
    if small:
        print("c. one-entry requests, latency from asked to handed over; the server's (or raw sender's) CPU per "
              "request:")
        print(f"   {'data':<7} {'how':<32} {'requests':>8} {'p50 ms':>8} {'p99 ms':>8} {'entries/s':>10} {'CPU us':>7}")
        for r in small:
            print(f"   {r['data']:<7} {r['how']:<32} {r['requests']:>8} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} "
                  f"{r['entries_per_s']:>10,} {r['server_cpu_us']:>7}")


def print_throughput(throughput: list[dict], skipped: list[str]) -> None:
    print(f"a. throughput, batches of {throughput[0]['batch']} (best of the repeats), MB/s of entries as they "
          "arrive:")
    print(f"   {'data':<7} {'order':<9} {'batches':>7} {'message':>9} {'on wire':>9} {'remote':>8} {'raw':>8} "
          f"{'local':>8} {'remote/raw':>10} {'/raw wire':>9} {'remote/local':>12} {'client CPU':>10} {'server CPU':>10}")
    for r in throughput:
        print(f"   {r['data']:<7} {r['order']:<9} {r['batches']:>7} {r['message_bytes']:>9,} {r['wire_bytes']:>9,} "
              f"{r['remote_MBps']:>8.1f} {r['raw_MBps']:>8.1f} {r['local_MBps']:>8.1f} {r['remote_vs_raw']:>9.2f}x "
              f"{r['remote_vs_raw_wire']:>8.2f}x {r['remote_vs_local']:>11.2f}x {r['client_cpu']:>10.0%} "
              f"{r['server_cpu']:>10.0%}")
    for note in skipped:
        print(f"   {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=50_000_000)
    parser.add_argument("--batches", type=int, default=600)
    parser.add_argument("--batch", type=int, default=64, help="Entries per batch in a. and b.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--mnist", default=os.path.join(os.path.dirname(ROOT), "shared", "data", "mnist"))
    parser.add_argument("--json", default=None, help="Also write the figures to this file, as one JSON object.")
    parser.add_argument("--replicas", type=int, default=3, help="d.: the most replica servers (rows for 1, 2, 3; "
                        "above 3: 1, 2, 4, ... and this many); 0 leaves d. out")
    parser.add_argument("--sections", default="abcd", help="Which of a. b. c. d. to run (default all: abcd).")
    parser.add_argument("--replica-clients", type=int, default=1, help="d.: client processes reading at once "
                        "(each its interval, for --seconds); 1: one client, shuffled, best of --repeats")
    args = parser.parse_args()
    readers.tune_allocator()  # as train() and cli.py serve do, so remote and local run as in training
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    sender = context.Process(target=raw_sender, args=(ports,), daemon=True)
    servers: list[subprocess.Popen] = []
    throughput, small, skipped = [], [], []
    with tempfile.TemporaryDirectory() as folder:
        try:
            sender.start()
            raw_port = ports.get(timeout=60)
            tokens_dir = os.path.join(folder, "tokens")
            os.mkdir(tokens_dir)
            write_tokens(tokens_dir, args.tokens)
            proc, tokens_address = start_server(["--config", os.path.join(tokens_dir, "data.toml")],
                                                os.path.join(folder, "tokens.log"))
            servers.append(proc)
            sets = [("tokens", readers.tokens(tokens_dir, seq_len=SEQ_LEN), tokens_address, proc.pid)]
            if os.path.isdir(args.mnist):
                proc, mnist_address = start_server(["--reader", "mnist", "--data-dir", args.mnist],
                                                   os.path.join(folder, "mnist.log"))
                servers.append(proc)
                sets.append(("mnist", mnist.train(args.mnist), mnist_address, proc.pid))
            else:
                skipped.append(f"mnist: skipped, no MNIST files in {args.mnist} (give --mnist DIR)")
            for name, local, address, pid in sets if "a" in args.sections else ():
                throughput += bench_throughput(name, local, address, pid, raw_port, args.batches, args.batch,
                                               args.repeats)
            many = (bench_clients(tokens_address, sets[0][3], args.clients, args.batch, args.seconds)
                    if "b" in args.sections else None)
            for name, local, address, pid in sets if "c" in args.sections else ():
                small += bench_small(name, local, address, pid, sender.pid, raw_port, args.requests)
            replicas = bench_replicas(tokens_dir, tokens_address, folder, args.replicas, args.batches, args.batch,
                                      args.repeats, args.replica_clients, args.seconds) \
                if args.replicas > 0 and "d" in args.sections else []
        finally:
            for proc in servers:
                stop_server(proc)
            if sender.is_alive():
                sender.terminate()
            sender.join()
    print_table(throughput, many, small, skipped)
    if replicas:
        print_replicas(replicas)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            figures = {"throughput": throughput, "clients": many, "small": small, "skipped": skipped,
                       "replicas": replicas}
            out.write(json.dumps(figures) + "\n")


if __name__ == "__main__":
    main()
