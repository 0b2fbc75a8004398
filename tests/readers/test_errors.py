"""readers.errors: one base for expected failures, each also the built-in that such code raised before."""
import pickle

import pytest

import readers
import train
from readers.plugins.registry import (
    PluginError,
    PluginLoadError,
    PluginNotFound,
    PluginTypeError,
)
from readers.sources.datafiles import MissingDataError
from readers.sources.idx import IdxError
from readers.sources.text import TextDecodeError
from readers.tokenized.windows import TokenFileError
from readers.workers.forwarding import pack_error, unpack_error
from train.checkpoints.folders import FolderInUse
from train.models.classifiers import LabelRangeError

BUILTIN_OF = [(readers.BadValue, ValueError), (readers.BadType, TypeError), (readers.NotFound, LookupError),
              (readers.FileError, OSError), (readers.MissingFile, FileNotFoundError), (readers.TimedOut, TimeoutError)]


@pytest.mark.parametrize("cls, builtin", BUILTIN_OF, ids=lambda c: c.__name__)
def test_each_error_is_expected_and_caught_as_its_builtin(cls, builtin):
    with pytest.raises(builtin, match="^bad 'x'; give 'y'$") as caught:
        raise cls("bad 'x'; give 'y'")
    assert isinstance(caught.value, readers.ReaderkitError) and str(caught.value) == "bad 'x'; give 'y'"


@pytest.mark.parametrize("cls", [c for c, _ in BUILTIN_OF], ids=lambda c: c.__name__)
def test_each_error_crosses_from_a_worker_as_itself(cls):
    rebuilt = unpack_error(pack_error(cls("shard 3 of 2")), "worker 0")
    assert type(rebuilt) is cls and str(rebuilt) == "shard 3 of 2"
    assert type(pickle.loads(pickle.dumps(cls("m")))) is cls


def test_a_users_own_error_forwarded_from_a_worker_stays_unexpected():
    rebuilt = unpack_error(pack_error(TypeError("unsupported operand")), "worker 0")
    assert type(rebuilt) is TypeError and not isinstance(rebuilt, readers.ReaderkitError)


@pytest.mark.parametrize("cls, builtin", [
    (train.CheckpointError, ValueError), (FolderInUse, ValueError), (train.ResumeRefused, ValueError),
    (readers.RunFileError, ValueError), (readers.WorkerDiedError, RuntimeError), (MissingDataError, FileNotFoundError),
    (IdxError, ValueError), (TextDecodeError, UnicodeDecodeError), (PluginError, Exception),
    (PluginNotFound, LookupError), (PluginLoadError, ImportError), (PluginTypeError, TypeError),
    (train.PipelineConfigError, ValueError), (train.PipelineReplayError, ValueError), (LabelRangeError, ValueError),
    (train.TokenRangeError, ValueError), (TokenFileError, ValueError),
], ids=lambda c: getattr(c, "__name__", ""))
def test_readerkits_error_classes_are_expected_failures_and_keep_their_builtin(cls, builtin):
    assert issubclass(cls, readers.ReaderkitError) and issubclass(cls, builtin)


def test_a_text_decode_error_is_expected_and_still_a_unicode_error():
    exc = TextDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte", "rows.txt, line 1: not UTF-8")
    assert isinstance(exc, readers.ReaderkitError) and isinstance(exc, ValueError) and str(exc) == "rows.txt, line 1: not UTF-8"


@pytest.mark.parametrize("error", [readers.errors.BadValue, readers.errors.MissingFile, readers.errors.FileError])
def test_a_url_password_never_reaches_an_error_message(error):
    """Issue 29: a message made with an unredacted URL (a format reader's) showed its user:password@."""
    exc = error("parquet: http://user:secret@127.0.0.1:8000/t.parquet and s3://key:secret@b/k: bad")
    assert str(exc) == "parquet: http://127.0.0.1:8000/t.parquet and s3://b/k: bad"
    assert "secret" not in repr(pickle.loads(pickle.dumps(exc)))
