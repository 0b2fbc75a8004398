"""readers.errors: one base for expected failures, each also the built-in that such code raised before."""
import pickle

import pytest

from readers.errors import (
    BadType,
    BadValue,
    FileError,
    MissingFile,
    NotFound,
    ReaderkitError,
    TimedOut,
)
from readers.workers.forwarding import pack_error, unpack_error

BUILTIN_OF = [(BadValue, ValueError), (BadType, TypeError), (NotFound, LookupError), (FileError, OSError),
              (MissingFile, FileNotFoundError), (TimedOut, TimeoutError)]


@pytest.mark.parametrize("cls, builtin", BUILTIN_OF, ids=lambda c: c.__name__)
def test_each_error_is_expected_and_caught_as_its_builtin(cls, builtin):
    with pytest.raises(builtin, match="^bad 'x'; give 'y'$") as caught:
        raise cls("bad 'x'; give 'y'")
    assert isinstance(caught.value, ReaderkitError) and str(caught.value) == "bad 'x'; give 'y'"


@pytest.mark.parametrize("cls", [c for c, _ in BUILTIN_OF], ids=lambda c: c.__name__)
def test_each_error_crosses_from_a_worker_as_itself(cls):
    rebuilt = unpack_error(pack_error(cls("shard 3 of 2")), "worker 0")
    assert type(rebuilt) is cls and str(rebuilt) == "shard 3 of 2"
    assert type(pickle.loads(pickle.dumps(cls("m")))) is cls


def test_a_users_own_error_forwarded_from_a_worker_stays_unexpected():
    rebuilt = unpack_error(pack_error(TypeError("unsupported operand")), "worker 0")
    assert type(rebuilt) is TypeError and not isinstance(rebuilt, ReaderkitError)
