"""How many threads numpy's BLAS (OpenBLAS, MKL) runs while a model trains: chosen, not left to chance.

The built-in models are small numpy networks: a minibatch's matrix products
take well under a millisecond, and BLAS threads cost more to wake than they
save. With the library's default (a thread per core), ``cli.py train --reader
mnist`` took 16 to 29 s on a loaded 2-core machine and 8.5 s steadily with one
thread (issue 27), so ``train()`` runs one thread unless told otherwise.

The count is set with ``threadpoolctl`` (a runtime dependency), for the run
only: the process's setting is put back after. Where it is missing (installed
with ``--no-deps``) the library's default stays, with one warning naming the
install, unless the environment already says that count
(``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` set
before numpy was imported).
"""
from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator

from readers.errors import BadValue

__all__ = ["DEFAULT_BLAS_THREADS", "check_threads", "limit_blas"]

#: BLAS threads for the built-in models: one is the fastest and the steadiest (see the module's docstring).
DEFAULT_BLAS_THREADS = 1
_ENVIRONMENT = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_warned: list[bool] = []


def check_threads(count: int | None, who: str = "limit_blas") -> None:
    """Refuse a thread count that is not None or a whole number from 1.

    >>> check_threads(0, "train")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: train: blas_threads=0: give a number of threads from 1, or None to keep the BLAS library's own setting
    """
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise BadValue(f"{who}: blas_threads={count!r}: give a number of threads from 1, or None to keep the BLAS "
                       "library's own setting")


@contextlib.contextmanager
def limit_blas(count: int | None) -> Iterator[None]:
    """Run the block with ``count`` BLAS threads (``None``: the library's setting, untouched), then put back
    the process's setting.

    >>> import numpy as np
    >>> with limit_blas(1):
    ...     float((np.ones((64, 64)) @ np.ones(64))[0])
    64.0

    See Also: train.train (its ``blas_threads``), ``cli.py train --blas-threads``.
    """
    check_threads(count)
    if count is None:
        yield
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        if not any(os.environ.get(name) == str(count) for name in _ENVIRONMENT) and not _warned:
            _warned.append(True)
            warnings.warn(f"BLAS threads left at the library's default, not {count}: pip install threadpoolctl "
                          f"(or set OPENBLAS_NUM_THREADS={count} before starting) for steady training times",
                          RuntimeWarning, stacklevel=3)
        yield
        return
    with threadpool_limits(limits=count, user_api="blas"):
        yield
