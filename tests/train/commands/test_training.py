"""train.commands.training: the CLI's train command between click and train()."""
import click
import pytest

import readers
from train.commands.console import in_flag_words
from train.commands.training import check_entry, first_entry


def test_in_flag_words_names_options_and_says_each_once():
    message = ("ck: the checkpoint was made with other settings or data (batch_size: 128 then, 64 now; "
               "model.n_classes: 10 then, 12 now; config.classes: 10 then, 12 now; config.reader: 'a' then, 'b' "
               "now; pipeline: stage 0 was 'x', now 'y'); resume with the same settings and data, or train into "
               "another checkpoint folder")
    assert in_flag_words(message) == (
        "ck: the checkpoint was made with other settings or data (--batch-size: 128 then, 64 now; --classes: 10 "
        "then, 12 now; --reader: 'a' then, 'b' now; pipeline: stage 0 was 'x', now 'y'); resume with the same "
        "settings and data, or train into another checkpoint folder")
    assert in_flag_words("no settings here") == "no settings here"


def test_check_entry_wants_image_label_pairs():
    assert check_entry("pairs", readers.from_sequence([(1.0, 0)])) == 1.0
    with pytest.raises(click.ClickException, match="entries that are a tuple of 3 columns; train needs"):
        check_entry("triples", readers.from_sequence([(1.0, 0, "x")]))
    with pytest.raises(click.ClickException, match="gave no entries"):
        first_entry(readers.from_sequence([]))
