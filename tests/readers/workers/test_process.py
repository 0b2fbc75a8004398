"""readers.workers.process: a process worker's body, driven message by message through its pipe."""
from __future__ import annotations

import multiprocessing
import os

import pytest

from readers import from_sequence
from readers.workers.process import next_pass_of, process_main
from readers.workers.shared_memory import unpack
from readers.workers.worker import CANCEL, DONE, ENTRIES, FAILED, STOPPED, pass_message
from tests.conftest import HANG

CTX = multiprocessing.get_context("fork")


def start(job, first, limit, persistent):
    """A worker process on ``job``'s pass ``first``; the consumer's end of its pipe."""
    mine, theirs = CTX.Pipe(duplex=True)
    p = CTX.Process(target=process_main, daemon=True,
                    args=(0, job, first, None, theirs, limit, None, os.getpid(), [mine], "worker 0", persistent))
    p.start()
    theirs.close()
    return p, mine


def receive(conn, kinds=(DONE, FAILED, STOPPED), credit=True):
    """Entries up to the worker's last word of the pass, granting credit for each message; and that word."""
    entries = []
    while True:
        assert conn.poll(HANG), "the worker went quiet"
        kind, _, payload = unpack(conn.recv_bytes(), None)
        if kind in kinds:
            return entries, kind, payload
        entries += payload
        if credit:
            conn.send_bytes(len(payload).to_bytes(4, "little"))


def test_a_kept_worker_runs_each_pass_it_is_sent_and_stops_a_cancelled_one():
    p, conn = start(from_sequence(list(range(100))), (0, 0), 4, persistent=True)
    try:
        got = []
        while len(got) < 4:  # no credit given: it stops 4 entries ahead
            got += receive(conn, kinds=(ENTRIES,), credit=False)[2]
        assert got == [0, 1, 2, 3] and not conn.poll(0.2)
        conn.send_bytes(CANCEL)
        assert receive(conn)[1] == STOPPED
        conn.send_bytes(pass_message(1, 95))  # pass 1, from position 95
        assert receive(conn)[:2] == ([95, 96, 97, 98, 99], DONE)
        conn.send_bytes(CANCEL)  # late: the pass is over, nothing happens
        conn.send_bytes(pass_message(2, 0))
        assert receive(conn)[:2] == (list(range(100)), DONE)
    finally:
        conn.close()  # the end of its pipe: the worker exits
        p.join(HANG)
    assert p.exitcode == 0


def test_a_one_pass_worker_ends_after_its_pass():
    p, conn = start(from_sequence("abc"), (0, 1), 0, persistent=False)
    try:
        assert receive(conn, credit=False)[:2] == (["b", "c"], DONE)  # (limit 0: no credit needed)
        p.join(HANG)
        assert p.exitcode == 0
    finally:
        conn.close()


def test_a_kept_worker_that_fails_a_pass_waits_for_the_next():
    def fails():
        yield 1
        raise KeyError("row 2")

    p, conn = start(fails, (0, 0), 0, persistent=True)
    try:
        for _ in range(2):
            entries, kind, payload = receive(conn)
            assert entries == [1] and kind == FAILED and "KeyError: 'row 2'" in payload[1]
            conn.send_bytes(pass_message(1, 0))
        assert p.is_alive()
    finally:
        conn.close()
        p.join(HANG)


@pytest.mark.parametrize("messages, task", [
    ([], None),
    ([CANCEL, b"\x05\x00\x00\x00", pass_message(7, 3)], (7, 3, False)),
    ([pass_message(0, 0, True), pass_message(1, 0)], (0, 0, True)),
])
def test_next_pass_of_passes_over_what_belongs_to_the_pass_before(messages, task):
    assert next_pass_of(messages) == task
