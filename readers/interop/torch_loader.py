"""Collated numpy batches as torch tensors on a device, copied ahead of the training step.

``torch_loader(reader, device)`` is the last stage of a pipeline that gives
collated batches (``batching.collated(batching.batch(...))``): dicts, tuples
or single numpy arrays. Each numeric array becomes a tensor of the same dtype
(``torch.from_numpy``: no copy on the CPU); anything else (str lists, objects)
passes through unchanged. On CUDA, a background thread pins each batch and
copies it to the GPU on a side stream, ``prefetch`` batches ahead of the
consumer; the consumer's current stream waits on the copy's event before the
batch is handed over, and each tensor is ``record_stream``-ed on that stream so
the caching allocator keeps its memory until the step's kernels are done.

The pinned memory is a ring of ``prefetch + 2`` buffers per column, kept for
the pass: each batch's arrays are copied into the next free one (a buffer is
reused once the event of its last copy has completed), so no batch allocates
pinned memory. ``batching.collated(..., narrow=True)`` gives columns that the
source holds in fewer bytes (MNIST's uint8 pixels) as ``Narrowed(column,
way)``: the loader copies the narrow column and widens it on the device, in
the same dtype arithmetic as ``Narrowed.decode()`` (an IEEE division is
correctly rounded on either side), so the tensors are the same, bit for bit.

Importing this module does not import torch: ``torch_loader`` does.
"""
from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from readers.checks import check_reader
from readers.errors import BadType, BadValue
from readers.parents import iterate
from readers.passes import close_iterator
from readers.stage import Reader, Stage

__all__ = ["Narrowed", "TorchLoader", "torch_loader", "to_tensors", "widen"]

_BATCH, _END, _ERROR = object(), object(), object()  # what the feed thread hands the consumer
_NUMERIC = frozenset("biufc")  # numpy kinds torch.from_numpy takes: bool, ints, unsigned, floats, complex
# the narrow dtypes a GPU widens itself (torch's other unsigned types have few kernels), and the dtypes it widens to
_WIDENED_ON_DEVICE = frozenset(np.dtype(t) for t in (np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16,
                                                     np.float32, np.float64))


class Narrowed(NamedTuple):
    """A column in fewer bytes than the pass gives it, and how to widen it: ``batching.collated(..., narrow=True)``
    gives these for the columns its source holds narrower (``wire_columns``), and ``torch_loader`` widens them
    on the device.

    ``way`` is ``{"as": dtype}`` or ``{"as": dtype, "divide": number}``, as the
    network protocol's ``readers.network.wire.decode_column`` reads it.

    >>> n = Narrowed(np.array([0, 51, 255], np.uint8), {"as": "<f4", "divide": 255})
    >>> n.decode().dtype, n.decode().tolist()
    (dtype('float32'), [0.0, 0.20000000298023224, 1.0])
    """

    column: np.ndarray
    way: dict

    def decode(self) -> np.ndarray:
        """The column as the pass without ``narrow`` gives it."""
        from readers.network.wire import decode_column
        return decode_column(self.column, self.way)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ModuleNotFoundError("torch_loader needs PyTorch, which is not installed; install it with "
                                  "pip install torch==2.13.0 (or pip install readerkit[torch])") from None
    return torch


def _tensor(torch: Any, array: Any) -> Any:
    """One numeric numpy array (or scalar) as a CPU tensor, sharing its memory where torch can."""
    array = np.asarray(array)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    # torch cannot make a read-only tensor: a memory map's pages would fault on an in-place op, so copy
    if not array.flags.writeable or any(s < 0 for s in array.strides):
        array = np.array(array, order="C")
    return torch.from_numpy(array)


def to_tensors(batch: Any) -> Any:
    """``batch`` with every numeric numpy array (or numpy scalar) made a CPU tensor of the same dtype.

    Dicts, tuples (named ones too, such as ``batching.Padded``) and lists keep
    their shape; other values (str, bytes, object arrays) pass through;
    ``Narrowed`` columns are widened first.
    Writable arrays are shared, not copied (``torch.from_numpy``); read-only
    ones (memory maps) and negative strides are copied first.

    >>> torch = __import__("pytest").importorskip("torch")
    >>> x = np.arange(6, dtype=np.float32).reshape(3, 2)
    >>> out = to_tensors({"x": x, "y": np.array([1, 0, 1]), "name": ["a", "b", "c"]})
    >>> out["x"].dtype, tuple(out["x"].shape), out["y"].tolist(), out["name"]
    (torch.float32, (3, 2), [1, 0, 1], ['a', 'b', 'c'])
    >>> out["x"].data_ptr() == x.ctypes.data  # no copy
    True
    """
    torch = _torch()
    return _convert(torch, batch)


def _mapped(batch: Any, leaf: Any) -> Any:
    """``batch`` with ``leaf`` applied to each numpy array, numpy scalar and ``Narrowed`` column; dicts, tuples
    (named ones too) and lists keep their shape, and other values pass through."""
    if isinstance(batch, (np.ndarray, np.generic, Narrowed)):  # (before tuple: Narrowed is a named tuple)
        return leaf(batch)
    if isinstance(batch, dict):
        return type(batch)((k, _mapped(v, leaf)) for k, v in batch.items())
    if isinstance(batch, tuple):
        items = [_mapped(v, leaf) for v in batch]
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    if isinstance(batch, list):
        return [_mapped(v, leaf) for v in batch]
    return batch


def _convert(torch: Any, batch: Any) -> Any:
    def leaf(value: Any) -> Any:
        if isinstance(value, Narrowed):  # on the CPU, widened there: from_numpy then shares the wide array
            return _tensor(torch, value.decode())
        return _tensor(torch, value) if value.dtype.kind in _NUMERIC else value
    return _mapped(batch, leaf)


def _tensors(batch: Any) -> Iterator:
    """The tensors in a converted batch, depth first."""
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (tuple, list)):
        for item in batch:
            yield from _tensors(item)
    elif hasattr(batch, "record_stream"):
        yield batch


_TORCH_DTYPES: dict = {}  # numpy dtype -> torch dtype, as torch.from_numpy maps them


def _torch_dtype(torch: Any, dtype: np.dtype) -> Any:
    if dtype not in _TORCH_DTYPES:
        _TORCH_DTYPES[dtype] = torch.from_numpy(np.empty(0, dtype)).dtype
    return _TORCH_DTYPES[dtype]


def widen(torch: Any, tensor: Any, wide: Any, divide: Any = None, divisors: dict | None = None) -> Any:
    """A narrow column's tensor cast to ``wide`` (a numpy dtype) and divided by ``divide`` in it, on its device,
    as ``Narrowed.decode`` computes it in numpy: the same values, bit for bit.

    ``divisors`` caches the divisor tensors of a pass.

    >>> torch = __import__("pytest").importorskip("torch")
    >>> pixels = np.arange(256, dtype=np.uint8)
    >>> wide = widen(torch, torch.from_numpy(pixels), np.dtype("<f4"), 255)
    >>> wide.dtype, np.array_equal(wide.numpy(), Narrowed(pixels, {"as": "<f4", "divide": 255}).decode())
    (torch.float32, True)
    """
    wide = np.dtype(wide)
    dtype = _torch_dtype(torch, wide)
    if tensor.dtype != dtype:
        tensor = tensor.to(dtype)
    if divide is None:
        return tensor
    divisors = {} if divisors is None else divisors
    key = (wide, divide, str(tensor.device))
    if key not in divisors:
        # a 0-d tensor on the device, not a Python number: CUDA divides by a host scalar by multiplying by its
        # reciprocal, one ulp off for some values; by a tensor it divides, correctly rounded as numpy does
        divisors[key] = torch.from_numpy(np.asarray(wide.type(divide))).to(tensor.device)
    return tensor.div_(divisors[key])


class _Slot:
    """One batch's pinned buffers in the ring (a flat byte buffer per array, in the batch's depth-first order),
    and the event of the copies that last read them."""

    __slots__ = ("buffers", "event", "used")

    def __init__(self) -> None:
        self.buffers: list = []  # (pinned uint8 tensor, its numpy view)
        self.event, self.used = None, 0


class _Copier:
    """Host-side and copy work for one pass: tensors, pinned staging, the H2D copy on a side stream.

    On CUDA each batch goes through the next slot of a ring of ``depth``
    pinned buffers: its arrays are copied into them (one copy, the GIL
    released), copied to the GPU from there, and a ``Narrowed`` column is
    widened on the GPU. A slot is reused once the event recorded after its
    last copies has completed.
    """

    def __init__(self, torch: Any, device: Any, pin: bool, non_blocking: bool, depth: int = 2):
        self.torch, self.device, self.pin, self.non_blocking = torch, device, pin, non_blocking
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.ring = [_Slot() for _ in range(depth if self.cuda and pin else 0)]
        self.turn = 0
        self.divisors: dict = {}  # (wide numpy dtype, number, device) -> a 0-d tensor on the device, for widen

    def __call__(self, batch: Any) -> tuple[Any, Any]:
        """(the batch on the device, the event its copy records, or None on the CPU)."""
        if not self.cuda:
            return _convert(self.torch, batch), None
        cuda, slot = self.torch.cuda, None
        if self.ring:
            slot = self.ring[self.turn % len(self.ring)]
            self.turn += 1
            if slot.event is not None:
                slot.event.synchronize()  # the copies out of these buffers, a ring ago, are done
            slot.used = 0
        with cuda.device(self.device), cuda.stream(self.stream):
            batch = self._move(batch, slot)
            event = cuda.Event()
            event.record(self.stream)
        if slot is not None:
            slot.event = event
        return batch, event

    def _move(self, batch: Any, slot: _Slot | None) -> Any:
        """``batch`` with each numeric array (and ``Narrowed`` column) as a tensor on the device."""
        def leaf(value: Any) -> Any:
            if isinstance(value, Narrowed):
                way, column = value.way, np.asarray(value.column)
                wide = np.dtype(way["as"])
                if column.dtype not in _WIDENED_ON_DEVICE or wide not in _WIDENED_ON_DEVICE:
                    return self._copy(value.decode(), slot)
                return self._widen(self._copy(column, slot), wide, way.get("divide"))
            return self._copy(np.asarray(value), slot) if value.dtype.kind in _NUMERIC else value
        return _mapped(batch, leaf)

    def _copy(self, array: np.ndarray, slot: _Slot | None) -> Any:
        """One array on the device, copied through the slot's next pinned buffer (or directly, unpinned)."""
        if slot is None:
            return _tensor(self.torch, array).to(self.device, non_blocking=self.non_blocking)
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        k, nbytes = slot.used, max(array.nbytes, 1)
        slot.used += 1
        if k == len(slot.buffers):
            slot.buffers.append(None)
        if slot.buffers[k] is None or slot.buffers[k][1].nbytes < nbytes:
            pinned = self.torch.empty(nbytes, dtype=self.torch.uint8).pin_memory()
            slot.buffers[k] = (pinned, pinned.numpy())
        pinned, view = slot.buffers[k]
        np.copyto(view[:array.nbytes].view(array.dtype).reshape(array.shape), array, casting="no")
        staged = pinned[:array.nbytes].view(_torch_dtype(self.torch, array.dtype)).view(array.shape)
        return staged.to(self.device, non_blocking=self.non_blocking)

    def _widen(self, tensor: Any, wide: np.dtype, divide: Any) -> Any:
        """A narrow column on the device as ``Narrowed.decode`` gives it: cast, then divided in the wide dtype."""
        return widen(self.torch, tensor, wide, divide, self.divisors)

    def hand_over(self, batch: Any, event: Any) -> Any:
        """Make the consumer's current stream wait for the copy, and keep the memory for its work."""
        if event is not None:
            current = self.torch.cuda.current_stream(self.device)
            current.wait_event(event)
            for tensor in _tensors(batch):
                tensor.record_stream(current)
        return batch


class _Feed:
    """One pass's background thread: it reads the reader and copies each batch, at most ``depth`` ahead.

    A semaphore counts the batches read but not yet taken, so the thread never
    blocks on the queue; ``stop()`` (idempotent, from any thread) wakes it,
    joins it, and wakes a consumer waiting on the queue.
    """

    def __init__(self, source: Iterator, copier: _Copier, depth: int, name: str):
        self.source, self.copier = source, copier
        self.slots = threading.Semaphore(depth)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=f"readerkit-{name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while True:
                self.slots.acquire()
                if self.stopping.is_set():
                    return
                batch = next(self.source, _END)
                if batch is _END:
                    self.queue.put((_END, None))
                    return
                self.queue.put((_BATCH, self.copier(batch)))
        except BaseException as exc:  # the consumer raises it, with the reader's traceback
            self.queue.put((_ERROR, exc))
        finally:
            close_iterator(self.source)  # in this thread: the source's frames ran here
            self.source = None

    def take(self) -> Any:
        """The next batch, or ``_END`` when the pass ran out or was stopped; raises the reader's error."""
        kind, item = self.queue.get()
        if kind is _ERROR:
            raise item
        if kind is _END or self.stopping.is_set():
            return _END
        self.slots.release()
        return self.copier.hand_over(*item)

    def stop(self) -> None:
        with self.lock:
            if self.stopping.is_set():
                return
            self.stopping.set()
            self.slots.release()  # a thread waiting for a slot wakes and sees stopping
        # a thread inside the reader finishes that batch first
        self.thread.join()
        self.queue.put((_END, None))  # a consumer waiting in take() (close() from elsewhere) ends its pass


class TorchLoader(Stage):
    """Collated batches of a reader as tensors on a device (see ``torch_loader``)."""

    name = "torch_loader"
    positions = 1  # one batch per parent batch, in order: its cursor is the parent's

    def __init__(self, reader: Reader, device: Any, prefetch: int, pin_memory: bool, non_blocking: bool):
        super().__init__(reader)
        self.device, self.prefetch, self.pin_memory, self.non_blocking = device, prefetch, pin_memory, non_blocking
        self._feeds: weakref.WeakSet = weakref.WeakSet()

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_feeds"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _feeds=weakref.WeakSet())

    def _options(self) -> str:
        pin = "" if self.device.type == "cpu" else f", pin_memory={self.pin_memory}, non_blocking={self.non_blocking}"
        return f"device={str(self.device)!r}, prefetch={self.prefetch}{pin}"

    def identity(self) -> str:
        return "torch_loader()"  # the same data on any device

    def __len__(self) -> int:
        return len(self.parents[0])

    def __iter__(self) -> Iterator:
        return self()

    def _seek(self, pass_id: int, cursor: int) -> Iterator:
        # the parent's pass starts here, in the caller's thread, so closing this pass closes it too
        return self._pass_of(iterate(self.parents[0], pass_id, cursor))

    def _pass_of(self, source: Iterator) -> Iterator:
        copier = _Copier(_torch(), self.device, self.pin_memory, self.non_blocking, self.prefetch + 2)
        if not self.prefetch:
            for batch in source:
                yield copier.hand_over(*copier(batch))
            return
        feed = _Feed(source, copier, self.prefetch, self.name)
        self._feeds.add(feed)
        try:
            while (batch := feed.take()) is not _END:
                yield batch
        finally:
            feed.stop()

    def close(self) -> None:
        """Stop every pass under way: their threads are joined and their loops end. Idempotent; a later
        call starts a new pass.

        >>> torch = __import__("pytest").importorskip("torch")
        >>> import readers
        >>> loader = torch_loader(readers.from_sequence([np.zeros(2)] * 5), "cpu")
        >>> it = iter(loader)
        >>> _ = next(it); loader.close(); loader.close()
        >>> list(it), len(list(loader))
        ([], 5)
        """
        for feed in list(self._feeds):
            feed.stop()


def torch_loader(reader: Reader, device: Any = "cuda", *, prefetch: int = 2, pin_memory: bool | None = None,
                 non_blocking: bool = True) -> TorchLoader:
    """``reader``'s collated numpy batches as torch tensors on ``device``, made ready ``prefetch`` batches ahead.

    Each numeric array of a batch (a dict, tuple or single array, as
    ``batching.collated`` gives) becomes a tensor of the same dtype and shape,
    sharing the array's memory on the CPU; other columns pass through.
    With ``prefetch`` > 0 a background thread reads the reader and prepares
    at most ``prefetch`` batches beyond the one the consumer holds; with 0,
    all work happens in the consumer's thread.

    On CUDA the thread copies each batch into pinned memory (``pin_memory``,
    default True there) and to the GPU on a side stream (``non_blocking``
    copies), so loading, copy and compute overlap; the consumer's current
    stream waits on the copy's event, and each tensor is ``record_stream``-ed on
    it. Asking for CUDA where ``torch.cuda.is_available()`` is False raises.
    The pinned memory is a ring of ``prefetch + 2`` buffers per column, pinned
    once a pass and refilled once their last copy is done. Columns that
    ``batching.collated(..., narrow=True)`` gives as ``Narrowed`` (MNIST's
    uint8 pixels) are copied narrow and widened on the device, bit for bit
    as ``Narrowed.decode()`` widens them.

    The loader is a reader: ``for batch in loader`` (or ``loader()``) is a
    pass; ``len`` is the reader's. A pass's iterator has ``get_state()``, and
    ``loader.set_state(state)`` / ``set_pass`` resume the reader below, as
    for any stage: the state counts the batches handed to the consumer, not
    those prefetched. A pass left by ``break``, closed or garbage-collected
    stops its thread; ``close()`` stops every pass under way. The reader's
    exceptions reach the consumer with their traceback.

    >>> torch = __import__("pytest").importorskip("torch")
    >>> import readers, batching
    >>> x, y = np.arange(12, dtype=np.float32).reshape(6, 2), np.arange(6)
    >>> pipeline = batching.collated(batching.batch(readers.from_arrays(x, y), 4))
    >>> loader = torch_loader(pipeline, "cpu")
    >>> [(tuple(a.shape), a.dtype, b.tolist()) for a, b in loader]
    [((4, 2), torch.float32, [0, 1, 2, 3]), ((2, 2), torch.float32, [4, 5])]
    >>> len(loader)
    2
    >>> it = loader()
    >>> _ = next(it); it.get_state()
    {'pass': 1, 'cursor': 4, 'seed': None}
    >>> loader
    torch_loader(device='cpu', prefetch=2)
    └─ collated(pad_value=0)
       └─ batch(batch_size=4, drop_last=False)
          └─ from_arrays(6 rows: float32[2], int64)
    >>> torch_loader(pipeline, "cpu", pin_memory=True)
    Traceback (most recent call last):
    ...
    readers.errors.BadValue: torch_loader: pin_memory=True speeds up copies to a GPU, and device is 'cpu'; leave pin_memory=None

    See Also:
        readers.torch_dataset, batching.collated, readers.buffered
    """
    torch = _torch()
    check_reader(reader)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise BadValue(f"torch_loader: device must be 'cpu', 'cuda' or 'cuda:<index>' (or a torch.device), "
                       f"got {device!r}") from None
    if dev.type not in ("cpu", "cuda"):
        raise BadValue(f"torch_loader: device {str(dev)!r} is not supported; give 'cpu' or 'cuda'")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"torch_loader: device {str(dev)!r} was asked for, but torch.cuda.is_available() is False "
                           f"(torch {torch.__version__}: a CPU build, or no GPU visible); pass device='cpu', or run "
                           "on a machine with a GPU and a CUDA build of torch")
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
        raise BadValue(f"torch_loader: prefetch must be an int >= 0 (batches made ready ahead; 0: none, no "
                       f"thread), got {prefetch!r}")
    for name, value in (("pin_memory", pin_memory), ("non_blocking", non_blocking)):
        if value is not None and not isinstance(value, bool):
            raise BadType(f"torch_loader: {name} must be True or False, got {value!r}")
    if pin_memory and dev.type != "cuda":
        raise BadValue(f"torch_loader: pin_memory=True speeds up copies to a GPU, and device is {str(dev)!r}; "
                       "leave pin_memory=None")
    if non_blocking is None:
        raise BadType("torch_loader: non_blocking must be True or False, got None")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())  # the thread must copy to the consumer's GPU
    return TorchLoader(reader, dev, prefetch, dev.type == "cuda" if pin_memory is None else pin_memory, non_blocking)
