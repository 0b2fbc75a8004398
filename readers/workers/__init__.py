"""Work in other threads and processes: prefetch and Paddle's xmap_readers and multiprocess_reader.

``prefetch`` (prefetch, buffered) and ``paddle`` (xmap_readers,
multiprocess_reader) are the decorators; the worker pool behind them is the
``consumer`` side, the ``worker`` side, the ``channels`` between them (threads,
or processes whose body is ``process``), ``shared_memory`` rings for arrays,
``forwarding`` of exceptions raised in a worker, and ``persistent`` workers
kept between passes. ``bench`` measures a pipeline's prefetch stages.
"""
