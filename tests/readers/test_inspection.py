"""readers.inspection: one walk of a pipeline reads what its stages declare, and nothing is guessed."""
import pytest

import batching
import readers
from readers.graph import DrawnSeed, Node
from readers.inspection import inspect_pipeline
from readers.stage import Stage
from tests.helpers.toys import tag_draw, ten_reader


class Counted(Stage):
    """A stage that counts how often each of its declarations is read."""

    name = "counted"
    positions = 1

    def __init__(self, reader, reads):
        super().__init__(reader)
        self.reads = reads

    def share(self):
        self.reads.append("share")
        return None

    def _seek(self, pass_id, cursor):
        return iter(())


def test_inspection_reads_each_declaration_once_and_the_fingerprint_only_when_asked():
    reads = []
    facts = inspect_pipeline(Counted(readers.from_sequence(range(5)), reads))
    assert reads == ["share"]
    assert "fingerprint" not in vars(facts)  # not taken yet: it may read a source's entries
    assert facts.fingerprint["pipeline"] == ["counted()", "from_sequence(range of 5)"]
    assert facts.fingerprint is facts.fingerprint


@pytest.mark.parametrize("make, batched", [
    (lambda: batching.batch(readers.from_sequence(range(8)), 2), "batch(batch_size=2, drop_last=False)"),
    (lambda: batching.collated(batching.bucket_by_length(readers.from_sequence(["a", "bb"]), [2], 2)),
     "bucket_by_length(boundaries=[2], batch_size=2)"),
    (lambda: readers.shuffle(readers.from_sequence(range(8)), seed=0), None),
])
def test_inspection_names_the_stage_that_batches(make, batched):
    found = inspect_pipeline(make()).batched
    assert found == batched if batched is None else found.startswith(batched.split("(")[0])


def test_inspection_reads_shards_seeds_lengths_and_what_cannot_be_saved_or_repeated():
    facts = inspect_pipeline(readers.shard(readers.shuffle(readers.from_sequence(range(9)), seed=4), 1, 3))
    assert (facts.sharded, facts.seeds, facts.length, facts.unresumable, facts.unrepeatable) == (True, 4, 3, None, None)
    merged = inspect_pipeline(readers.multiprocess_reader([ten_reader()]))
    assert merged.unresumable.startswith("multiprocess_reader merges") and merged.length is None
    drawn = inspect_pipeline(readers.random_map(tag_draw, readers.shuffle(ten_reader(), 4), seed=None))
    assert drawn.unrepeatable == "random_map(seed=None) draws a new seed in every run"
    assert inspect_pipeline(readers.shuffle(ten_reader(), 1)).unrepeatable is None  # a buffer of one keeps order


def test_a_stage_declares_what_inspection_reads_and_nothing_else_is_looked_for():
    class Mine(Node):
        name = "mine"
        batched = True
        unresumable = "it forgets"
        seed = DrawnSeed(3)

    facts = inspect_pipeline(Mine())
    assert (facts.batched, facts.unresumable, facts.seeds) == ("mine()", "it forgets", 3)
    assert facts.unrepeatable == "mine(seed=None) draws a new seed in every run"
