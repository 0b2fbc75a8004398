"""The stage graph: each stage's parents, its name and options, and the facts it declares.

Every readerkit reader is a ``Node``. A node knows the readers it reads (its
``parents``), shows itself in reprs, and *declares* facts that the rest of
readerkit reads instead of guessing: ``readers.position`` reads ``positions``,
``seed``, ``share()`` and ``unresumable`` to say where a pass is and to resume
there; ``readers.inspection`` reads them and ``batched``, ``unrepeatable`` and
``draws_per_pass`` into one look at a pipeline; ``readers.identity`` reads
``identity()``, ``digest()`` and ``stands_for()``. Every hook, with its
contract, is in one table in ``readers.stage``'s docstring; ``readers.stage.Stage``
adds running passes.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, NamedTuple

__all__ = ["DrawnSeed", "Node", "Share", "describe", "describe_partial", "drawing_stage", "walk"]


class Share(NamedTuple):
    """The share of its input's pass a sharding stage keeps: shard ``index`` of ``count``.

    ``index`` is None for a share whose positions count alike in every share
    (a node's block: every node takes the same steps through a block of its
    own). ``follows_workers``: the share is the worker's it runs in, looked
    up as each pass starts, rather than given.

    >>> Share(1, 4, False).count
    4
    """

    index: int | None
    count: int
    follows_workers: bool


class DrawnSeed(int):
    """A seed drawn from the operating system (``seed=None``): each process, and each run, draws its own.

    Its value is an ordinary int in states and reprs; its type tells a shard
    that the processes of a job do not share the order it seeds, and a
    checkpoint that a later run would not repeat it (``Node.unrepeatable``).

    >>> DrawnSeed(7) + 1
    8
    """


class Node:
    """A stage of a pipeline: its parents, its name and options, and its declarations.

    The declarations are class attributes with the defaults below; a stage
    overrides one with a class attribute, a field set in ``__init__`` or a
    property when it depends on the options.

    >>> class Twice(Node):
    ...     name = "twice"
    ...     positions = 1  # one entry per parent entry: its cursor is the parent's
    >>> Twice(lambda: [1])
    twice()
    └─ <lambda>
    """

    #: The stage's name in reprs and error messages.
    name: ClassVar[str] = "stage"
    #: How a cursor counts this stage's passes: None, its own entries; k, its first
    #: parent's positions, k per entry of this stage (1 for a map, batch_size for a batch).
    positions: int | None = None
    #: The seed that orders this stage's passes, recorded in every state; None for none.
    seed: int | None = None
    #: Why a position in this stage's passes cannot be saved, or None when it can.
    unresumable: str | None = None
    #: Whether a shard above may split the pass below this stage instead (a stage with
    #: ``positions == 1``): None, no; "same", its entries are its parent's, unchanged;
    #: "map", each is made from its parent's alone (so not below a padding shard).
    per_entry: str | None = None
    #: Whether its entries themselves, not only their order, are drawn anew every pass from its seed
    #: (``readers.random_map``): its random access then depends on the pass, which a pass binds
    #: (``readers.stage.Stage.for_pass``), and a cache by sample ID cannot keep them.
    draws_per_pass: bool = False
    #: Whether its entries are minibatches (lists of entries), as ``batching.batch``'s are.
    batched: bool = False

    def __init__(self, *parents: Any):
        self.parents = parents

    def share(self) -> Share | None:
        """The share of its input's pass this stage keeps, resolved now; None for a stage that keeps all."""
        return None

    @property
    def unrepeatable(self) -> str | None:
        """Why another run (another process) would not give this stage's passes again, or None when it would.

        By default: a seed drawn from the operating system (``seed=None``). A
        checkpoint refuses such a pipeline, and so does a shard over several
        processes, each of which would draw its own.

        >>> class Drawn(Node):
        ...     name = "drawn"
        ...     seed = DrawnSeed(12345)
        >>> Drawn().unrepeatable
        'drawn(seed=None) draws a new seed in every run'
        """
        if isinstance(self.seed, DrawnSeed):
            return f"{self.name}(seed=None) draws a new seed in every run"
        return None

    def finish_pass(self) -> None:
        """A pass of the pipeline this stage is in ran out or was closed: finish what it left to do.

        Called on every stage of the pipeline (``readers.passes.end_pass``;
        workers call it when their part ends). A stage that buffers writes
        (``readers.cached``) writes them out; others need nothing.

        >>> Node().finish_pass()
        """

    def in_workers(self) -> list[tuple[int, int]] | None:
        """For a stage that runs its parent's passes in workers whose shares follow them (a prefetch over
        a source that splits its files by worker): each worker's context, (local worker id, workers);
        else None. A position's layout then lists the share of each worker (``readers.position``).

        >>> Node().in_workers() is None
        True
        """
        return None

    def share_count(self, pass_id: int, limit: int) -> int | None:
        """For a source whose share follows its worker (``tar_shards``): how many entries its share of
        pass ``pass_id`` gives, counted up to ``limit`` and cheaply (a tar shard's headers, not its
        data); None when it cannot count. ``limit`` 0 asks only whether it can, reading nothing.
        A prefetch over it then turns its merged cursor into each worker's.

        >>> Node().share_count(0, 10) is None
        True
        """
        return None

    def stands_for(self) -> dict[str, list] | None:
        """For a stage that reads a pipeline held elsewhere (``readers.remote``): that pipeline's
        ``{"pipeline": [...], "digests": [...]}``, so its fingerprint is the local pipeline's; else None.

        >>> Node().stands_for() is None
        True
        """
        return None

    def by_key(self) -> Any:
        """For a timestamped stream whose entries end in ``(key, time)``: the indexed reader its keys index
        (for Split-MNIST, the MNIST split), which trigger sets are read back from; else None.

        >>> Node().by_key() is None
        True
        """
        return None

    def with_parents(self, *parents: Any) -> Node:
        """A copy of this stage that reads ``parents`` instead (for a shard that splits below it).

        >>> from readers import from_sequence, map_readers
        >>> list(map_readers(str.upper, from_sequence("ab")).with_parents(from_sequence("cd"))())
        ['C', 'D']
        """
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.parents = parents
        return new

    # -- identity, for checkpoints (readers.fingerprint) --------------------------
    def identity(self) -> str:
        """This stage as part of what the data is: its title, less where the data was read from.

        A source that shows a path or folder in its options overrides this to
        leave it out, so the same data read through another folder is known
        as the same. A stage that holds a user function (a map, a filter)
        overrides it to add the function's digest
        (``readers.identity.function_identity``), so other code is other data.

        >>> from readers import from_sequence
        >>> from_sequence("ab").identity()
        'from_sequence(str of 2)'
        """
        return self.title()

    def digest(self) -> str | None:
        """A digest of the data this source reads (a file's SHA-256, a sampled hash), or None.

        Only sources (stages without parents) are asked; None means the
        content cannot be told, and checkpoints then compare the pipeline and
        the length alone.

        >>> from readers import from_sequence
        >>> from_sequence("ab").digest() == from_sequence("ab").digest() != from_sequence("ac").digest()
        True
        """
        return None

    # -- display ----------------------------------------------------------------
    def _options(self) -> str:
        """The options shown in the repr, e.g. ``"buf_size=10, seed=0"``."""
        return ""

    def title(self) -> str:
        """This stage on one line: its name and options, without its parents.

        >>> from readers import from_sequence, shuffle
        >>> shuffle(from_sequence("ab"), 4, seed=0).title()
        'shuffle(buf_size=4, seed=0)'
        """
        return f"{self.name}({self._options()})"

    def _lines(self) -> list[str]:
        lines = [self.title()]
        for i, parent in enumerate(self.parents):
            last = i == len(self.parents) - 1
            sub = repr(parent).splitlines() if isinstance(parent, Node) else [describe(parent)]
            lines.append(("└─ " if last else "├─ ") + sub[0])
            lines.extend(("   " if last else "│  ") + line for line in sub[1:])
        return lines

    def __repr__(self) -> str:
        return "\n".join(self._lines())

    def __bool__(self) -> bool:
        return True  # a reader is never falsy, even when it has a length


#: An argument's repr longer than this is shown by its type name instead.
_SHORT = 40


def _argument(value: Any, key: str | None = None) -> str:
    """An argument of a partial as ``describe`` shows it: its repr when short and without an address."""
    shown = repr(value)
    if len(shown) <= _SHORT and " at 0x" not in shown:
        return shown
    if callable(value) and (getattr(value, "__qualname__", None) or isinstance(value, functools.partial)):
        return describe(value)  # a function's name says more than <function>
    return f"<{type(value).__qualname__}>"


def describe(reader: Any) -> str:
    """A one-line name for any reader, for error messages and reprs; no memory addresses.

    A partial's arguments show their repr when it is short and has no
    address, else their type name.

    >>> def numbers():
    ...     yield 1
    >>> describe(numbers)
    'numbers'
    >>> describe(functools.partial(numbers))
    'partial(numbers)'
    >>> class Config:
    ...     pass
    >>> describe(functools.partial(numbers, Config(), "x" * 50, key=numbers, n=3))
    'partial(numbers, <Config>, <str>, key=numbers, n=3)'
    """
    if isinstance(reader, Node):
        return reader.title()
    if isinstance(reader, functools.partial):
        return describe_partial(reader)
    name = getattr(reader, "__qualname__", None) or getattr(reader, "__name__", None)
    return name or type(reader).__name__


def describe_partial(partial: functools.partial, argument: Callable[[Any, str | None], str] = _argument,
                     function: Callable[[Any], str] = describe) -> str:
    """A partial as ``partial(func, args, key=value)``: its function shown by ``function``, each argument by ``argument``.

    ``argument(value, key)`` gets the keyword's name, None for a positional
    argument. ``describe`` shows arguments by their short repr;
    ``readers.fingerprint`` passes its own ``argument``, which leaves paths out.

    >>> describe_partial(functools.partial(int, "7", base=8))
    "partial(int, '7', base=8)"
    >>> describe_partial(functools.partial(int, "7", base=8), argument=lambda value, key: key or type(value).__name__)
    'partial(int, str, base=base)'
    """
    args = [function(partial.func), *(argument(v, None) for v in partial.args),
            *(f"{k}={argument(v, k)}" for k, v in partial.keywords.items())]
    return f"partial({', '.join(args)})"


def walk(reader: Any) -> Iterator:
    """Every stage of a pipeline, top down and depth first, ending with plain readers.

    >>> from readers import from_sequence, shuffle
    >>> [describe(s) for s in walk(shuffle(from_sequence("ab"), seed=0))]
    ['shuffle(buf_size=None (global), seed=0)', 'from_sequence(str of 2)']
    """
    yield reader
    if isinstance(reader, Node):
        for parent in reader.parents:
            yield from walk(parent)


def drawing_stage(reader: Any) -> Node | None:
    """The first stage of ``reader``'s pipeline, top down, that draws its entries anew every pass
    (``draws_per_pass``), or None: its passes then differ in what they hold, not only in their order.

    >>> from readers import from_sequence, random_map, shuffle
    >>> drawing_stage(shuffle(random_map(lambda e, rng: e, from_sequence("ab"), seed=0), seed=1)).name
    'random_map'
    >>> drawing_stage(shuffle(from_sequence("ab"), seed=1)) is None
    True
    """
    return next((s for s in walk(reader) if isinstance(s, Node) and s.draws_per_pass), None)
