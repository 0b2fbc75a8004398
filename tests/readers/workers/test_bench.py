"""bench's analysis: its figures' shape on real passes, and its verdicts on fixed figures (never timed ones)."""
import json

import pytest

import readers
from readers.workers.bench import bottleneck, measure, report

KEYS = {"stage", "measured", "mode", "workers", "entries", "seconds", "entries_per_s", "input_wait", "output_wait",
        "consumer_wait", "queue_fill", "shm_bytes", "restarts"}


def _figures(consumer_wait, input_wait, seconds=1.0, inner=()):
    """bench's figures for the verdict alone: one prefetch stage, then the reader's own."""
    stage = {"stage": "prefetch(2 processes)", "input_wait": input_wait, "output_wait": 0.05,
             "consumer_wait": consumer_wait, "queue_fill": 0.25}
    return {"reader": "mnist", "mode": "process", "step_ms": 5, "stages": [stage, *inner],
            "pipeline": {"seconds": seconds, "without_prefetch_s": 1.0}}


XMAP = {"stage": "xmap_readers(decode, process_num=2, buffer_size=4, order=True)", "input_wait": 0.97,
        "output_wait": 0.0, "consumer_wait": 0.9, "queue_fill": 0.1}


@pytest.mark.parametrize("figures, line", [
    (_figures(0.1, 0.2), "bottleneck: the consumer — it waited for data 10% of the pass, the queue was 25% full "
                         "on average; the training step is slower than the data: more workers will not help"),
    (_figures(0.1, 0.2, seconds=2.0), "bottleneck: prefetch overhead — the pipeline took 2.0x as long as the "
                                      "reader alone plus the same steps; handing entries over costs more than reading them: "
                                      "read without prefetch, try --mode thread, or prefetch whole batches (batch, then prefetch)"),
    (_figures(0.9, 0.8), "bottleneck: the reader (mnist) — workers spent 80% of their time waiting on it; "
                         "add workers (--workers) or make it faster"),
    (_figures(0.9, 0.8, inner=[XMAP]), f"bottleneck: the work under {XMAP['stage']} — workers spent 97% of their "
                                       "time waiting on it; give that stage more workers or make its work faster"),
    (_figures(0.9, 0.8, inner=[{**XMAP, "consumer_wait": 0.2}]), "bottleneck: the reader (mnist) — workers spent 80% "
                                                                 "of their time waiting on it; add workers (--workers) or make it faster"),
    (_figures(0.9, 0.1), "bottleneck: the hand-off — the consumer waited 90% of the pass, but workers spent only 10% "
                         "of their time reading and 5% sending; starting workers and moving entries dominate: try a "
                         "larger --limit, --mode thread, or prefetch whole batches (batch, then prefetch)"),
])
def test_bottleneck_follows_the_rule(figures, line):
    assert bottleneck(figures)[1] == line



@pytest.mark.parametrize("kind, figures", [
    ("consumer", _figures(0.1, 0.2)),
    ("prefetch overhead", _figures(0.1, 0.2, seconds=2.0)),
    ("reader", _figures(0.9, 0.8)),
    ("hand-off", _figures(0.9, 0.1)),
])
def test_bottleneck_names_its_kind(kind, figures):
    assert bottleneck(figures)[0] == kind


def test_bottleneck_overhead_comes_first_and_needs_a_tenth_over():
    # 10% over the reader alone is still within the rule's margin; just past it, the verdict is overhead
    assert bottleneck(_figures(0.9, 0.8, seconds=1.1))[0] == "reader"
    assert bottleneck(_figures(0.9, 0.8, seconds=1.11))[0] == "prefetch overhead"


def test_bottleneck_bound_is_half_the_time():
    assert bottleneck(_figures(0.49, 0.8))[0] == "consumer"
    assert bottleneck(_figures(0.5, 0.5))[0] == "reader"
    assert bottleneck(_figures(0.5, 0.49))[0] == "hand-off"


def test_bottleneck_suggests_threads_for_processes_and_fewer_workers_for_threads():
    assert "--mode thread" in bottleneck(_figures(0.9, 0.1))[1]
    assert "fewer workers" in bottleneck({**_figures(0.9, 0.1), "mode": "thread"})[1]


def test_measure_counts_every_entry_and_batch_of_a_pass():
    f = measure("numbers", readers.from_sequence(range(70)), workers=2, mode="thread", batch_size=16, limit=64)
    assert f["pipeline"]["entries"] == f["alone"]["entries"] == 64
    assert f["pipeline"]["batches"] == 4
    assert [s["stage"] for s in f["stages"]] == ["prefetch(2 threads)"]
    assert set(f["stages"][0]) == KEYS and f["stages"][0]["entries"] == 64
    json.dumps(f)  # the CLI writes it as JSON


def test_measure_reports_the_readers_own_prefetch_stages_measured_alone():
    inner = readers.buffered(readers.from_sequence(range(40)), 8)
    f = measure("buffered", inner, mode="thread", batch_size=10)
    assert [(s["stage"], s["measured"]) for s in f["stages"]] == [
        ("prefetch(2 threads)", "pipeline"), ("buffered(size=8)", "reader alone")]
    assert f["stages"][1]["entries"] == 40


def test_report_marks_the_readers_own_stages_and_the_steps():
    f = measure("buffered", readers.buffered(readers.from_sequence(range(8)), 2), mode="thread", batch_size=4,
                step_ms=1)
    lines = report(f)
    assert lines[1].startswith("pipeline: 8 entries in 2 batches, ") and lines[1].endswith("the reader alone plus the steps)")
    assert lines[3].startswith("stage buffered(size=2) (the reader's own, measured alone): ")
