"""Progress of long work (issue 27, item 10): entries/s and the ETA, a bar on a terminal, elsewhere a line through
the ``readerkit`` logger every N seconds, for train, tokenize and pipeline run."""
import functools
import logging

import pytest
from click.testing import CliRunner

import cli
from tests.helpers.continual_data import fake_mnist
from train.commands.console import Progress
from train.commands.progress import Meter, duration
from train.events import BeginPass, EndIteration, EndPass


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def records(caplog):
    caplog.set_level(logging.INFO, logger="readerkit")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "readerkit"]


def test_meter_off_a_terminal_logs_a_line_every_n_seconds_with_the_rate_and_eta(records):
    clock = FakeClock()
    meter = Meter("work", 100, clock=clock, every=30, tty=False)
    for _ in range(10):  # 10 entries every 10 s: a line at 30, 60 and 90 s
        clock.now += 10
        meter.update(10)
    meter.close()
    assert records() == ["work: 30/100 entries (30%), 1 entries/s, ETA 1:10",
                         "work: 60/100 entries (60%), 1 entries/s, ETA 0:40",
                         "work: 90/100 entries (90%), 1 entries/s, ETA 0:10"]


def test_meter_without_a_total_logs_the_count_and_rate_and_a_restart_keeps_the_cadence(records):
    clock = FakeClock()
    meter = Meter("stream", clock=clock, every=30, tty=False, unit="steps", rate_unit="entries")
    clock.now = 20
    meter.update(4, entries=128)
    meter.restart("stream again")  # 20 s after the last line: none yet
    clock.now = 31
    meter.update(1, entries=32)
    assert records() == ["stream again: 1 steps, 3 entries/s"]


def test_meter_on_a_terminal_draws_a_bar_with_the_rate_and_eta_and_ends_its_line(capsys, records):
    clock = FakeClock()
    meter = Meter("pass 0", 4, unit="batches", rate_unit="entries", clock=clock, tty=True)
    clock.now = 2.0
    meter.update(1, entries=100)
    meter.close()
    err = capsys.readouterr().err
    bar = "pass 0  [######------------------]  1/4 batches  50 entries/s  ETA 0:06"
    assert err == f"\r{bar}\r{bar}\n" and records() == []  # drawn, then drawn as it ended, and its line ended


def test_duration_reads_as_a_clock():
    assert [duration(s) for s in (0, 59.6, 61, 3600, float("nan"))] == ["0:00", "1:00", "1:01", "1:00:00", "?"]


def test_train_progress_off_a_terminal_logs_entries_per_second_and_eta_across_passes(records):
    # issue 27: the bar showed only on a terminal, without rate or ETA: a job under a scheduler showed nothing
    clock = FakeClock()
    progress = Progress(None, "rank 1/2: ", batch_size=32, meter=functools.partial(Meter, clock=clock, every=30,
                                                                                   tty=False))
    for pass_id in range(2):
        progress(BeginPass(pass_id, 10, 0))
        for batch in range(10):
            clock.now += 5
            progress(EndIteration(pass_id, batch, {"loss": 1.0, "count": 32 if batch < 9 else 8}))
        progress(EndPass(pass_id, {"loss": 1.0, "accuracy": 0.5, "samples_per_s": 1.0, "seconds": 50.0}))
    progress.close()
    assert records() == ["rank 1/2: pass 0: 6/10 batches (60%), 6 entries/s, ETA 0:20",
                         "rank 1/2: pass 1: 2/10 batches (20%), 6 entries/s, ETA 0:40",
                         "rank 1/2: pass 1: 8/10 batches (80%), 6 entries/s, ETA 0:10"]


def test_cli_tokenize_logs_its_progress_where_there_is_no_terminal(tmp_path, records):
    source = tmp_path / "a.txt"
    source.write_bytes(b"hello world\n" * 100)
    result = CliRunner().invoke(cli.main, ["--progress-every", "1e-9", "tokenize", str(source), "--out",
                                           str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert len(records()) == 1 and records()[0].startswith("tokenizing: 1,200/1,200 tokens (100%), "), records()
    assert records()[0].endswith(" tokens/s, ETA 0:00")


def test_cli_pipeline_run_logs_each_trainings_progress_where_there_is_no_terminal(tmp_path, records):
    data = fake_mnist(tmp_path / "mnist")
    result = CliRunner().invoke(cli.main, ["--progress-every", "1e-9", "pipeline", "run", "--data-dir", str(data),
                                           "--no-download", "--db", str(tmp_path / "runs.db"), "--min-steps", "4",
                                           "--trigger", "every:150", "--strategy", "new"])
    assert result.exit_code == 0, result.output
    # two triggers of 150 entries: 5 batches of 32 a pass, one pass each (more than --min-steps 4)
    assert [line.split(",")[0] for line in records()] == [f"training: {i}/5 steps ({20 * i}%)" for i in (1, 2, 3, 4, 5)] * 2
    assert all(" entries/s, ETA " in line for line in records())


def test_cli_progress_every_must_be_above_zero():
    result = CliRunner().invoke(cli.main, ["--progress-every", "0", "readers"])
    assert result.exit_code == 2 and "Invalid value for '--progress-every'" in result.output


@pytest.mark.parametrize("only", [[], ["--ns", "1"]])
def test_cli_cache_clear_logs_the_entries_it_deletes_where_there_is_no_terminal(tmp_path, records, monkeypatch, only):
    import readers
    import readers.caching.admin

    cached = readers.cached(readers.from_sequence(list(range(40))), abs, directory=str(tmp_path))
    assert len(list(cached())) == 40
    cached.store.close()
    monkeypatch.setattr(readers.caching.admin, "_DELETE_STEPS", 4)  # four statements, a progress line after each
    result = CliRunner().invoke(cli.main, ["--progress-every", "1e-9", "cache", "clear", str(tmp_path), "--yes",
                                           *only])
    assert result.exit_code == 0, result.output
    assert [line.split(",")[0] for line in records()] == [f"cache clear: {n}/40 entries ({n * 100 // 40}%)"
                                                          for n in (10, 20, 30, 40)]
    assert readers.caching.admin.cache_info(str(tmp_path))["entries"] == 0
