"""One look at a pipeline: the facts its stages declare, read in one walk, for train() and its checkpoints.

``inspect_pipeline(reader)`` walks the stages once and keeps what they
declare (``readers.stage``'s tables): whether a stage batches, whether one
shards, why a position cannot be saved or a run not repeated, the seeds, and
the length. The fingerprint (``readers.fingerprint``) is taken the first time
it is asked for, since it may read a source's first entries. The driver and
its checkpoints read this object and nothing else of the pipeline.

>>> import batching
>>> from readers import from_sequence, shard, shuffle
>>> facts = inspect_pipeline(shard(shuffle(from_sequence(range(8)), seed=3), 0, 2))
>>> facts.sharded, facts.seeds, facts.length, facts.batched, facts.unresumable
(True, 3, 4, None, None)
>>> inspect_pipeline(batching.batch(from_sequence(range(8)), 4)).batched
'batch(batch_size=4, drop_last=False)'
"""
from __future__ import annotations

import functools
from typing import Any

from readers.graph import Node, describe, walk
from readers.identity import fingerprint

__all__ = ["Inspection", "inspect_pipeline"]


class Inspection:
    """What a pipeline's stages declare, read once (see the module); made by ``inspect_pipeline``.

    ``reader`` the pipeline; ``batched`` the stage that makes minibatches
    (its title), or None; ``sharded`` whether a shard stage splits its
    passes; ``unresumable`` and ``unrepeatable`` why a position cannot be
    saved, or another run would not repeat the passes (each naming its
    stage), or None; ``seeds`` the seeds a state records (None, an int, or a
    list top down); ``length`` the entries in a pass, or None for a stream.

    >>> from readers import from_sequence
    >>> inspect_pipeline(from_sequence("ab"))
    Inspection(from_sequence(str of 2): length 2)
    """

    def __init__(self, reader: Any, *, batched: str | None, sharded: bool, unresumable: str | None,
                 unrepeatable: str | None, seeds: Any, length: int | None):
        self.reader, self.batched, self.sharded = reader, batched, sharded
        self.unresumable, self.unrepeatable, self.seeds, self.length = unresumable, unrepeatable, seeds, length

    @functools.cached_property
    def fingerprint(self) -> dict[str, Any]:
        """``readers.fingerprint`` of the pipeline, taken once, when first asked for (it may read a source's
        first entries, so a caller that locks a folder first asks for it under the lock).

        >>> from readers import from_sequence
        >>> inspect_pipeline(from_sequence("ab")).fingerprint["length"]
        2
        """
        return fingerprint(self.reader)

    def __repr__(self) -> str:
        facts = [f"length {self.length}" if self.length is not None else "a stream"]
        facts += [f"batched by {self.batched}"] if self.batched else []
        facts += ["sharded"] if self.sharded else []
        facts += [f"seeds {self.seeds}"] if self.seeds is not None else []
        facts += [f"unresumable: {self.unresumable}"] if self.unresumable else []
        facts += [f"unrepeatable: {self.unrepeatable}"] if self.unrepeatable else []
        return f"Inspection({describe(self.reader)}: {', '.join(facts)})"


def inspect_pipeline(reader: Any) -> Inspection:
    """The facts ``reader``'s stages declare, in one walk of the pipeline (see the module).

    >>> from readers import from_sequence, multiprocess_reader, shuffle
    >>> inspect_pipeline(multiprocess_reader([from_sequence("ab")])).unresumable
    'multiprocess_reader merges its readers in whatever order their entries arrive'
    >>> inspect_pipeline(shuffle(lambda: iter("abc"), 2)).unrepeatable
    'shuffle(seed=None) draws a new seed in every run'
    """
    batched = unresumable = unrepeatable = None
    sharded = False
    seeds = []
    for stage in walk(reader):
        if not isinstance(stage, Node):
            continue
        if stage.batched and batched is None:
            batched = stage.title()
        sharded = sharded or stage.share() is not None
        unresumable = unresumable or stage.unresumable
        unrepeatable = unrepeatable or stage.unrepeatable
        if stage.seed is not None:
            seeds.append(int(stage.seed))
    try:
        length: int | None = len(reader)
    except TypeError:
        length = None
    return Inspection(reader, batched=batched, sharded=sharded, unresumable=unresumable, unrepeatable=unrepeatable,
                      seeds=None if not seeds else seeds[0] if len(seeds) == 1 else seeds, length=length)
