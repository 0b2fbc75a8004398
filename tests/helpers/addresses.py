"""An address that no network interface of this machine has, whatever the machine's settings."""
import errno
import os
import socket

#: TEST-NET-1 (RFC 5737): documentation only, no one's. A machine with net.ipv4.ip_nonlocal_bind=1 binds it all the
#: same, so the tests that need a failed bind make it fail (``not_this_machines``), not the machine.
ELSEWHERE = "192.0.2.1"


def not_this_machines(monkeypatch, host: str = ELSEWHERE) -> None:
    """Make binding ``host`` fail as it does where no interface has it (EADDRNOTAVAIL); other hosts bind as ever."""
    create_server = socket.create_server

    def refusing(address, *args, **kwargs):
        if address[0] == host:
            raise OSError(errno.EADDRNOTAVAIL, os.strerror(errno.EADDRNOTAVAIL))
        return create_server(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_server", refusing)
