"""readers.network.client: what RemoteUnavailable advises when no server answers a first connection."""
import socket
import warnings

import pytest

import readers


def test_no_server_at_the_start_is_told_a_server_may_still_be_starting():
    """Review 27 finding 10: a launcher that starts the server and its clients together fails after connect_timeout
    (5 s) while the server still reads its corpus; the advice said only to check that a server runs."""
    with socket.socket() as s:  # a port bound and never listened on: connections to it are refused
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # "cannot reach ...; trying again for up to 0.2 s"
            with pytest.raises(readers.RemoteUnavailable) as caught:
                readers.remote(address, connect_timeout=0.2)
    assert ("; a server started at the same time may still be starting (it listens once it prints 'serving N entries "
            "on HOST:PORT'): start the client after that line, or give readers.remote a longer connect_timeout (now "
            "0.2 s; deadline, now ") in str(caught.value)
    assert str(caught.value).endswith("is the wait for a server lost during a read; train --connect-timeout)")
