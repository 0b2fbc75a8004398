"""readers.interop.torch_loader: collated numpy batches as tensors on a device, prefetched in a thread."""
import gc
import pickle
import threading

import numpy as np
import pytest

import batching
import readers
from readers.interop.torch_loader import (
    Narrowed,
    TorchLoader,
    to_tensors,
    torch_loader,
    widen,
)
from readers.sources import mnist
from readers.sources.idx import write_idx
from tests.conftest import HANG, finishes, wait_for, wait_until, worker_threads
from tests.helpers.threads import running_in

torch = pytest.importorskip("torch")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

X = np.arange(70, dtype=np.float32).reshape(35, 2)
Y = (np.arange(35) % 3).astype(np.int64)
MASK = np.arange(35) % 2 == 0


def tuples():
    return batching.collated(batching.batch(readers.from_arrays(X, Y, MASK), 8))


def dicts():
    return readers.map_readers(lambda b: {"x": b[0], "y": b[1], "mask": b[2], "name": ["n"] * len(b[1])}, tuples())


def singles():
    return batching.collated(batching.batch(readers.from_arrays(X), 8))


KINDS = {"tuple": tuples, "dict": dicts, "single": singles}


@pytest.fixture
def mnist_dir(tmp_path):
    """An MNIST-format training split of 300 images holding every pixel value 0..255."""
    images = (np.arange(300 * 784) % 256).astype(np.uint8).reshape(300, 28, 28)
    write_idx(str(tmp_path / "train-images-idx3-ubyte"), images)
    write_idx(str(tmp_path / "train-labels-idx1-ubyte"), (np.arange(300) % 10).astype(np.uint8))
    return str(tmp_path)


def mnist_batches(folder, batch_size, narrow):
    return batching.collated(batching.batch(readers.shuffle(mnist.train(folder, download=False), seed=1),
                                            batch_size), narrow=narrow)


def assert_bitwise_equal(tensor, array):
    assert tensor.dtype == torch.from_numpy(array).dtype and tuple(tensor.shape) == array.shape
    got = tensor.cpu().numpy()
    assert got.tobytes() == np.ascontiguousarray(array).tobytes()


def assert_batch_equal(tensors, arrays):
    if isinstance(arrays, dict):
        assert type(tensors) is dict and list(tensors) == list(arrays)
        for key in arrays:
            assert_batch_equal(tensors[key], arrays[key])
    elif isinstance(arrays, tuple):
        assert type(tensors) is tuple and len(tensors) == len(arrays)
        for t, a in zip(tensors, arrays):
            assert_batch_equal(t, a)
    elif isinstance(arrays, np.ndarray):
        assert isinstance(tensors, torch.Tensor)
        assert tensors.dtype == torch.from_numpy(arrays).dtype and tuple(tensors.shape) == arrays.shape
        np.testing.assert_array_equal(tensors.cpu().numpy(), arrays)
    else:
        assert tensors == arrays


@pytest.mark.parametrize("prefetch", [0, 1, 2, 5])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_torch_loader_gives_the_numpy_batches_as_tensors(kind, prefetch, no_leaks):
    expected = list(KINDS[kind]()())
    loader = torch_loader(KINDS[kind](), "cpu", prefetch=prefetch)
    for _ in range(2):  # passes repeat
        got = list(loader)
        assert len(got) == len(expected) == len(loader) == 5
        for t, a in zip(got, expected):
            assert_batch_equal(t, a)


def test_to_tensors_shares_writable_arrays_and_copies_read_only_ones():
    x = np.arange(6, dtype=np.int16)
    frozen = np.arange(4.0)
    frozen.flags.writeable = False
    out = to_tensors((x, frozen, x[::-1], np.float32(2.5), np.array(["a"]), "text"))
    assert out[0].data_ptr() == x.ctypes.data and out[0].dtype == torch.int16
    assert out[1].data_ptr() != frozen.ctypes.data and out[1].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert out[2].tolist() == [5, 4, 3, 2, 1, 0]
    assert out[3].dtype == torch.float32 and out[3].item() == 2.5
    assert out[4].tolist() == ["a"] and out[5] == "text"


def test_torch_loader_keeps_named_tuples():
    batch = batching.collate([[1, 2, 3], [4]])
    out = to_tensors(batch)
    assert type(out) is batching.Padded
    assert out.data.tolist() == [[1, 2, 3], [4, 0, 0]] and out.lengths.tolist() == [3, 1]


def test_torch_loader_is_zero_copy_on_the_cpu():
    arrays = [np.full((4, 3), i, dtype=np.float64) for i in range(3)]
    got = list(torch_loader(readers.from_sequence(arrays), "cpu"))
    assert [t.data_ptr() for t in got] == [a.ctypes.data for a in arrays]


@pytest.mark.parametrize("prefetch", [1, 3])
def test_torch_loader_break_leaves_no_thread(prefetch, no_leaks):
    loader = torch_loader(tuples(), "cpu", prefetch=prefetch)
    for i, _ in enumerate(loader):
        assert any(name.startswith("readerkit-torch_loader") for name in worker_threads())
        if i == 1:
            break
    wait_until(lambda: not worker_threads(), HANG, lambda: f"threads to end: {worker_threads()}")


def test_torch_loader_garbage_collected_pass_and_loader_leave_no_thread(no_leaks):
    loader = torch_loader(tuples(), "cpu")
    it = loader()
    next(it)
    del it, loader
    gc.collect()
    assert worker_threads() == []


def test_torch_loader_close_stops_passes_and_is_idempotent(no_leaks):
    loader = torch_loader(tuples(), "cpu")
    it = iter(loader)
    next(it)
    loader.close()
    assert worker_threads() == []
    assert list(it) == []
    loader.close()
    assert len(list(loader)) == 5  # a later pass starts afresh


def test_torch_loader_close_from_another_thread_ends_a_waiting_consumer(no_leaks):
    release = threading.Event()

    def slow():
        yield np.zeros(2)
        release.wait(HANG)  # the consumer waits in take() for this one
        yield np.zeros(2)

    def consumer_waits() -> bool:  # the thread of finishes(), below, waits in take() for the next batch
        return any(t.name == "test-finishes" and running_in(t, "readers/interop/torch_loader.py", "take")
                   for t in threading.enumerate())

    def close_once_it_waits() -> None:
        if not wait_for(consumer_waits, HANG):
            late.append(f"the consumer did not wait for its next batch within {HANG} s")  # closed all the same
        release.set()
        loader.close()

    loader, late = torch_loader(slow, "cpu", prefetch=1), []
    it = loader()
    next(it)
    closer = threading.Thread(target=close_once_it_waits, name="test-closer")
    closer.start()
    rest = finishes(lambda: list(it), "a pass whose loader was closed")
    closer.join()
    assert len(rest) <= 1 and not late, late


def test_torch_loader_raises_the_readers_exception_with_its_traceback(no_leaks):
    def broken():
        yield np.zeros(2)
        raise ValueError("bad row 2")

    with pytest.raises(ValueError, match="bad row 2") as info:
        list(torch_loader(broken, "cpu"))
    assert any(entry.name == "broken" for entry in info.traceback)


def test_torch_loader_prefetches_at_most_prefetch_batches_ahead(no_leaks):
    read = []

    def counted():
        for i in range(20):
            read.append(i)
            yield np.full(2, i)

    loader = torch_loader(counted, "cpu", prefetch=3)
    it = loader()
    first = next(it)
    wait_until(lambda: len(read) == 4, HANG, lambda: f"the thread to read 1 + 3 batches; read {read}")
    # it cannot read a fifth until the consumer takes one: a bounded wait that fails only if it did
    assert not finishes_within(lambda: len(read) > 4)
    assert first.tolist() == [0, 0]
    next(it)
    wait_until(lambda: len(read) == 5, HANG, "the thread to read one more")
    it.close()


def finishes_within(predicate, seconds=0.2):
    done = threading.Event()
    done.wait(seconds)
    return predicate()


def test_torch_loader_state_passes_through_to_the_reader():
    pipeline = batching.collated(batching.batch(readers.shuffle(readers.from_arrays(X, Y), seed=3), 8))
    loader = torch_loader(pipeline, "cpu")
    it = loader()
    head = [next(it), next(it)]
    state = it.get_state()
    assert state == {"pass": 0, "cursor": 16, "seed": 3}
    it.close()
    resumed = torch_loader(batching.collated(batching.batch(readers.shuffle(readers.from_arrays(X, Y), seed=3), 8)),
                           "cpu")
    resumed.set_state(state)
    ids = [int(v) for x, _ in head + list(resumed) for v in x[:, 0] // 2]
    assert ids == [int(v) for x, _ in pipeline() for v in x[:, 0] // 2]
    assert sorted(ids) == list(range(35))


def test_torch_loader_len_repr_and_pickle():
    loader = torch_loader(tuples(), "cpu", prefetch=1)
    assert len(loader) == 5
    assert repr(loader).splitlines()[0] == "torch_loader(device='cpu', prefetch=1)"
    copy = pickle.loads(pickle.dumps(loader))
    assert isinstance(copy, TorchLoader) and len(list(copy)) == 5
    with pytest.raises(TypeError):
        len(torch_loader(lambda: iter([np.zeros(1)]), "cpu"))


@pytest.mark.parametrize("kwargs, error, match", [
    ({"device": "tpu"}, ValueError, "device must be"),
    ({"device": "cpu", "prefetch": -1}, ValueError, "prefetch must be an int >= 0"),
    ({"device": "cpu", "prefetch": 1.5}, ValueError, "prefetch must be an int >= 0"),
    ({"device": "cpu", "pin_memory": True}, ValueError, "leave pin_memory=None"),
    ({"device": "cpu", "non_blocking": "yes"}, TypeError, "non_blocking must be True or False"),
])
def test_torch_loader_refuses_bad_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        torch_loader(tuples(), **kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without CUDA")
def test_torch_loader_says_what_to_do_when_cuda_is_missing():
    with pytest.raises(RuntimeError, match="torch.cuda.is_available.. is False.*pass device='cpu'"):
        torch_loader(tuples())


# -- CUDA ---------------------------------------------------------------------------------

@cuda
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("prefetch", [0, 2])
def test_torch_loader_cuda_values_equal_the_cpu_ones(kind, prefetch, no_leaks):
    expected = list(KINDS[kind]()())  # the numpy batches (assert_batch_equal copies the tensors back to compare)
    on_gpu = list(torch_loader(KINDS[kind](), "cuda", prefetch=prefetch))
    torch.cuda.synchronize()
    for g, a in zip(on_gpu, expected, strict=True):
        for tensor in (t for t in (g.values() if isinstance(g, dict) else g if isinstance(g, tuple) else [g])
                       if isinstance(t, torch.Tensor)):
            assert tensor.is_cuda
        assert_batch_equal(g, a)


@cuda
def test_torch_loader_cuda_pins_and_copies_non_blocking_on_a_side_stream(monkeypatch, no_leaks):
    seen = []
    real_to, real_pin = torch.Tensor.to, torch.Tensor.pin_memory

    def to(self, *args, **kwargs):
        seen.append(("to", self.is_pinned(), kwargs.get("non_blocking"), torch.cuda.current_stream()))
        return real_to(self, *args, **kwargs)

    def pin(self, *args, **kwargs):
        seen.append(("pin", threading.current_thread().name))
        return real_pin(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    main = torch.cuda.current_stream()
    got = list(torch_loader(tuples(), "cuda"))
    torch.cuda.synchronize()
    monkeypatch.undo()
    copies = [s for s in seen if s[0] == "to"]
    assert len(copies) == 3 * len(got)
    assert all(pinned and blocking is True and stream != main for _, pinned, blocking, stream in copies)
    assert all(name.startswith("readerkit-torch_loader") for kind, name in (s for s in seen if s[0] == "pin"))


@cuda
def test_torch_loader_cuda_prefetch_depth_is_honoured(no_leaks):
    read = []

    def counted():
        for i in range(10):
            read.append(i)
            yield np.full((256, 256), i, dtype=np.float32)

    it = torch_loader(counted, "cuda", prefetch=2)()
    first = next(it)
    wait_until(lambda: len(read) == 3, HANG, lambda: f"the thread to read 1 + 2 batches; read {read}")
    assert not finishes_within(lambda: len(read) > 3)
    assert float(first.sum()) == 0.0
    rest = list(it)
    assert [float(t[0, 0]) for t in rest] == list(range(1, 10))


class FakeCuda:
    """torch.cuda's stream API, recorded, for checking the hand-over protocol on a machine without a GPU.

    "Pinned" memory is CPU memory that ``pin_memory`` made (tracked by storage); a copy to the "device" is a
    clone marked ``is_pinned_fake = "on-device"``; a cast to a dtype there stays on the device."""

    def __init__(self):
        self.log, self.local, self.default, self.pinned = [], threading.local(), "default", []

    def current(self, device=None):
        return getattr(self.local, "stream", self.default)

    def is_pinned(self, tensor):
        return any(tensor.untyped_storage().data_ptr() == p.untyped_storage().data_ptr() for p in self.pinned)

    def stream_context(self, stream):
        fake = self

        class Context:
            def __enter__(self):
                self.outer = fake.current()
                fake.local.stream = stream

            def __exit__(self, *exc):
                fake.local.stream = self.outer

        return Context()

    def install(self, monkeypatch):
        fake, count, real_to = self, iter(range(10**6)), torch.Tensor.to

        class Stream:
            def __init__(self, device=None):
                self.name = f"side{next(count)}"

            def __repr__(self):
                return self.name

        class Event:
            def record(self, stream):
                self.name = f"event{next(count)}"
                fake.log.append(("record", self.name, stream))

            def synchronize(self):
                fake.log.append(("sync", self.name))

        def wait_event(event):
            fake.log.append(("wait", event.name, fake.current()))

        def to(tensor, device, non_blocking=False):
            if isinstance(device, torch.dtype):  # a cast where the tensor is
                moved = real_to(tensor, device)
                moved.is_pinned_fake = tensor.is_pinned_fake
                return moved
            moved = tensor.clone()
            fake.log.append(("copy", fake.is_pinned(tensor), non_blocking, fake.current(), tensor.dtype))
            moved.is_pinned_fake = "on-device"
            return moved

        def pin(tensor):
            pinned = tensor.clone()
            pinned.is_pinned_fake = True
            fake.pinned.append(pinned)  # kept alive: its storage is not reused by another tensor
            fake.log.append(("pin", pinned.numel()))
            return pinned

        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "stream", self.stream_context)
        monkeypatch.setattr(torch.cuda, "device", lambda device: self.stream_context(self.current()))
        monkeypatch.setattr(torch.cuda, "current_stream",
                            lambda device=None: type("Current", (), {"wait_event": staticmethod(wait_event),
                                                                     "__repr__": lambda s: fake.current()})())
        monkeypatch.setattr(torch.Tensor, "to", to)
        monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
        monkeypatch.setattr(torch.Tensor, "record_stream",
                            lambda tensor, stream: fake.log.append(("keep", tensor.is_pinned_fake, repr(stream))))
        monkeypatch.setattr(torch.Tensor, "is_pinned_fake", False, raising=False)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_torch_loader_cuda_protocol_with_a_recorded_stream_api(monkeypatch, prefetch, no_leaks):
    """The CUDA path's order of calls, without a GPU: pin, copy on the side stream, record an event there;
    the consumer's stream waits on it, then each tensor is kept for the consumer's stream."""
    fake = FakeCuda()
    fake.install(monkeypatch)
    loader = torch_loader(tuples(), "cuda", prefetch=prefetch)
    assert repr(loader).splitlines()[0] == ("torch_loader(device='cuda:0', prefetch=%d, pin_memory=True, "
                                            "non_blocking=True)" % prefetch)
    handed = []
    for batch in loader:
        handed.append(len(fake.log))
        assert all(t.is_pinned_fake == "on-device" for t in batch)
    log = fake.log
    assert len(handed) == 5
    for end in handed:  # before each hand-over: the batch's wait, and a keep per tensor, on the default stream
        waits = [i for i, e in enumerate(log[:end]) if e[0] == "wait"]
        event = log[waits[-1]][1]
        assert log[waits[-1]][2] == "default"
        assert [e for e in log[waits[-1] + 1:end] if e[0] not in ("copy", "record", "pin", "sync")] == [
            ("keep", "on-device", "default")] * 3
        recorded = next(i for i, e in enumerate(log) if e[:2] == ("record", event))
        assert recorded < waits[-1] and log[recorded][2].name.startswith("side")
        # (the consumer's keeps may come in between: the copies run in the loader's thread)
        assert [e[:4] for e in log[:recorded] if e[0] == "copy"][-3:] == [("copy", True, True, log[recorded][2])] * 3
    assert sum(e[0] == "wait" for e in log) == 5


# -- issue 32: pinned buffers reused, narrowed columns widened on the device ------------------


@pytest.mark.parametrize("wide, divide", [("<f4", 255), ("<f8", 255), ("<f4", 7), ("<i8", None), ("<f4", None)])
def test_widen_gives_numpys_decode_bit_for_bit(wide, divide):
    """Issue 32: the loader widens narrowed columns in torch; the values must be numpy's, bit for bit."""
    pixels = np.arange(256, dtype=np.uint8).reshape(16, 16)
    way = {"as": wide} if divide is None else {"as": wide, "divide": divide}
    assert_bitwise_equal(widen(torch, torch.from_numpy(pixels.copy()), np.dtype(wide), divide),
                         Narrowed(pixels, way).decode())


def test_widen_divides_rather_than_multiplying_by_the_reciprocal():
    """What the test above guards: x * (1 / 255) in float32 is one ulp off numpy's x / 255 for some pixels."""
    pixels = np.arange(256, dtype=np.uint8)
    exact = np.divide(pixels, np.float32(255), dtype=np.float32)
    assert not np.array_equal(pixels.astype(np.float32) * (np.float32(1) / np.float32(255)), exact)
    assert widen(torch, torch.from_numpy(pixels), np.dtype("<f4"), 255).numpy().tobytes() == exact.tobytes()


@pytest.mark.parametrize("device", ["cpu", "fake-cuda"])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_torch_loader_narrowed_columns_give_the_plain_tensors(mnist_dir, monkeypatch, device, prefetch, no_leaks):
    """Issue 32: with collated(narrow=True) the loader copies the uint8 pixels and widens them where they
    land; the tensors are those of the plain pipeline, bit for bit."""
    fake = None
    if device == "fake-cuda":
        fake = FakeCuda()
        fake.install(monkeypatch)
        device = "cuda"
    expected = list(mnist_batches(mnist_dir, 64, narrow=False)())
    got = list(torch_loader(mnist_batches(mnist_dir, 64, narrow=True), device, prefetch=prefetch))
    assert len(got) == len(expected) == 5
    for (x, y), (tx, ty) in zip(expected, got, strict=True):
        assert_bitwise_equal(tx, x)
        assert_bitwise_equal(ty, y)
    if fake is not None:
        copies = [(pinned, blocking, dtype) for kind, pinned, blocking, _, dtype in
                  (e for e in fake.log if e[0] == "copy")]
        # what travels: the uint8 pixels and labels of each batch, pinned, and the divisor 255, once
        assert [c for c in copies if c[0]] == [(True, True, torch.uint8)] * 10
        assert [c for c in copies if not c[0]] == [(False, False, torch.float32)]
        assert all(t.is_pinned_fake == "on-device" for t in (b for pair in got for b in pair))


@pytest.mark.parametrize("prefetch", [0, 1, 2])
def test_torch_loader_cuda_pins_a_ring_of_buffers_and_reuses_each_after_its_copies(monkeypatch, prefetch, no_leaks):
    """Issue 32: pinned memory was allocated and filled per batch (pin_memory() of each array); now a ring of
    prefetch + 2 slots is pinned once, and a slot is refilled only after the event of its last copies."""
    fake = FakeCuda()
    fake.install(monkeypatch)
    pipeline = batching.collated(batching.batch(readers.from_arrays(X, Y, MASK), 2))  # 18 batches
    expected = list(pipeline())
    got = list(torch_loader(pipeline, "cuda", prefetch=prefetch))
    for t, a in zip(got, expected, strict=True):
        assert_batch_equal(t, a)
    depth, log = prefetch + 2, fake.log
    assert sum(e[0] == "pin" for e in log) == 3 * depth  # three columns, one buffer each per slot
    records = [e[1] for e in log if e[0] == "record"]
    assert len(records) == len(got) == 18
    syncs = [i for i, e in enumerate(log) if e[0] == "sync"]
    assert [log[i][1] for i in syncs] == records[:len(got) - depth]  # batch k waits for batch k - depth's copies
    for n, i in enumerate(syncs):  # ... before it copies anything into that slot
        copies_before = sum(e[0] == "copy" for e in log[:i])
        assert copies_before == 3 * (n + depth)


@cuda
@pytest.mark.parametrize("prefetch", [0, 2])
def test_torch_loader_cuda_narrowed_columns_equal_the_plain_ones_bit_for_bit(mnist_dir, prefetch, no_leaks):
    expected = list(mnist_batches(mnist_dir, 64, narrow=False)())
    got = list(torch_loader(mnist_batches(mnist_dir, 64, narrow=True), "cuda", prefetch=prefetch))
    torch.cuda.synchronize()
    assert len(got) == len(expected) == 5
    for (x, y), (tx, ty) in zip(expected, got, strict=True):
        assert tx.is_cuda and ty.is_cuda
        assert_bitwise_equal(tx, x)
        assert_bitwise_equal(ty, y)


@cuda
def test_torch_loader_cuda_widen_on_the_gpu_divides_every_pixel_as_numpy_does():
    pixels = np.arange(256, dtype=np.uint8)
    wide = widen(torch, torch.from_numpy(pixels).cuda(), np.dtype("<f4"), 255)
    assert wide.is_cuda
    assert_bitwise_equal(wide, np.divide(pixels, np.float32(255), dtype=np.float32))


@cuda
def test_torch_loader_cuda_ring_buffers_hold_each_batch_until_its_copy_is_done(no_leaks):
    """Issue 32: the values of every batch survive the reuse of a ring of 3 pinned slots, while the consumer's
    stream is kept busy."""
    n, rows = 40, 2048
    data = np.repeat(np.arange(n, dtype=np.float32), rows)[:, None] * np.ones((1, 256), np.float32)
    pipeline = batching.collated(batching.batch(readers.from_arrays(data), rows))
    sums = []
    busy = torch.randn(2048, 2048, device="cuda")
    for batch in torch_loader(pipeline, "cuda", prefetch=1):
        for _ in range(3):
            busy = torch.tanh(busy @ busy)  # the consumer's stream is busy while the loader copies ahead
        sums.append(batch[:, 0].unique())
    torch.cuda.synchronize()
    assert [s.tolist() for s in sums] == [[float(i)] for i in range(n)]
