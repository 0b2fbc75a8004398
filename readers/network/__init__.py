"""The data-provider server and its client: indexed readers served by sample index over TCP.

``wire`` is the protocol (frames, messages, columns, auth); ``client``
(readers.remote) with its ``connection`` and the requests ``in_flight``;
``server`` with one ``session`` per connection, ``serving`` (what a request
asks of the reader) and ``hosting`` (readers.serve, and the CLI's serve).
"""
