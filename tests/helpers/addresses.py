"""An address that no network interface of this machine has, whatever the machine's settings."""
import errno
import os
import socket

#: TEST-NET-1 (RFC 5737): documentation only, no one's. A machine with net.ipv4.ip_nonlocal_bind=1 binds it all the
#: same, so the tests that need a failed bind make it fail (``not_this_machines``), not the machine.
ELSEWHERE = "192.0.2.1"


def not_this_machines(monkeypatch, host: str = ELSEWHERE) -> None:
    """Make binding ``host`` fail as it does where no interface has it (EADDRNOTAVAIL); other hosts bind as ever."""
    bind_fails(monkeypatch, OSError(errno.EADDRNOTAVAIL, os.strerror(errno.EADDRNOTAVAIL)), host=host)


def bind_fails(monkeypatch, error: OSError, *, host: str | None = None, port: int | None = None) -> None:
    """Make ``socket.create_server`` raise ``error`` for ``host`` (any, if None) and ``port`` (any, if None), as the
    system would: a host name that does not resolve (``socket.gaierror``, with no resolver asked), a port below
    1024 for a process without the right (EACCES, which root would bind). Other addresses bind as ever."""
    create_server = socket.create_server

    def refusing(address, *args, **kwargs):
        if host in (None, address[0]) and port in (None, address[1]):
            raise error
        return create_server(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_server", refusing)
