"""A torchrun job whose ranks read their round shares from one data-provider server (``readers.remote``).

Every rank reads the same shuffled remote reader. Step s of the run reads its
global batch ``[data_index(s), data_index(s) + batch_size(s))`` of a
``BatchSchedule`` that ramps from 1 sample (one rank is left out) to 7: the
round's coordinator (``readers.assign_batches``, seeded per step with
``train.steps.round_seed``) splits it among the ranks, and each rank gathers its
share (``readers.round_share``) as one collated batch, as ``train_steps`` does.
The ranks meet at a barrier after every round. Each rank writes its steps'
assignments and the ids it read to ``OUT.<rank>.json``. The test is
tests/readers/network/test_client_torchrun.py; by hand, with a server running (Linux)::

    PYTHONPATH=. GLOO_SOCKET_IFNAME=lo python tests/helpers/torchrun_job.py --torchrun --nnodes 1 \\
        --nproc-per-node 2 tests/helpers/remote_job.py --address 127.0.0.1:20001 --out /tmp/result

Importing this module imports neither torch nor readerkit (pytest imports it
to look for doctests).
"""
import argparse
import datetime
import json
import os
import sys

#: The global batch sizes of the steps: 1, 1, 2, 2, 3, 3, 4, 5, 6, 7, 7, ...
SCHEDULE = {"start": 1, "end": 7, "warmup_tokens": 24, "seq_len": 1}


def ids_of(columns) -> list:
    """A collated batch as lists: its one column of ids (entries of one column), or its rows (token windows, entries
    that are one array each, collate into one array)."""
    return (columns if hasattr(columns, "tolist") else columns[0]).tolist()


def job(address: str, out: str, steps: int, seed: int) -> None:
    import torch.distributed as dist

    import batching
    import readers
    from readers.tokenized.schedule import BatchSchedule
    from train.steps import round_seed

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    info = readers.worker_info()
    if (info.rank, info.world_size) != (dist.get_rank(), dist.get_world_size()):
        raise RuntimeError(f"worker_info() says rank {info.rank} of {info.world_size}, torch.distributed "
                           f"{dist.get_rank()} of {dist.get_world_size()}")
    addresses = address.split(",")  # several servers (tests/test_cli_serve_many.py): one readers.remote over them
    reader = readers.shuffle(readers.remote(addresses if len(addresses) > 1 else address, deadline=30.0), seed=seed)
    schedule = BatchSchedule(**SCHEDULE)
    rounds = []
    for step in range(steps):
        assignment = readers.assign_batches(range(info.world_size), data_index=schedule.data_index(step),
                                            global_batch_size=schedule.batch_size(step), seed=round_seed(seed, step))
        ids = None
        if info.rank in assignment:
            share = readers.round_share(reader, assignment, info.rank)
            ids = ids_of(next(iter(batching.collated(batching.batch(share, len(share)))())))
        rounds.append({"assignment": [[client, list(interval)] for client, interval in assignment.items()],
                       "ids": ids})
        dist.barrier()
    with open(f"{out}.{info.rank}.json.part", "w") as f:
        json.dump({"rank": info.rank, "world_size": info.world_size, "pid": os.getpid(), "rounds": rounds}, f)
    os.replace(f"{out}.{info.rank}.json.part", f"{out}.{info.rank}.json")
    dist.destroy_process_group()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", required=True, help="the data-provider server's host:port, or several, "
                                                          "separated by commas")
    parser.add_argument("--out", required=True, help="each rank writes OUT.<rank>.json")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seed", type=int, default=5)
    options = parser.parse_args(argv)
    job(options.address, options.out, options.steps, options.seed)


if __name__ == "__main__":
    main(sys.argv[1:])
