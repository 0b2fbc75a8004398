"""train.commands.training: the CLI's train command between click and train()."""
import click
import pytest

import readers
from train.commands.training import check_entry, first_entry


def test_check_entry_wants_image_label_pairs():
    assert check_entry("pairs", readers.from_sequence([(1.0, 0)])) == 1.0
    with pytest.raises(click.ClickException, match="entries that are a tuple of 3 columns; train needs"):
        check_entry("triples", readers.from_sequence([(1.0, 0, "x")]))
    with pytest.raises(click.ClickException, match="gave no entries"):
        first_entry(readers.from_sequence([]))
