"""How many threads numpy's BLAS (OpenBLAS, MKL) runs while a model trains: chosen, not left to chance.

The built-in models are small numpy networks: a minibatch's matrix products
take well under a millisecond, and BLAS threads cost more to wake than they
save. With the library's default (a thread per core), ``cli.py train --reader
mnist`` took 16 to 29 s on a loaded 2-core machine and 8.5 s steadily with one
thread (issue 27). So ``train()``'s default, ``blas_threads="auto"``, runs one
thread for these built-in models (``SoftmaxRegression``, ``MLP``,
``NextTokenMLP`` and subclasses of them) and leaves the library's setting
alone for any other model: a model of your own, numpy with wide layers or
torch, keeps the threads it would have had without readerkit.

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
from typing import Any

from readers.errors import BadValue
from train.models.classifiers import MLP, SoftmaxRegression
from train.models.language import NextTokenMLP

__all__ = ["AUTO", "DEFAULT_BLAS_THREADS", "check_threads", "limit_blas", "threads_for"]

#: BLAS threads for the built-in models: one is the fastest and the steadiest (see the module's docstring).
DEFAULT_BLAS_THREADS = 1
#: ``blas_threads="auto"``: ``DEFAULT_BLAS_THREADS`` for a built-in model, the library's setting for any other.
AUTO = "auto"
_BUILT_IN = (SoftmaxRegression, MLP, NextTokenMLP)
_ENVIRONMENT = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_warned: list[bool] = []


def check_threads(count: int | str | None, who: str = "limit_blas", auto: bool = True) -> None:
    """Refuse a thread count that is not None, a whole number from 1 or (where ``auto``) ``"auto"``.

    >>> check_threads("auto", "train")
    >>> check_threads(0, "train")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: train: blas_threads=0: give a number of threads from 1, "auto" (one for readerkit's built-in models, the library's own setting for others) or None to keep the BLAS library's own setting
    """
    if auto and isinstance(count, str) and count == AUTO:
        return
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        choices = ('"auto" (one for readerkit\'s built-in models, the library\'s own setting for others) or '
                   if auto else "or ")
        raise BadValue(f"{who}: blas_threads={count!r}: give a number of threads from 1, {choices}None to keep the "
                       "BLAS library's own setting")


def threads_for(count: int | str | None, model: Any) -> int | None:
    """The BLAS threads a run of ``model`` gets for ``blas_threads=count``: ``"auto"`` gives one for readerkit's
    built-in numpy models (their subclasses too) and None, the library's own setting, for any other model.

    >>> from train.models.classifiers import MLP
    >>> threads_for("auto", MLP(4, 2)), threads_for("auto", object()), threads_for(3, object())
    (1, None, 3)

    See Also: train.train and train.train_steps (their ``blas_threads``).
    """
    if isinstance(count, str) and count == AUTO:
        return DEFAULT_BLAS_THREADS if isinstance(model, _BUILT_IN) else None
    return count


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
    check_threads(count, auto=False)
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
