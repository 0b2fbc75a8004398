"""examples/pipeline.ipynb runs in a real Jupyter kernel, shows what it promises, and leaves no worker behind.

A kernel always has other threads, so readerkit's process workers start there
by spawn: these tests are where the notebook way of using readerkit is checked
for real (an ipykernel kernel of this same Python, driven by nbclient), from
the kernel's start to its shutdown or its death by SIGKILL.
"""
import json
import os
import pathlib
import re
import signal
import sys

import pytest

from tests.conftest import HANG, wait_until
from tests.helpers.paths import SHARED_DATA
from tests.helpers.processes import PROC, descendants, identity, kill, still_running

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402 (installed with nbclient)
from jupyter_client.manager import AsyncKernelManager  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "pipeline.ipynb"
MNIST = SHARED_DATA / "mnist"  # where the notebook looks, run from examples/
CELL_LIMIT = 45  # seconds a cell may run: under the suite's 60 s watchdog, far above what a cell takes

needs_mnist = pytest.mark.skipif(not MNIST.is_dir(), reason=f"the MNIST files are not in {MNIST}")

# Run in the kernel after the notebook's cells: who the kernel is, and the workers it keeps.
PROBE = ("import json as _json, multiprocessing as _mp, os as _os, sys as _sys\n"
         "print(_json.dumps({'pid': _os.getpid(), 'executable': _sys.executable,\n"
         "                   'workers': sorted(p.pid for p in _mp.active_children())}))")


def notebook_client():
    """A client for the notebook, on a kernel of this Python (never a kernelspec found elsewhere), run from examples/.

    ``kernel_dirs=[]`` leaves only ipykernel's native spec, whose command is
    ``sys.executable -m ipykernel_launcher``: a user's own ``python3`` kernel
    cannot stand in for it.
    """
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    km = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[]))
    assert km.ip == "127.0.0.1"  # the kernel's channels listen on the loopback only
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, km=km, timeout=CELL_LIMIT, startup_timeout=30,
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    return nb, client


def run_extra(client, source: str):
    """Run ``source`` in the kernel as a cell added at the notebook's end (nbclient stores each cell it runs)."""
    extra = nbformat.v4.new_code_cell(source)
    client.nb.cells.append(extra)
    return client.execute_cell(extra, len(client.nb.cells) - 1)


def probe(client) -> dict:
    """Run PROBE in the kernel: its pid, executable and worker pids."""
    return json.loads(text_of(run_extra(client, PROBE)))


def text_of(cell) -> str:
    """What a cell showed: its printed text and its result's text, in order."""
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif "data" in output:
            parts.append(output.data.get("text/plain", "") + "\n")
    return "".join(parts)


def cell(nb, cell_id: str):
    """The notebook's cell of id ``cell_id`` (the ids are stable names: the tests find cells by them)."""
    found = [c for c in nb.cells if c.get("id") == cell_id]
    assert len(found) == 1, f"the notebook has {len(found)} cells of id {cell_id!r}, not one"
    return found[0]


def kept_workers(kernel: dict) -> tuple[list, list]:
    """The kernel's processes, and among them its two persistent workers, checked to be running."""
    processes = descendants(kernel["pid"])
    workers = [p for p in processes if p[0] in kernel["workers"]]
    assert len(kernel["workers"]) == 2 and still_running(workers) == kernel["workers"], (kernel, processes)
    return processes, workers


def test_notebook_is_stored_valid_and_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)  # small, diffable
    assert nb.metadata.kernelspec.name == "python3"


@needs_mnist
def test_notebook_composes_previews_prefetches_in_persistent_workers_and_trains_in_a_real_kernel():
    nb, client = notebook_client()
    processes: list[tuple[int, str]] = []
    try:
        with client.setup_kernel(cleanup_kc=True):
            for index, code in enumerate(list(nb.cells)):
                if code.cell_type == "code":
                    client.execute_cell(code, index)
            kernel = probe(client)
            if PROC:
                processes, workers = kept_workers(kernel)
                processes.append(identity(kernel["pid"]))
                client.kc.shutdown()  # what Jupyter's "Shut Down Kernel" sends first
                wait_until(lambda: not still_running(workers), HANG,
                           lambda: f"the persistent workers to stop at the kernel's shutdown request; "
                                   f"still running: {still_running(workers)}")
        # Leaving the block shuts the kernel down as Jupyter does: a shutdown request, then SIGTERM to its
        # process group at half of shutdown_wait_time (5 s), SIGKILL at its end. Left alone, ipykernel 7
        # would exit only after about 29 s: it waits for every child of its process group to be gone, and
        # the multiprocessing resource tracker, which every spawn starts, ignores SIGTERM, then stays a
        # zombie that nobody reaps once SIGKILL ends it.
        if PROC:
            wait_until(lambda: not still_running(processes), HANG,
                       lambda: f"the kernel and its processes to end; still running: {still_running(processes)}")
    finally:
        kill(processes)  # what a failed test left running: one failure must not leak into the next tests

    # the kernel is this Python, so the notebook ran against this checkout's readerkit
    assert os.path.realpath(kernel["executable"]) == os.path.realpath(sys.executable)
    assert text_of(cell(nb, "source")) == "60000\n"
    assert text_of(cell(nb, "pipeline")).startswith(
        "shuffle(buf_size=None (global), seed=0)\n└─ firstn(n=6000)\n   └─ mnist('train'")
    shown = text_of(cell(nb, "help"))
    assert shown.startswith("Help on ") and "prefetch(reader" in shown and "persistent" in shown, shown
    preview = text_of(cell(nb, "preview"))
    assert len(re.findall(r"^image \(784,\) float32 in \[0\.0, 1\.0\]  label \d$", preview, flags=re.M)) == 3, preview

    crossing = text_of(cell(nb, "cross"))
    assert "threads, a cell's function: [0, 2, 4, 6, 8]\n" in crossing
    assert "processes, an importable function: [0, 2, 4, 6, 8]\n" in crossing
    assert re.search(r"^processes, a cell's function: TypeError: .*uses double from this interactive session", crossing,
                     flags=re.M), crossing  # refused before any process starts

    assert text_of(cell(nb, "loader")).startswith("prefetch(2 processes, persistent)\n└─ shuffle(")
    passes = text_of(cell(nb, "passes"))
    found = re.findall(r"^pass (\d): (\d+) entries in \d+\.\d\d s, labels (\[[\d, ]+\]) \.\.\., label sum (\d+)$",
                       passes, flags=re.M)
    assert [(p, n) for p, n, _, _ in found] == [("0", "6000"), ("1", "6000"), ("2", "6000")], passes
    assert len({total for *_, total in found}) == 1, passes  # the same entries every pass
    assert len({labels for _, _, labels, _ in found}) == 3, passes  # each pass in an order of its own
    assert "workers kept: ['readerkit-prefetch-0', 'readerkit-prefetch-1']\n" in passes
    assert text_of(cell(nb, "same-order")) == "passes 0-2 in the same order as without workers: True\n"

    trained = text_of(cell(nb, "train"))
    pass_lines = r"^pass \d: train loss \d\.\d{4}  train accuracy \d+\.\d\d%  test accuracy \d+\.\d\d%$"
    assert len(re.findall(pass_lines, trained, flags=re.M)) == 2, trained
    accuracy = re.findall(r"^final test accuracy: (\d+\.\d\d)%$", trained, flags=re.M)
    assert len(accuracy) == 1 and float(accuracy[0]) > 80, trained  # 90% here: 6,000 samples, 2 passes
    assert trained.endswith("served by the same worker processes: True\n"), trained


@needs_mnist
@pytest.mark.skipif(not PROC, reason="finding a kernel's worker processes reads Linux's /proc")
@pytest.mark.parametrize("moment", ["between passes", "mid-pass"])
def test_notebook_workers_exit_by_themselves_when_the_kernel_is_killed(moment):
    nb, client = notebook_client()
    processes: list[tuple[int, str]] = []
    try:
        with client.setup_kernel(cleanup_kc=True):
            last = nb.cells.index(cell(nb, "passes"))
            for index, code in enumerate(nb.cells[:last + 1]):
                if code.cell_type == "code":
                    client.execute_cell(code, index)
            if moment == "mid-pass":  # a pass left open: its workers are busy, or blocked on a full queue
                run_extra(client, "entries = loader()\nfirst = next(entries)")
            kernel = probe(client)
            processes, _ = kept_workers(kernel)
            os.kill(kernel["pid"], signal.SIGKILL)  # the kernel alone: the workers must notice by themselves
            wait_until(lambda: not still_running(processes), HANG,
                       lambda: f"the killed kernel's processes to end; still running: {still_running(processes)}")
    finally:
        kill(processes)  # what a failed test left running: one failure must not leak into the next tests
