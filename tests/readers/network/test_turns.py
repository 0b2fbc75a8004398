"""readers.network.session.Turns: the connections' gathers take turns in the order they ask (issue 30, section 2).

Before, each connection's thread gathered as soon as it won the GIL, and with 64 clients reading at once the
slowest got about half the fastest's rate (fairness 0.51-0.66 in benchmarks/remote.py, b.); a ``threading.Lock`` has
the same fault, waking any of its waiters. With turns handed over in order it was 0.97-0.98.
"""
import threading

import numpy as np

import readers
from readers.network.session import Turns
from tests.conftest import wait_until
from tests.helpers.serve_helpers import VALUES, WAIT, serving

THREADS = 6


def test_turns_are_handed_over_in_the_order_they_were_asked_for():
    turns, order = Turns(patience=WAIT), []

    def take(k: int) -> None:
        with turns.turn() as held:
            order.append((k, held))

    threads = []
    with turns.turn():  # held: each thread in turn queues behind it, and behind those started before it
        for k in range(THREADS):
            threads.append(threading.Thread(target=take, args=(k,), daemon=True))
            threads[-1].start()
            wait_until(lambda: len(turns._waiting) == k + 1, WAIT, f"thread {k} waiting for its turn")
    for thread in threads:
        thread.join(WAIT)
    assert order == [(k, True) for k in range(THREADS)]
    assert turns.take(0.0) is True, "free again: taken at once"


def test_a_turn_held_too_long_holds_up_the_others_no_longer_than_their_patience():
    turns = Turns(patience=0.05)  # (a reader waiting on a URL's bytes must not stop every other connection)
    with turns.turn():
        assert turns.take() is False and not turns._waiting
    assert turns.take() is True


def test_a_session_gathers_in_its_turn(tmp_path):
    with serving() as server:
        remote = readers.remote(server.address, deadline=WAIT)
        got = []
        server.server.turns.patience = WAIT
        with server.server.turns.turn():  # another connection's gather under way: this one waits its turn
            reading = threading.Thread(target=lambda: got.append(remote.gather_columns(np.array([4, 1]))[0]),
                                       daemon=True)
            reading.start()
            wait_until(lambda: len(server.server.turns._waiting) == 1, WAIT, "the request waiting for its turn")
            assert got == []
        reading.join(WAIT)
    assert got[0].tolist() == VALUES[[4, 1]].tolist()
