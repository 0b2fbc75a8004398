"""Writing a stage: a guide to readerkit's stage protocol, with two worked decorators.

Every example below runs (CI runs this module's doctests), and uses only what a
user outside the package imports.

First, the smallest thing that works
------------------------------------

When entry i of your decorator is made from entry i of its reader alone, you
need no class: ``map_readers`` already keeps indexing, global shuffles, shards,
prefetch workers and resume. A function that returns one is a decorator:

>>> import itertools, collections
>>> import numpy as np
>>> import readers
>>> def scaled(reader, factor):
...     return readers.map_readers(lambda x: x * factor, reader)
>>> list(scaled(readers.from_sequence([1, 2, 3]), 10)())
[10, 20, 30]

Write a stage when entries are chosen, reordered, grouped or remembered
across a pass. A stage subclasses ``readers.Stage`` and defines a few hooks
(the full list, one line each, is ``readers.stage``'s module docstring):

- ``name`` and ``_options()``: how it shows in a pipeline's repr.
- ``access``: how its passes run. ``"stream"``: ``_stream(pass_id)`` gives
  the entries (and ``_seek(pass_id, cursor)`` may jump to a position;
  by default it reads past). ``"index"``: it has random access, ``__len__``
  and ``_get(i)`` (plus ``gather`` for many at once), and passes are made of
  indices, which ``shuffle`` permutes and ``shard`` splits by arithmetic.
  ``"plan"``: ``_plan`` rewrites its parent's index plan (``readers.plans``).
- ``positions``: how a cursor counts its passes. None (the default): its own
  entries; 1: its entries are its parent's, one for one, so its cursor is
  the parent's; k: each entry stands for k of the parent's (a batch). A
  stage that declares positions defines ``_seek``: its cursor is in its
  parent's units, so it starts the parent there (reading past its own
  entries would resume in the wrong place, and the default refuses to).
- ``seed``: a stage with randomness declares its seed and draws pass k's
  order from ``(seed, k)`` only; the seed then goes into every state.

Two rules hold for all of them: nothing is read when the stage is built
(work starts in a pass), and every pass is independent (``pass_id`` says
which; the same pass gives the same entries). Build stages from module-level
functions and they pickle into spawned worker processes.

An index-keeping decorator: every
---------------------------------

``every(reader, step)`` keeps samples 0, step, 2 * step, ... Over an indexed
reader it is indexed too: its sample i is the parent's sample ``i * step``,
so a global shuffle, a shard and a batch all work on it by index arithmetic,
reading only the samples they need. Over a stream it keeps every step-th entry.

>>> from readers.parents import access_of, as_indexed, iterate
>>> from readers.stage import Stage
>>> class Every(Stage):
...     name = "every"
...
...     def __init__(self, reader, step):
...         super().__init__(reader)
...         self.step = step
...
...     @property
...     def access(self):  # indexed over an indexed reader, else a stream
...         return "index" if access_of(self.parents[0]) == "index" else "stream"
...
...     def __len__(self):
...         return -(-len(self.parents[0]) // self.step)
...
...     def _get(self, i):
...         return self.parents[0].at(i * self.step)  # at(i): the parent's entry i, unchecked
...
...     def gather(self, indices):  # many samples at once: one gather of the parent's
...         return self.parents[0].gather(indices * self.step)
...
...     def gather_columns(self, indices):  # collated batches: one vectorised take per column
...         return self.parents[0].gather_columns(indices * self.step)
...
...     def sample_ids(self, indices):  # so with_index names the source's samples
...         return self.parents[0].sample_ids(indices * self.step)
...
...     def _stream(self, pass_id):
...         return itertools.islice(iterate(self.parents[0], pass_id), 0, None, self.step)
...
...     def _options(self):
...         return f"step={self.step}"

The decorator checks its reader and options when it is called, adapts a
user's own ``len``/``[i]`` object, and is curried like readerkit's own, so
options may come first in ``toolz.pipe``:

>>> from readers.checks import check_reader
>>> def every(reader, step):
...     '''Samples 0, step, 2 * step, ... of each pass.'''
...     check_reader(reader)
...     if isinstance(step, bool) or not isinstance(step, int) or step < 1:
...         raise ValueError(f"every: step must be an int >= 1, got {step!r}")
...     return Every(as_indexed(reader) or reader, step)
>>> every = readers.Curried(every)

>>> r = every(readers.from_sequence(range(10)), 3)
>>> len(r), r[2], list(r())
(4, 6, [0, 3, 6, 9])
>>> r
every(step=3)
└─ from_sequence(range of 10)
>>> import toolz
>>> shuffled = toolz.pipe(readers.from_sequence(range(10)), every(step=3), readers.shuffle(seed=0))
>>> halves = [list(readers.shard(shuffled, i, 2)()) for i in range(2)]  # each reads only its own samples
>>> sorted(halves[0] + halves[1])
[0, 3, 6, 9]
>>> def numbers():
...     yield from range(10)
>>> list(every(numbers, 4)())
[0, 4, 8]
>>> every(numbers, 0)
Traceback (most recent call last):
...
ValueError: every: step must be an int >= 1, got 0

``readers.testing.assert_resumes_at_every_step`` takes a factory of fresh
readers, saves the state at every step of a pass, restores it into a fresh
reader and checks that the rest of the pass, and the next pass, come out
exactly as without the interruption. Run it on your stage alone and in the
pipelines you mean to use it in:

>>> from readers.testing import assert_resumes_at_every_step
>>> _ = assert_resumes_at_every_step(lambda: every(readers.from_sequence(range(10)), 3))
>>> _ = assert_resumes_at_every_step(lambda: readers.shuffle(every(readers.from_sequence(range(20)), 3), seed=1))
>>> _ = assert_resumes_at_every_step(lambda: readers.shard(readers.shuffle(every(readers.from_sequence(range(20)),
...                                                                                3), seed=1), 1, 3))
>>> _ = assert_resumes_at_every_step(lambda: every(numbers, 4))

A stream-only decorator: sliding windows
----------------------------------------

``sliding(reader, size)`` gives every run of ``size`` consecutive entries,
as tuples. Each entry depends on the ones before it, so it is a stream. Its
cursor counts its own entries (``positions`` stays None), and resuming at
cursor c could read past c windows; but window c starts at the parent's
entry c, so ``_seek`` jumps there instead. (Where the parent's cursor counts
other things, a batch's or a shard's, readerkit reads past for it: ``_seek``
only meets a nonzero cursor when every parent can start there.)

>>> class Sliding(Stage):
...     name = "sliding"
...
...     def __init__(self, reader, size):
...         super().__init__(reader)
...         self.size = size
...
...     def _stream(self, pass_id):
...         return self._windows(iterate(self.parents[0], pass_id))
...
...     def _seek(self, pass_id, cursor):  # window ``cursor`` starts at the parent's entry ``cursor``
...         return self._windows(iterate(self.parents[0], pass_id, cursor))
...
...     def _windows(self, entries):
...         window = collections.deque(itertools.islice(entries, self.size - 1), maxlen=self.size)
...         for entry in entries:
...             window.append(entry)
...             yield tuple(window)
...
...     def _options(self):
...         return f"size={self.size}"
>>> def sliding(reader, size):
...     '''Every run of ``size`` consecutive entries, as a tuple.'''
...     check_reader(reader)
...     if isinstance(size, bool) or not isinstance(size, int) or size < 1:
...         raise ValueError(f"sliding: size must be an int >= 1, got {size!r}")
...     return Sliding(reader, size)
>>> sliding = readers.Curried(sliding)

>>> list(sliding(numbers, 3)())[:3]
[(0, 1, 2), (1, 2, 3), (2, 3, 4)]
>>> len(list(sliding(readers.shuffle(readers.from_sequence(range(10)), seed=0), 4)()))
7
>>> _ = assert_resumes_at_every_step(lambda: sliding(numbers, 3))
>>> _ = assert_resumes_at_every_step(lambda: sliding(readers.shuffle(readers.from_sequence(range(12)), seed=2), 3))
>>> _ = assert_resumes_at_every_step(lambda: readers.shuffle(sliding(every(numbers, 2), 2), 3, seed=0))

Helpers for writing stages
--------------------------

``readers.parents``: ``iterate(reader, pass_id, cursor)`` starts a parent's pass
(any reader, a plain function too); a parent's ``at(i)`` is its entry i
without the checks of ``[i]``; ``access_of(reader)`` and
``as_indexed(reader)`` tell what a parent offers; ``open_plan(reader, pass_id,
cursor)`` gives a planned parent's ``Plan`` (``readers.plans``: its source and
chunks of indices, with ``slice_chunks`` and ``rechunk`` to rewrite them, as
``firstn`` and the buffer ``shuffle`` do). ``readers.position.is_native(reader)``
tells whether a parent's cursor counts its own entries. ``readers.checks``:
``check_reader`` and ``whole`` for eager argument checks.

Stages that shard or run workers
--------------------------------

Three more declarations serve stages like ``shard`` and ``prefetch``, and
rarely a user's: ``share()`` (the share of its input's pass a stage keeps),
``per_entry`` (whether a shard above may split the pass below it instead)
and ``unresumable`` (why no position of its passes can be saved). Their
contracts are in ``readers.graph``.
"""
