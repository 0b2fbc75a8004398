"""Writing a stage: a guide to readerkit's stage protocol, with three worked decorators.

Every example below runs (CI runs this module's doctests), and uses only what a
user outside the package imports.

First, the smallest thing that works
------------------------------------

When entry i of your decorator is made from entry i of its reader alone, you
need no class: ``map_readers`` already keeps indexing, global shuffles, shards,
prefetch workers and resume. A function that returns one is a decorator:

>>> import itertools
>>> import numpy as np
>>> import readers
>>> def scaled(reader, factor):
...     return readers.map_readers(lambda x: x * factor, reader)
>>> list(scaled(readers.from_sequence([1, 2, 3]), 10)())
[10, 20, 30]

When it is random (an augmentation), ``random_map`` is the same with a
generator per sample and pass (the second example below).

Write a stage when entries are chosen, reordered, grouped or remembered
across a pass. A stage subclasses ``readers.Stage`` and defines a few hooks
(every hook, one line each, is in ``readers.stage``'s module docstring):

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
- ``seed``: a stage with randomness declares its seed and draws pass k
  from ``(seed, k)`` only; the seed then goes into every state.

Two rules hold for all of them: nothing is read when the stage is built
(work starts in a pass), and every pass is independent (``pass_id`` says
which; the same pass gives the same entries). Build stages from module-level
functions and they pickle into spawned worker processes.

1. An index remap that stays planned: every
-------------------------------------------

``every(reader, step)`` keeps samples 0, step, 2 * step, ... of each pass.
Over an indexed reader it is indexed too: its sample i is the parent's
sample ``i * step``, so a global shuffle, a shard and a batch all work on it
by index arithmetic, reading only the samples they need. Over a planned
parent (a shuffle, a shard) it stays planned: it keeps every step-th index
of the parent's plan, so a batch above still gathers with vectorised takes
and no entry is read to be thrown away. Over a stream it keeps every
step-th entry.

>>> from readers.parents import access_of, as_indexed, iterate, open_plan
>>> from readers.plans import Plan, slice_chunks
>>> from readers.stage import Stage
>>> def stepped(chunks, step):
...     '''The indices at positions 0, step, 2 * step, ... of a plan's chunks.'''
...     seen = 0
...     for chunk in chunks:
...         yield chunk[-seen % step::step]
...         seen += len(chunk)
>>> class Every(Stage):
...     name = "every"
...
...     def __init__(self, reader, step):
...         super().__init__(reader)
...         self.step = step
...
...     @property
...     def access(self):  # as its parent: indexed, planned or a stream
...         return access_of(self.parents[0])
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
...     def _plan(self, pass_id, cursor):
...         if self.access == "index":  # its own indices, in order
...             return super()._plan(pass_id, cursor)
...         plan = open_plan(self.parents[0], pass_id)  # the parent's: indices only, no entry read
...         return Plan(plan.source, slice_chunks(stepped(plan.chunks, self.step), cursor))
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
>>> planned = every(readers.shuffle(readers.from_sequence(range(12)), seed=1), 4)
>>> access_of(planned), sorted(planned()), len(list(planned())) == len(planned)
('plan', [2, 5, 8], True)
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

>>> from readers.testing import assert_resumes_at_every_step, assert_seeded_passes
>>> _ = assert_resumes_at_every_step(lambda: every(readers.from_sequence(range(10)), 3))
>>> _ = assert_resumes_at_every_step(lambda: every(readers.shuffle(readers.from_sequence(range(20)), seed=1), 3))
>>> _ = assert_resumes_at_every_step(lambda: readers.shard(readers.shuffle(every(readers.from_sequence(range(20)),
...                                                                                3), seed=1), 1, 3))
>>> _ = assert_resumes_at_every_step(lambda: every(numbers, 4))

2. A seeded augmentation: random_map
------------------------------------

An augmentation draws random numbers per entry: a crop, noise, a flip. Its
draws must come from the seed, the pass and the sample alone, so that each
pass draws afresh while a sample draws the same in any worker, shard or
rank, and after a resume. ``readers.random_map(func, reader, seed=...)``
does it for a function ``func(entry, rng)``: no class to write.

>>> def jitter(entry, rng):
...     return entry + round(rng.normal(0, 0.1), 3)
>>> noisy = readers.random_map(jitter, readers.from_sequence([1.0, 2.0, 3.0, 4.0]), seed=0)
>>> first, second = list(noisy()), list(noisy())
>>> first != second, sorted(round(x) for x in first)  # a new draw each pass, the same samples
(True, [1, 2, 3, 4])
>>> noisy[1] == first[1]  # random access outside a pass reads pass 0
True
>>> assert_seeded_passes(lambda: readers.shuffle(readers.random_map(jitter, readers.from_sequence(
...     np.arange(12.0)), seed=0), seed=1))

How it is built, for a stage of your own that draws. ``random_map`` is a
map whose function also gets ``readers.ops.maps.sample_rng(seed, pass,
sample ID)``. In a stream the pass is ``_stream``'s (and ``_seek``'s)
``pass_id``, and the sample ID the entry's position in the pass (or what its
``key=`` names). Random access (``_get``, ``gather``) gets no pass argument:
a stage that declares ``draws_per_pass = True`` is read, in each pass,
through a copy bound to it (``Stage.for_pass``), whose ``bound_pass`` says
which pass it is (None outside a pass, read as 0), and the sample ID is its
parent's ``sample_ids``'s (which it passes on, for stages above it).

>>> from readers.ops.maps import sample_rng
>>> from readers.stage import IndexedReader
>>> class Noisy(IndexedReader):  # noise on an indexed reader: the members a drawing stage needs
...     name, draws_per_pass = "noisy", True
...
...     def __init__(self, reader, seed):
...         super().__init__(reader)
...         self.seed = seed
...
...     def __len__(self):
...         return len(self.parents[0])
...
...     def sample_ids(self, indices):
...         return self.parents[0].sample_ids(indices)
...
...     def _get(self, i):
...         sample = int(self.sample_ids(np.array([i]))[0])
...         return self.parents[0].at(i) + sample_rng(self.seed, self.bound_pass or 0, sample).random()
>>> assert_seeded_passes(lambda: readers.shuffle(Noisy(readers.from_sequence(np.arange(10.0)), seed=3), seed=1))

``assert_seeded_passes`` checks that the passes differ and that each resumes
exactly; for a stage that declares ``draws_per_pass`` (or with
``draws=True``), that the entries differ, not only their order. A stage that
forgets the pass (it draws from ``(seed, sample)`` alone, as code written for
one pass does) gives every pass the same draws, yet resumes exactly: under a
shuffle, only the entries' order would tell its passes apart, and the check
catches it.

>>> class Forgets(Noisy):
...     def _get(self, i):
...         return self.parents[0].at(i) + sample_rng(self.seed, 0, i).random()
>>> assert_seeded_passes(lambda: readers.shuffle(Forgets(readers.from_sequence(np.arange(10.0)), seed=3), seed=1))
Traceback (most recent call last):
...
AssertionError: shuffle(buf_size=None (global), seed=1)...: passes 0 and 1 gave the same entries in another order, ...

In a torch DataLoader, call ``set_epoch(k)`` on the ``readers.torch_dataset``
before epoch k: workers started afresh each epoch would run pass 0 again.

3. A stream filter: drop_repeats
--------------------------------

``drop_repeats(reader)`` drops an entry equal to the one before it. Whether
an entry is kept depends on the one before, so it is a stream, whatever its
parent. Its cursor counts its own entries (``positions`` stays None), and a
resumed pass is read past the entries given before (the default ``_seek``);
a stage that can jump to a position instead, because its entry c starts at
its parent's entry c, defines ``_seek(pass_id, cursor)`` and starts its
parent there with ``iterate(parent, pass_id, cursor)``.

>>> class DropRepeats(Stage):
...     name = "drop_repeats"
...
...     def _stream(self, pass_id):
...         previous = object()  # a private sentinel: no entry is it
...         for entry in iterate(self.parents[0], pass_id):
...             if not (isinstance(entry, type(previous)) and entry == previous):
...                 yield entry
...             previous = entry
>>> def drop_repeats(reader):
...     '''Each pass without the entries equal to the one just before.'''
...     check_reader(reader)
...     return DropRepeats(reader)
>>> def clicks():
...     yield from ["a", "a", "b", "a", "c", "c", "c", "b"]
>>> list(drop_repeats(clicks)())
['a', 'b', 'a', 'c', 'b']
>>> _ = assert_resumes_at_every_step(lambda: drop_repeats(clicks))
>>> _ = assert_resumes_at_every_step(lambda: readers.shuffle(drop_repeats(readers.shuffle(
...     readers.from_sequence([1, 1, 2, 2, 3, 3, 4]), seed=0)), 3, seed=2))

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
``check_reader`` and ``whole`` for eager argument checks. ``readers.testing``:
``assert_resumes_at_every_step`` and, for a stage with a seed,
``assert_seeded_passes``.

Stages that shard or run workers
--------------------------------

Three more declarations serve stages like ``shard`` and ``prefetch``, and
rarely a user's: ``share()`` (the share of its input's pass a stage keeps),
``per_entry`` (whether a shard above may split the pass below it instead)
and ``unresumable`` (why no position of its passes can be saved). Their
contracts are in ``readers.stage``'s tables, with every other hook's.
"""
