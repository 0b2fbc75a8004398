"""Continual-learning pipelines (Modyn's training supervisor): triggers, strategies, the supervisor.

``triggers`` cut a timestamped stream into trainings (``trigger_specs``:
how one is written), ``strategies`` choose each trigger's training set,
``supervisor`` (run_pipeline) trains on each set, ``config`` checks a whole
configuration before it starts, ``stream_columns`` reads the stream.
"""
