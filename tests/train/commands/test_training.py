"""train.commands.training: the CLI's train command between click and train()."""
import logging
import re
import sys

import click
import pytest

import readers
from readers.sources.datafiles import DataFile
from train.commands.training import _download_bar, check_entry, first_entry


def test_check_entry_wants_image_label_pairs():
    assert check_entry("pairs", readers.from_sequence([(1.0, 0)])) == 1.0
    with pytest.raises(click.ClickException, match="entries that are a tuple of 3 columns; train needs"):
        check_entry("triples", readers.from_sequence([(1.0, 0, "x")]))
    with pytest.raises(click.ClickException, match="gave no entries"):
        first_entry(readers.from_sequence([]))


def download(total):
    progress = _download_bar(DataFile("t.gz", "0" * 64), "http://127.0.0.1:9/t.gz")
    for done in (65536, 100_000):
        progress(done, total)


def test_download_progress_off_a_terminal_is_logged_when_the_file_is_whole(caplog, capsys):
    """Regression (review of issue 27, finding 9): the download bar was click.progressbar, which draws on a terminal
    only: a job's log had no line saying how far a download got."""
    caplog.set_level(logging.INFO, logger="readerkit")
    download(100_000)
    assert capsys.readouterr().err.splitlines()[0] == "downloading t.gz from http://127.0.0.1:9/t.gz"
    assert [r.name for r in caplog.records] == ["readerkit"]
    assert re.fullmatch(r"t\.gz: 100,000/100,000 bytes \(100%\), ([\d,]+|\?) bytes/s, ETA (0:00|\?)",
                        caplog.records[0].getMessage()), caplog.records[0].getMessage()


def test_download_progress_on_a_terminal_is_the_meters_bar(monkeypatch, capsys):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    download(100_000)
    err = capsys.readouterr().err
    assert err.startswith("downloading t.gz from http://127.0.0.1:9/t.gz\n\rt.gz  [") and err.endswith("\n"), err
    assert f"[{'#' * 24}]  100,000/100,000 bytes  " in err
    download(None)  # no Content-Length: the count and the rate, no bar
    assert re.search(r"\rt\.gz  [\d,]+ bytes  ([\d,]+|\?) bytes/s", capsys.readouterr().err)
