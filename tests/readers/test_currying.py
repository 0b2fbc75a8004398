"""Curried decorators (readers.currying): partial application for toolz.pipe, help, reprs and pickling."""
import inspect
import pickle
import pydoc

import pytest
import toolz

import batching
import readers
from readers.currying import Curried

SOURCE = readers.from_sequence(range(10))

# decorator, options that make it work, the name of an option it cannot do without (or None)
CURRIED = [
    (readers.shuffle, {"buf_size": 4, "seed": 0}, None),
    (readers.firstn, {"n": 3}, "n"),
    (readers.skip, {"n": 3}, "n"),
    (readers.filter_entries, {"predicate": bool}, "predicate"),
    (readers.repeat, {"times": 2}, None),
    (readers.buffered, {"size": 2}, "size"),
    (readers.prefetch, {"workers": 2}, None),
    (readers.shard, {"index": 1, "count": 3}, None),
    (readers.node_shuffle, {"seed": 0}, "seed"),
    (batching.batch, {"batch_size": 4}, "batch_size"),
    (batching.bucket_by_length, {"boundaries": [3], "batch_size": 2, "length": lambda x: x}, "boundaries"),
]
NAMES = [c[0].__name__ for c in CURRIED]


@pytest.mark.parametrize("decorator, options, required", CURRIED, ids=NAMES)
def test_curried_options_first_then_reader_equals_reader_first(decorator, options, required):
    assert list(decorator(**options)(SOURCE)()) == list(decorator(SOURCE, **options)())
    assert list(toolz.pipe(SOURCE, decorator(**options))()) == list(decorator(SOURCE, **options)())


@pytest.mark.parametrize("decorator, options, required", [c for c in CURRIED if c[2]], ids=[c[0].__name__ for c in CURRIED if c[2]])
def test_curried_reader_without_a_required_option_fails_at_once(decorator, options, required):
    with pytest.raises(TypeError, match=f"missing [12] required positional arguments?: '{required}'"):
        decorator(SOURCE)


@pytest.mark.parametrize("decorator, options, required", CURRIED, ids=NAMES)
def test_curried_partial_repr_reads_like_the_call(decorator, options, required):
    shown = repr(decorator(**options))
    assert shown.startswith(f"{decorator.__name__}(") and "0x" not in shown
    assert "0x" not in repr(decorator) and repr(decorator).startswith(f"<decorator {decorator.__name__}(")


def test_curried_partial_repr_shows_values_and_functions():
    assert repr(readers.shuffle(buf_size=10, seed=0)) == "shuffle(buf_size=10, seed=0)"
    assert repr(readers.map_readers(str.upper)) == "map_readers(str.upper)"
    assert repr(readers.xmap_readers(abs, process_num=2, buffer_size=4)) == "xmap_readers(abs, process_num=2, buffer_size=4)"
    assert repr(readers.shuffle) == "<decorator shuffle(reader, buf_size=None, *, seed=None)>"


@pytest.mark.parametrize("decorator", [c[0] for c in CURRIED] + [readers.map_readers, readers.xmap_readers,
                                                                   readers.multiprocess_reader, batching.collated],
                         ids=lambda d: d.__name__)
def test_help_shows_the_signature_and_docstring(decorator):
    text = pydoc.render_doc(decorator, renderer=pydoc.plaintext)
    first_param = next(iter(inspect.signature(decorator.func).parameters))
    assert f"{decorator.__name__}({first_param}" in text.replace("*", "")
    assert inspect.getdoc(decorator.func).splitlines()[0] in text


@pytest.mark.parametrize("decorator", [c[0] for c in CURRIED] + [readers.map_readers, readers.mix, batching.collated],
                         ids=lambda d: d.__name__)
def test_help_is_headed_with_the_decorators_own_name_not_curried(decorator):
    """Issue 27, item 9: help(readers.shuffle) was headed "Help on Curried in module readers.ops.shuffling"."""
    text = pydoc.render_doc(decorator, title="Help on %s:", renderer=pydoc.plaintext)
    assert text.splitlines()[0] == f"Help on {decorator.__name__} in module {decorator.func.__module__}:"
    assert inspect.getdoc(decorator.func).splitlines()[0] in text
    options = {c[0].__name__: c[1] for c in CURRIED}.get(decorator.__name__)
    partial = None if options is None else decorator(**options)
    assert partial is None or type(partial) is type(decorator)  # a partial application is headed alike
    assert isinstance(decorator, Curried) and type(decorator) is not Curried


def test_a_curried_lambda_keeps_the_curried_class_and_named_classes_survive_pickling():
    def scale(reader, factor):
        return lambda: (x * factor for x in reader())

    assert type(Curried(lambda reader, factor: reader)) is Curried
    twice = Curried(scale)(factor=2)
    assert type(twice).__name__ == "scale" and type(twice) is type(Curried(scale))
    again = pickle.loads(pickle.dumps(readers.shuffle(buf_size=3, seed=1)))
    assert type(again) is type(readers.shuffle) and again.reader_at == 0
    assert pickle.loads(pickle.dumps(readers.map_readers(abs))).reader_at == 1


@pytest.mark.parametrize("call", [
    lambda: readers.shuffle(SOURCE, bufsize=3),  # the reader given: the decorator runs at once
    lambda: readers.shuffle(bufsize=3),  # a partial application
    lambda: readers.shuffle(seed=0)(SOURCE, bufsize=3),  # the reader given to a partial
], ids=["direct", "curried", "partial"])
def test_a_misspelt_keyword_lists_the_options_in_a_direct_call_as_in_the_curried_form(call):
    """Issue 27, item 9: shuffle(reader, bufsize=3) said only "got an unexpected keyword argument 'bufsize'"."""
    with pytest.raises(TypeError) as caught:
        call()
    assert str(caught.value) == ("shuffle() got an unexpected keyword argument 'bufsize'; its options are reader, "
                                 "buf_size, seed")


def test_a_type_error_from_a_decorators_own_body_is_left_as_it_is():
    def picky(reader, size):
        raise TypeError(f"size must be an int, got {size!r}")

    with pytest.raises(TypeError, match=r"^size must be an int, got 'x'$"):
        Curried(picky)(SOURCE, size="x")
    with pytest.raises(TypeError, match=r"missing 1 required positional argument: 'size'$"):
        Curried(picky)(SOURCE)


def test_signature_of_a_partial_shows_what_is_left():
    sig = inspect.signature(readers.shuffle(buf_size=10))
    assert list(sig.parameters) == ["reader", "buf_size", "seed"]
    assert sig.parameters["reader"].default is inspect.Parameter.empty
    assert sig.parameters["buf_size"].default == 10


def test_curried_misspelt_option_fails_when_given_not_when_applied():
    with pytest.raises(TypeError, match=r"shuffle\(\) got an unexpected keyword argument 'bufsize'; its options "
                                        r"are reader, buf_size, seed"):
        readers.shuffle(bufsize=3)


def test_curried_reader_by_keyword_runs_at_once():
    r = readers.firstn(reader=SOURCE, n=2)
    assert isinstance(r, readers.Stage) and list(r()) == [0, 1]


def test_map_and_xmap_wait_for_the_reader_after_the_function():
    waiting = readers.map_readers(str)
    assert isinstance(waiting, Curried) and list(waiting(SOURCE)())[:2] == ["0", "1"]
    assert list(readers.xmap_readers(str, process_num=2, buffer_size=4, order=True)(SOURCE)())[:2] == ["0", "1"]


def test_curried_partials_pickle():
    partial = readers.shuffle(buf_size=3, seed=1)
    again = pickle.loads(pickle.dumps(partial))
    assert again == partial and repr(again) == repr(partial)
    assert list(again(SOURCE)()) == list(partial(SOURCE)())
    assert pickle.loads(pickle.dumps(readers.shuffle)) == readers.shuffle


def test_curried_user_decorator_waits_for_its_reader_at_the_position_given():
    def scale(factor, reader):
        """Entries times ``factor``."""
        return lambda: (x * factor for x in reader())

    times = Curried(scale, reader_at=1)
    assert list(times(3)(lambda: [1, 2])()) == [3, 6]
    assert list(times(3, lambda: [1, 2])()) == [3, 6]


def test_an_option_taken_for_the_reader_is_named_in_the_error():
    with pytest.raises(TypeError, match=r"32 was taken as the reader: to give options first and the reader later "
                                        r"\(toolz.pipe\), name them, e.g. batch\(batch_size=32\)"):
        toolz.pipe(SOURCE, batching.batch(32))


def test_what_comes_before_the_reader_may_be_given_by_name():
    square = readers.map_readers(func=lambda x: x * x)
    assert list(square(SOURCE)())[:3] == [0, 1, 4]
    assert list(readers.xmap_readers(mapper=abs, process_num=2, buffer_size=2, order=True)(SOURCE)())[:2] == [0, 1]


def test_a_list_of_readers_is_not_taken_for_an_option_given_first():
    """New-user trial of issue 13: mix([a, b]) without its seed was told to pass the readers as weights=."""
    import readers
    with pytest.raises(TypeError) as caught:
        readers.mix([readers.from_sequence("ab"), readers.from_sequence("cd")])
    assert "give seed=<int>" in str(caught.value) and "was taken as the reader" not in str(caught.value)
