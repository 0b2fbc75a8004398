"""The command line's adapters: what each ``cli.py`` command does once click has parsed it.

``training`` (train), ``token_training`` (train --config state.toml),
``cache_folders`` (cache info|clear), ``continual`` with ``continual_run``
and ``continual_table`` (pipeline run|status), ``console`` (what a run
prints and logs, and how errors are shown), and ``options`` (the options
commands share, and the settings objects of train and pipeline run).
"""
