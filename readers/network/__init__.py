"""The data-provider server and its client: indexed readers served by sample index over TCP.

``wire`` is the protocol (frames, messages, columns, auth). The client:
``client`` (readers.remote) with its ``connection`` to each server and the
requests ``in_flight``. The server: ``server`` (Server: the accept loop and
the byte budget, and how a server is run: readers.serve in threads, the
CLI's serve until a signal, TLS), one ``session`` per connection, and the
``served_reader`` (what a request asks of the reader: checked, split into
parts, gathered). Beside them, ``file_server``: a plain HTTP file server over a
folder (byte ranges, ETags), to try readers over ``http://`` URLs on one machine.
"""
