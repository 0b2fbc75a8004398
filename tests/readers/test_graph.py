"""readers.graph: a pipeline as a graph of nodes: parents, reprs, declarations, walk and describe."""
import functools

import pytest

import readers
from readers.graph import Node, Share, describe, walk


def numbers():
    yield from range(3)


def test_repr_draws_every_parent_as_a_tree():
    r = readers.chain(readers.shuffle(readers.from_sequence("ab"), seed=0), readers.from_sequence("cd"))
    assert repr(r) == (
        "chain()\n"
        "├─ shuffle(buf_size=None (global), seed=0)\n"
        "│  └─ from_sequence(str of 2)\n"
        "└─ from_sequence(str of 2)"
    )


def test_repr_names_a_plain_reader_without_an_address():
    shown = repr(readers.map_readers(abs, numbers))
    assert shown == "map_readers(abs)\n└─ numbers" and "0x" not in shown


@pytest.mark.parametrize("reader, shown", [
    (numbers, "numbers"),
    (functools.partial(numbers), "partial(numbers)"),
    (functools.partial(readers.from_sequence, "ab"), "partial(from_sequence, 'ab')"),
    (functools.partial(sorted, key=len), "partial(sorted, key=<built-in function len>)"),
    (readers.firstn(numbers, 2), "firstn(n=2)"),
])
def test_describe_names_any_reader_on_one_line(reader, shown):
    assert describe(reader) == shown


def test_describe_falls_back_to_the_type_name():
    class Source:
        def __call__(self):
            return iter(())

    assert describe(Source()) == "Source"


def test_walk_goes_top_down_depth_first_to_the_plain_readers():
    inner = readers.shuffle(readers.from_sequence("ab"), seed=0)
    top = readers.compose(inner, numbers)
    assert list(walk(top)) == [top, inner, inner.parents[0], numbers]


def test_declarations_default_to_a_stage_that_keeps_its_whole_pass():
    node = Node(numbers)
    assert (node.positions, node.seed, node.unresumable, node.per_entry, node.share()) == (None, None, None, None,
                                                                                            None)
    assert readers.shard(readers.from_sequence("abc"), 1, 3).share() == Share(1, 3, False)


def test_with_parents_copies_the_stage_onto_other_parents():
    mapped = readers.map_readers(str.upper, readers.from_sequence("ab"))
    moved = mapped.with_parents(readers.from_sequence("xyz"))
    assert list(moved()) == ["X", "Y", "Z"] and list(mapped()) == ["A", "B"]
    assert type(moved) is type(mapped) and moved.func is mapped.func


def test_a_stage_is_never_falsy_even_when_empty():
    empty = readers.from_sequence([])
    assert len(empty) == 0 and bool(empty)
