"""A run's checkpoints: the model and the data position saved together, and resuming them.

``files`` (a checkpoint written atomically, and read back), ``folders``
(where each process saves, and the lock that keeps runs apart) and
``resume`` (start, resume or refuse a run in a folder).
"""
