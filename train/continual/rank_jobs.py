"""The supervisor's side of ``run_pipeline(..., nproc=N)``: each trigger's training as a torchrun job of N ranks.

For a training the supervisor writes a JSON spec (``spec.json``: the store,
the ids, the model's class and settings, how a rank builds the source, the
batch size and passes) into a folder of its own, launches
``python -m train.continual.ranks spec.json`` under torchrun on this host
(``train.continual.torchrun``: every socket on 127.0.0.1), waits (the
pipeline's lease is kept by ``run_pipeline``'s heartbeat thread meanwhile),
and reads back what rank 0 leaves: the
final model state (``state.npz``, numpy's own format) and the pass history
(``history.json``). Nothing is pickled. A failed job is launched again up
to ``max_restarts`` times; the ranks resume from their checkpoints (a
``checkpoints`` folder per training). A job that fails past its restarts
raises ``RankJobFailed`` with the ranks' own error, and the supervisor marks
the training failed.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from readers.errors import BadValue
from train.continual.torchrun import loopback_env, torchrun_command

__all__ = ["RankJobFailed", "RankJobs", "check_launcher", "check_ranks", "launcher_command", "source_spec",
           "why_failed", "without_password"]

#: The package root, first on the ranks' PYTHONPATH: they run the supervisor's own readerkit.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class RankJobFailed(BadValue):
    """A training's torchrun job failed, after its restarts: the message says how, and how to resume."""


def source_spec(value: Any) -> dict[str, Any]:
    """How a rank builds the source the keys index: ``"module:function"`` (called with no arguments) or
    ``{"call": "module:function", "kwargs": {...}}`` (JSON kwargs), as ``{"call", "kwargs"}``.

    >>> source_spec("mydata:source")
    {'call': 'mydata:source', 'kwargs': {}}
    >>> source_spec(None)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: rank_source must be 'module:function' (or {'call': 'module:function', 'kwargs': {...}}), which each rank calls to build the source the keys index, got None
    """
    if isinstance(value, str):
        value = {"call": value}
    call = value.get("call") if isinstance(value, Mapping) else None
    if not isinstance(call, str) or ":" not in call or not isinstance(value.get("kwargs", {}), Mapping):
        raise BadValue("rank_source must be 'module:function' (or {'call': 'module:function', 'kwargs': {...}}), "
                       f"which each rank calls to build the source the keys index, got {value!r:.80}")
    return {"call": call, "kwargs": dict(value.get("kwargs", {}))}


def check_ranks(nproc: Any, max_restarts: Any, batch_size: Any, model: Callable[[int], Any], seed: int,
                rank_source: Any, launcher: Any = None) -> list[str]:
    """What is wrong with ``run_pipeline``'s ``nproc``, ``max_restarts``, ``rank_source`` and ``launcher``
    (a line each).

    >>> from train.models.classifiers import MLP
    >>> for line in check_ranks(2, 1, 33, lambda seed: MLP(4, (8,), 2), 0, "mydata:source"):
    ...     print(line)
    nproc=2 splits each global batch over the ranks: batch_size must be a multiple of 2, got 33
    nproc=2 trains under torchrun with DistributedDataParallel, which needs a torch model (--model torch-mlp or torch-cnn, train.models.torch_classifiers.TorchMLP from Python); model(seed) gave MLP, a numpy model, which trains in one process (nproc=1)
    """
    from train.models.torch_classifiers import is_torch_model

    problems = []
    for name, value, low in (("nproc", nproc, 1), ("max_restarts", max_restarts, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            problems.append(f"{name} must be an int >= {low}, got {value!r}")
    if problems or nproc == 1:
        return problems
    if isinstance(batch_size, int) and batch_size % nproc:
        problems.append(f"nproc={nproc} splits each global batch over the ranks: batch_size must be a multiple of "
                        f"{nproc}, got {batch_size}")
    try:
        built = model(seed)
    except Exception:  # check_pipeline reports it
        return problems
    if not is_torch_model(built):
        problems.append(f"nproc={nproc} trains under torchrun with DistributedDataParallel, which needs a torch model "
                        "(--model torch-mlp or torch-cnn, train.models.torch_classifiers.TorchMLP from Python); "
                        f"model(seed) gave {type(built).__name__}, a numpy model, which trains in one process (nproc=1)")
    for check, value in ((source_spec, rank_source), (check_launcher, launcher)):
        try:
            if value is not None or check is source_spec:
                check(value)
        except BadValue as exc:
            problems.append(f"nproc={nproc}: {exc}")
    return problems


_FIELDS = ("spec", "nproc", "training_id")


def launcher_command(template: str, **fields: Any) -> list[str]:
    """A launcher template's command for one training: split like a shell line (no shell runs it), then
    ``{spec}``, ``{nproc}`` and ``{training_id}`` filled in each word.

    >>> launcher_command("srun -N2 torchrun --nproc-per-node {nproc} --rdzv-id t{training_id} -m train.continual.ranks "
    ...                  "{spec}", spec="/shared/training-7/spec.json", nproc=2, training_id=7)[-5:]
    ['--rdzv-id', 't7', '-m', 'train.continual.ranks', '/shared/training-7/spec.json']
    """
    return [word.format(**fields) for word in shlex.split(template)]


def check_launcher(template: Any) -> str:
    """``template`` when it is a command with ``{spec}`` and no other fields than the known ones, else a BadValue.

    >>> check_launcher("torchrun -m train.continual.ranks spec.json")
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: launcher 'torchrun -m train.continual.ranks spec.json' has no {spec}: the ranks' command must end in -m train.continual.ranks {spec}
    """
    if not isinstance(template, str) or "{spec}" not in template:
        raise BadValue(f"launcher {template!r} has no {{spec}}: the ranks' command must end in "
                       "-m train.continual.ranks {spec}")
    try:
        launcher_command(template, **dict.fromkeys(_FIELDS, 0))
    except (KeyError, IndexError, ValueError) as exc:
        raise BadValue(f"launcher {template!r}: {type(exc).__name__} {exc}; it may use only "
                       f"{', '.join('{' + f + '}' for f in _FIELDS)} (double other braces)") from None
    return template


def without_password(address: str) -> tuple[str, str | None]:
    """A store's address without the password a ``postgresql://`` URL holds, and that password (or None): the
    ranks' spec file never holds it, they get it as ``PGPASSWORD`` in their environment.

    >>> without_password("postgresql://me:s3cret@db:5432/runs?sslmode=require")
    ('postgresql://me@db:5432/runs?sslmode=require', 's3cret')
    >>> without_password("postgresql://me@db/runs?password=x&sslmode=require"), without_password("runs.db")
    (('postgresql://me@db/runs?sslmode=require', 'x'), ('runs.db', None))
    """
    if not address.lower().startswith(("postgresql://", "postgres://")):
        return address, None
    parts = urllib.parse.urlsplit(address)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    password = parts.password if parts.password is not None else next(
        (value for key, value in query if key == "password"), None)
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}@{host}"
    kept = urllib.parse.urlencode([(key, value) for key, value in query if key != "password"])
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, kept, parts.fragment)), (
        None if password is None else urllib.parse.unquote(password))


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [line.strip() for line in f.read().splitlines() if line.strip()]
    except OSError:
        return []


def why_failed(log: str, errors: str) -> str:
    r"""Why a torchrun job failed: the rank torchrun's log names as the root cause, how it ended, and that
    rank's own error line (from ``errors``, the ranks' ``rank R: Type: message`` lines), else the last one.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> log = f"{folder.name}/torchrun.log"
    >>> with open(log, "w") as f:
    ...     _ = f.write("Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n"
    ...                 "  exitcode  : -9 (pid: 10465)  (SIGKILL)\n")
    >>> why_failed(log, f"{folder.name}/none.txt")
    'rank 1 ended with exit code -9 (SIGKILL)'
    """
    lines, cause, heading = _lines(log), "", "Root Cause (first observed failure):"
    if heading in lines:
        last = len(lines) - 1 - lines[::-1].index(heading)  # the last launch's
        found = dict(line.split(":", 1) for line in lines[last:last + 8]
                     if line.split(":", 1)[0].strip() in ("rank", "exitcode") and ":" in line)
        found = {k.strip(): v.strip() for k, v in found.items()}
        rank = found.get("rank", "?").split(" ")[0]
        code = found.get("exitcode", "?")
        signal_name = code.rsplit("(", 1)[-1].rstrip(")") if code.endswith(")") and "SIG" in code else ""
        cause = f"rank {rank} ended with exit code {code.split(' ')[0]}" + (f" ({signal_name})" if signal_name else "")
        mine = [line for line in _lines(errors) if line.startswith(f"rank {rank}:")]
        return f"{cause}: {mine[-1]}" if mine else cause
    own = _lines(errors)
    return own[-1] if own else " | ".join(lines[-5:])


class RankJobs:
    """A pipeline's torchrun trainings: ``nproc`` ranks each, their folders under ``work_dir``."""

    def __init__(self, *, nproc: int, max_restarts: int, db: str, rank_source: Any, work_dir: str,
                 checkpoint_every: int | None, keep_logs: bool = False, launcher: str | None = None):
        self.db, self._password = without_password(db)
        self.nproc, self.max_restarts, self.source = nproc, max_restarts, source_spec(rank_source)
        self.work_dir, self.every = work_dir, checkpoint_every
        self.keep_logs = keep_logs
        self.launcher = None if launcher is None else check_launcher(launcher)

    def train(self, model: Any, *, pipeline_id: int, trigger_id: int, training_id: int, seed: int, batch_size: int,
              passes: int, steps: int, mapping: dict[str, Any], weight_column: int | None,
              start_from: int | None) -> list[dict]:
        """Train ``model`` (built here with the trigger's seed: its class and settings tell the ranks theirs) on
        the trigger's set as a torchrun job; load the job's final state into it and return its pass history."""
        folder = os.path.join(self.work_dir, f"training-{training_id}")
        os.makedirs(folder, exist_ok=True)
        cls = type(model)
        spec = {"db": self.db, "pipeline_id": pipeline_id, "trigger_id": trigger_id, "training_id": training_id,
                "model": {"class": f"{cls.__module__}:{cls.__qualname__}", "settings": model.settings()},
                "source": self.source, "seed": seed, "batch_size": batch_size, "passes": passes, "steps": steps,
                "mapping": mapping, "weight_column": weight_column, "start_from": start_from,
                "checkpoints": os.path.join(folder, "checkpoints"), "every": self.every,
                "out": os.path.join(folder, "state.npz"), "history": os.path.join(folder, "history.json"),
                "error": os.path.join(folder, "error.txt")}
        path = os.path.join(folder, "spec.json")
        for attempt in range(self.max_restarts + 1):
            with open(path, "w", encoding="utf-8") as f:
                json.dump({**spec, "attempt": attempt}, f, indent=1)
            code = self._run(path, folder, training_id)
            if code == 0:
                break
        else:
            log = os.path.join(folder, "torchrun.log")
            why = why_failed(log, os.path.join(folder, "error.txt")) or "no error recorded"
            where = f"; its log is {log}" if self.keep_logs else ""
            raise RankJobFailed(f"training {training_id}: its torchrun job of {self.nproc} processes failed after "
                                f"{self.max_restarts} restart(s): {why}{where}. Resume the pipeline (pipeline run "
                                f"--resume {pipeline_id}, or run_pipeline(..., resume={pipeline_id})), with more "
                                "--max-restarts if a rank was killed")
        with np.load(spec["out"]) as saved:
            state = {k: v.item() if v.ndim == 0 else v for k, v in saved.items()}
        model.load_state_dict(state)
        with open(spec["history"], encoding="utf-8") as f:
            history = json.load(f)
        shutil.rmtree(folder, ignore_errors=True)  # a finished training's checkpoints are of no more use
        return history

    def _run(self, spec: str, folder: str, training_id: int) -> int:
        """Launch the job once and wait for it; its exit code. (torchrun restarts nothing itself: its restart
        of a static rendezvous hung now and then in gloo's connect, so each restart is a new launch.)"""
        log = os.path.join(folder, "torchrun.log")
        env = loopback_env() if self.launcher is None else dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_ROOT, env.get("PYTHONPATH")]))
        if self._password is not None:
            env["PGPASSWORD"] = self._password  # libpq's own variable: the URL's password, never in a file
        if self.launcher is None:
            command = torchrun_command(["-m", "train.continual.ranks", spec], nproc=self.nproc, max_restarts=0,
                                       log_dir=os.path.join(folder, "logs"))
        else:
            command = launcher_command(self.launcher, spec=spec, nproc=self.nproc, training_id=training_id)
        with open(log, "ab") as out:  # every launch's lines, in order
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            try:
                code = proc.wait()
            except BaseException:
                _stop(proc)
                raise
        return code


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to torchrun (its agent stops the ranks), then SIGKILL to its whole session if it lingers."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

