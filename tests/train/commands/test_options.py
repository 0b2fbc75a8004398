"""train.commands.options: shared options declared once, and the settings objects commands take instead of dicts."""
import dataclasses

import click
import pytest
from click.testing import CliRunner

import cli
from train.commands.continual import pipeline_group
from train.commands.options import (
    PipelineRunSettings,
    TrainSettings,
    as_settings,
    given_flags,
    reader_options,
)


@pytest.mark.parametrize("command, settings", [(cli.train, TrainSettings),
                                               (pipeline_group.commands["run"], PipelineRunSettings)],
                         ids=["train", "pipeline run"])
def test_a_settings_object_has_a_field_per_option_and_nothing_else(command, settings):
    assert [f.name for f in dataclasses.fields(settings)] == [p.name for p in command.params if p.name != "help"]


@pytest.mark.parametrize("command", [cli.train, cli.inspect_reader, cli.bench, cli.serve, pipeline_group.commands["run"]],
                         ids=lambda c: c.name)
def test_the_reader_options_are_the_same_three_everywhere(command):
    shared = [p for p in command.params if p.name in ("reader_name", "data_dir", "download")]
    assert [(p.opts, p.secondary_opts, p.type.name) for p in shared] == [
        (["--reader"], [], "text"), (["--data-dir"], [], "directory"), (["--download"], ["--no-download"], "boolean")]
    assert [p.default for p in shared][1:] == [None, True]


def test_the_commands_keep_their_reader_defaults_and_help():
    run = {p.name: p for p in pipeline_group.commands["run"].params}
    train = {p.name: p for p in cli.train.params}
    assert (run["reader_name"].default, train["reader_name"].default) == ("split-mnist", "mnist")
    assert run["reader_name"].help == "A timestamped reader: entries end in (key, time), e.g. split-mnist (see `readers`)."
    assert run["download"].help == "Download missing data files."
    assert train["download"].help == "Download missing data files from the public mirrors (into the per-user cache)."


def test_as_settings_builds_one_frozen_object_from_clicks_values():
    seen = []

    @click.command()
    @reader_options()
    @as_settings(dataclasses.make_dataclass("Where", ["reader_name", "data_dir", "download"], frozen=True))
    def where(settings):
        seen.append(settings)

    assert CliRunner().invoke(where, ["--reader", "mine", "--no-download"]).exit_code == 0
    assert (seen[0].reader_name, seen[0].data_dir, seen[0].download) == ("mine", None, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen[0].reader_name = "other"


def test_given_flags_names_only_the_options_on_the_command_line_in_the_order_asked():
    @click.command()
    @reader_options()
    def where(reader_name, data_dir, download):
        click.echo(" ".join(given_flags("download", "data_dir", "reader_name")))

    assert CliRunner().invoke(where, ["--reader", "mnist", "--no-download"]).output == "--download --reader\n"
    assert CliRunner().invoke(where, []).output == "\n"
