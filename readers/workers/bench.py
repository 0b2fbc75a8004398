"""What holds a pipeline back: prefetch figures measured stage by stage, and the bottleneck they point at.

``measure`` runs ``batch(prefetch(firstn(reader, limit)))`` with a consumer
that sleeps as a training step would, then the reader alone, and returns the
figures as a plain dict; ``report`` turns them into lines and ``bottleneck``
names what limits the pipeline, by a fixed rule over those figures (so the
rule is tested with fixed figures, not timed runs). ``python cli.py bench``
prints the three.
"""
from __future__ import annotations

import itertools
import time
from typing import Any

from readers.graph import describe, walk
from readers.ops.slicing import firstn
from readers.workers.prefetch import Prefetch, prefetch

__all__ = ["bottleneck", "measure", "report"]

BOUND = 0.5  # a side that waits half its time or more is waiting on the other side


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def measure(name: str, reader: Any, *, workers: int = 2, mode: str = "process", batch_size: int = 64,
            limit: int = 20000, step_ms: float = 0.0, passes: int = 1) -> dict[str, Any]:
    """Time ``batch(prefetch(firstn(reader, limit)))`` with a sleeping consumer, then the reader alone.

    The consumer sleeps ``step_ms`` per minibatch, as a training step would.
    Each is run ``passes`` times and the last pass counts. The reader's own
    prefetch stages are reported from the reader-alone pass, which runs them in
    this process (in the pipeline they run inside the workers, out of sight).
    The figures are a plain dict (``report`` prints them, ``bottleneck`` reads them).

    >>> from readers import from_sequence
    >>> f = measure("numbers", from_sequence(range(100)), mode="thread", batch_size=32)
    >>> f["pipeline"]["batches"], f["alone"]["entries"], [s["stage"] for s in f["stages"]]
    (4, 100, ['prefetch(2 threads)'])
    """
    alone = firstn(reader, limit)
    stage = prefetch(alone, workers, mode=mode)
    pause = step_ms / 1000
    for _ in range(passes):
        entries = batches = 0
        stepping = 0.0
        start = time.perf_counter()
        it = stage()
        while minibatch := list(itertools.islice(it, batch_size)):  # what batch() does
            entries, batches = entries + len(minibatch), batches + 1
            if pause:
                t = time.perf_counter()
                time.sleep(pause)
                stepping += time.perf_counter() - t
        seconds = max(time.perf_counter() - start, 1e-9)
        outer = stage.stats()
        start = time.perf_counter()
        serial_entries = sum(1 for _ in alone())
        serial = max(time.perf_counter() - start, 1e-9)
    stages = [{"stage": describe(stage), "measured": "pipeline", **outer}]
    stages += [{"stage": describe(s), "measured": "reader alone", **s.stats()}
               for s in walk(reader) if isinstance(s, Prefetch) and s.stats() is not None]
    return {"reader": name, "mode": mode, "workers": workers, "batch_size": batch_size, "limit": limit,
            "step_ms": step_ms, "passes": passes,
            "alone": {"entries": serial_entries, "seconds": serial, "entries_per_s": serial_entries / serial},
            "pipeline": {"entries": entries, "batches": batches, "seconds": seconds, "entries_per_s": entries / seconds,
                         "without_prefetch_s": serial + stepping},
            "stages": stages}


def bottleneck(f: dict[str, Any]) -> tuple[str, str]:
    """What limits the pipeline ``measure`` timed, as (kind, the ``bottleneck:`` line).

    The first rule that holds: the pipeline took over 10% longer than the
    reader alone plus the same steps: prefetch overhead; the consumer waited
    less than half the pass: the consumer (batching and the step); the workers
    spent half their time or more waiting on their reader: that reader (or,
    following the wait down, the work under the reader's own prefetch stage
    whose consumer also waited); otherwise the hand-off between workers and
    consumer. The kinds are "prefetch overhead", "consumer", "reader" and "hand-off".

    >>> stage = {"stage": "prefetch(2 processes)", "input_wait": 0.92, "output_wait": 0.0,
    ...          "consumer_wait": 0.95, "queue_fill": 0.1}
    >>> f = {"reader": "mnist", "mode": "process", "step_ms": 0, "stages": [stage],
    ...      "pipeline": {"seconds": 1.0, "without_prefetch_s": 1.8}}
    >>> bottleneck(f)[1]
    'bottleneck: the reader (mnist) — workers spent 92% of their time waiting on it; add workers (--workers) or make it faster'
    >>> bottleneck({**f, "pipeline": {"seconds": 1.0, "without_prefetch_s": 0.2}})[1]
    'bottleneck: prefetch overhead — the pipeline took 5.0x as long as the reader alone; handing entries over costs more than reading them: read without prefetch, try --mode thread, or prefetch whole batches (batch, then prefetch)'
    >>> bottleneck({**f, "step_ms": 20, "stages": [{**stage, "consumer_wait": 0.03, "queue_fill": 0.9}]})[1]
    'bottleneck: the consumer — it waited for data 3% of the pass, the queue was 90% full on average; the training step is slower than the data: more workers will not help'
    """
    outer, inner = f["stages"][0], f["stages"][1:]
    waited, p = outer["consumer_wait"], f["pipeline"]
    switch = "--mode thread" if f["mode"] == "process" else "fewer workers"
    if p["seconds"] > 1.1 * p["without_prefetch_s"]:
        plus = " plus the same steps" if f["step_ms"] else ""
        return "prefetch overhead", (
            f"bottleneck: prefetch overhead — the pipeline took {p['seconds'] / p['without_prefetch_s']:.1f}x as long "
            f"as the reader alone{plus}; handing entries over costs more than reading them: "
            f"read without prefetch, try {switch}, or prefetch whole batches (batch, then prefetch)")
    if waited < BOUND:
        work = "the training step is" if f["step_ms"] else "batching (with no training step) is"
        return "consumer", (f"bottleneck: the consumer — it waited for data {_pct(waited)} of the pass, the queue was "
                            f"{_pct(outer['queue_fill'])} full on average; {work} slower than the data: "
                            "more workers will not help")
    at, label, hint = outer, f"the reader ({f['reader']})", "add workers (--workers) or make it faster"
    for s in inner:  # follow the wait down the reader's own prefetch stages while each waits on the next
        if at["input_wait"] < BOUND or s["consumer_wait"] < BOUND:
            break
        at, label, hint = s, f"the work under {s['stage']}", "give that stage more workers or make its work faster"
    if at["input_wait"] >= BOUND:
        return "reader", f"bottleneck: {label} — workers spent {_pct(at['input_wait'])} of their time waiting on it; {hint}"
    return "hand-off", (f"bottleneck: the hand-off — the consumer waited {_pct(waited)} of the pass, but workers spent "
                        f"only {_pct(outer['input_wait'])} of their time reading and {_pct(outer['output_wait'])} "
                        f"sending; starting workers and moving entries dominate: try a larger --limit, {switch}, "
                        "or prefetch whole batches (batch, then prefetch)")


def report(f: dict[str, Any]) -> list[str]:
    """The figures ``measure`` returned as lines: the reader alone, the pipeline, then one line per prefetch stage.

    >>> stage = {"stage": "prefetch(2 threads)", "measured": "pipeline", "entries_per_s": 9000.0,
    ...          "input_wait": 0.5, "output_wait": 0.1, "consumer_wait": 0.2, "queue_fill": 0.75}
    >>> f = {"step_ms": 0, "alone": {"entries": 100, "entries_per_s": 20000.0},
    ...      "pipeline": {"entries": 100, "batches": 4, "entries_per_s": 9000.0, "seconds": 0.011,
    ...                   "without_prefetch_s": 0.005}, "stages": [stage]}
    >>> print("\\n".join(report(f)))
    reader alone: 100 entries, 20,000 entries/s (serial, no prefetch)
    pipeline: 100 entries in 4 batches, 9,000 entries/s (0.45x the reader alone)
    stage prefetch(2 threads): 9,000 entries/s  input wait 50%  output wait 10%  consumer wait 20%  queue fill 75%
    """
    alone, p = f["alone"], f["pipeline"]
    lines = [f"reader alone: {alone['entries']:,} entries, {alone['entries_per_s']:,.0f} entries/s (serial, no prefetch)",
             f"pipeline: {p['entries']:,} entries in {p['batches']:,} batches, {p['entries_per_s']:,.0f} entries/s "
             f"({p['without_prefetch_s'] / p['seconds']:.2f}x the reader alone{' plus the steps' if f['step_ms'] else ''})"]
    for s in f["stages"]:
        where = "" if s["measured"] == "pipeline" else " (the reader's own, measured alone)"
        lines.append(f"stage {s['stage']}{where}: {s['entries_per_s']:,.0f} entries/s  input wait "
                     f"{_pct(s['input_wait'])}  output wait {_pct(s['output_wait'])}  consumer wait "
                     f"{_pct(s['consumer_wait'])}  queue fill {_pct(s['queue_fill'])}")
    return lines
