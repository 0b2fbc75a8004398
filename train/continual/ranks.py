"""One rank of a pipeline's distributed training: ``python -m train.continual.ranks SPEC.json`` under torchrun.

``train.continual.rank_jobs`` writes the spec and launches N of these; on
several hosts, run them with torchrun yourself (the README's continual
section). Each rank:

1. joins the gloo process group;
2. builds the source the pipeline's keys index (the spec's ``source``: a
   ``module:function`` and its JSON kwargs) and checks its fingerprint against
   the one the store's pipeline config holds, so a rank on another host with
   other data fails at once instead of training on it;
3. reads the trigger's set from the store with ``readers.trigger_set`` and
   shuffles it with the trigger's seed; ``train`` shards it by global worker
   id (padding of weight 0 evens the ranks' steps) and each rank takes
   ``batch_size / N`` of every global batch;
4. builds the model from its class and settings (the same seeded weights on
   every rank, wrapped in DistributedDataParallel) and, where the strategy
   goes on training, loads the previous training's model from the store;
5. trains with ``train``'s checkpoints in the spec's folder (a ``rank<r>``
   folder each, saved every pass and every ``every`` steps), resuming from
   them when the supervisor launches the job again after a rank died. The ranks first
   agree on one position: a rank killed while saving has an older checkpoint
   than the others, so it takes the newest one (the ranks' checkpoints hold the
   same model and global metrics, so one serves every rank);
6. rank 0 reports the progress to the store, then writes the final state
   (``state.npz``) and the pass history (``history.json``) for the
   supervisor, which finishes the training in the store.

A rank's error is written to the spec's ``error`` file, a line the
supervisor quotes if the job fails for good.
"""
from __future__ import annotations

import datetime
import importlib
import json
import os
import shutil
import sys
from typing import Any

import numpy as np

import readers
from readers.continual.store import PipelineStore
from readers.errors import BadValue
from readers.parents import as_indexed
from train.checkpoints.files import read_meta
from train.checkpoints.folders import FILE, rank_folder
from train.checkpoints.settings import Checkpoints
from train.driver import train
from train.events import BeginPass

__all__ = ["build_source", "main", "weight_product"]


def _imported(spec: str) -> Any:
    module, _, attribute = spec.partition(":")
    found = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def build_source(spec: dict[str, Any], fingerprint: Any = None) -> Any:
    """The indexed source ``spec`` (``{"call": "module:function", "kwargs": {...}}``) builds; a BadValue when
    ``fingerprint`` is given and the source's differs (other data on this host).

    >>> build_source({"call": "readers:from_sequence", "kwargs": {"seq": "abc"}}).at(1)
    'b'
    """
    source = as_indexed(_imported(spec["call"])(**spec.get("kwargs", {})))
    if source is None:
        raise BadValue(f"rank source {spec['call']} gave no indexed reader (len and [i]); it must give the reader "
                       "the pipeline's keys index")
    if fingerprint is not None:
        mine = json.loads(json.dumps(readers.fingerprint(source)))
        if mine != fingerprint:
            raise BadValue(f"rank source {spec['call']}({spec.get('kwargs', {})}) gives other data than the pipeline "
                           f"ran with ({mine} here, {fingerprint} in the store): give every host the same data")
    return source


def weight_product(entry: tuple) -> tuple:
    """A sharded weighted set's entry ``(..., set weight, pad weight)`` with one weight, their product.

    >>> weight_product((7, 1, np.float32(0.5), 1.0))
    (7, 1, 0.5)
    """
    return (*entry[:-2], float(entry[-2]) * float(entry[-1]))


def _agree(folder: str, rank: int, world: int) -> tuple[int, int] | None:
    """Make every rank's checkpoint the newest any rank saved; its (pass, entry), or None when there is none
    (a new training)."""
    import torch
    import torch.distributed as dist

    own = os.path.join(rank_folder(folder, rank, world), FILE)
    meta = read_meta(own) if os.path.exists(own) else None
    mine = torch.tensor([-1, -1] if meta is None else [meta["pass"], meta["cursor"]], dtype=torch.int64)
    positions = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(positions, mine)
    found = [tuple(p.tolist()) for p in positions]
    leader = max(range(world), key=lambda r: found[r])
    if found[leader][0] < 0:
        return None
    if found[rank] != found[leader]:  # killed while saving, or before its first save: take the newest
        os.makedirs(os.path.dirname(own), exist_ok=True)
        part = own + f".{os.getpid()}.part"
        shutil.copyfile(os.path.join(rank_folder(folder, leader, world), FILE), part)
        os.replace(part, own)
    dist.barrier()  # no rank reads or rewrites a checkpoint before every copy is made
    return found[leader]


class _Resumed:
    """Rank 0's progress reports (the supervisor's ``_Reporter``), counting from where a resumed pass starts."""

    def __init__(self, store: PipelineStore, training_id: int, steps: int, passes: int):
        from train.continual.supervisor import _Reporter

        self.reporter, self.per_pass = _Reporter(store, training_id, steps, None), -(-steps // max(passes, 1))

    def __call__(self, event: Any) -> None:
        if isinstance(event, BeginPass):
            self.reporter.done = event.pass_id * self.per_pass + event.first_batch
        self.reporter(event)

    def report(self) -> None:
        self.reporter.report()

    @property
    def done(self) -> int:
        return self.reporter.done


def _run(spec: dict[str, Any]) -> None:
    import torch.distributed as dist

    info = readers.worker_info()
    rank, world = info.rank, info.world_size
    if spec["batch_size"] % world:
        raise BadValue(f"the job has {world} ranks, and batch size {spec['batch_size']} is no multiple of it: each "
                       "rank takes batch_size / ranks of every global batch; give --nproc the job's ranks (all "
                       "hosts') and a batch size it divides")
    model_class = _imported(spec["model"]["class"])
    with PipelineStore(spec["db"], create=False) as store:
        config = store.pipeline(spec["pipeline_id"])["config"]
        source = build_source(spec["source"], config.get("source"))
        weighted = spec["weight_column"] is not None
        data = readers.trigger_set(store, spec["pipeline_id"], spec["trigger_id"], source=source, weights=weighted)
        start = None if spec["start_from"] is None else store.model_state(spec["start_from"])
    model = model_class(**spec["model"]["settings"])  # after the process group: wrapped in DDP
    if start is not None:
        model.load_state_dict(start)
    mapping = dict(spec["mapping"])
    provider = readers.shuffle(data, seed=spec["seed"])
    if weighted:  # the set's weights times the padding's: shard here, since train() would add a second weight
        provider = readers.map_readers(weight_product, readers.shard(provider, equalize="pad"))
        mapping["weight"] = spec["weight_column"]
    resumed = _agree(spec["checkpoints"], rank, world)
    checkpoints = Checkpoints(spec["checkpoints"], every=spec["every"], resume=resumed is not None,
                              config={"training_id": spec["training_id"]})
    reporter = None
    store = PipelineStore(spec["db"], create=False) if rank == 0 else None
    try:
        if store is not None:
            reporter = _Resumed(store, spec["training_id"], spec["steps"], spec["passes"])
            if resumed is not None:  # what `pipeline status` shows of a job torchrun restarted
                store.update_training(spec["training_id"], metrics={
                    "restarts": int(spec.get("attempt", 0)),
                    "resumed_at": {"pass": resumed[0], "entry": resumed[1]}})
        history = train(provider, mapping, spec["batch_size"] // world, spec["passes"], model=model,
                        event_handler=reporter, seed=spec["seed"], checkpoints=checkpoints, shard=True,
                        equalize="pad")
        if reporter is not None:
            if reporter.done:
                reporter.report()
            _write(spec, model.state_dict(), history)
    finally:
        if store is not None:
            store.close()
    dist.barrier()


def _write(spec: dict[str, Any], state: dict[str, Any], history: list[dict]) -> None:
    """The final state and history for the supervisor, each file whole or absent."""
    part = spec["out"] + ".part"
    with open(part, "wb") as f:
        np.savez(f, **{k: np.asarray(v) for k, v in state.items()})
    os.replace(part, spec["out"])
    with open(spec["history"] + ".part", "w", encoding="utf-8") as f:
        json.dump(history, f)
    os.replace(spec["history"] + ".part", spec["history"])


def main(argv: list[str]) -> None:
    """Run this rank of the training ``argv[0]`` (a spec's path) describes."""
    import torch.distributed as dist

    if len(argv) != 1:
        raise SystemExit("usage: python -m train.continual.ranks SPEC.json (under torchrun)")
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=spec.get("timeout", 300)))
    try:
        _run(spec)
    except BaseException as exc:
        rank = os.environ.get("RANK", "?")
        with open(spec["error"], "a", encoding="utf-8") as f:
            f.write(f"rank {rank}: {type(exc).__name__}: {' '.join(str(exc).split())}\n")
        raise
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
