"""readerkit's command line: a thin click adapter over readers, batching and train.

>>> from click.testing import CliRunner
>>> CliRunner().invoke(main, ["--help"]).exit_code
0
"""
from __future__ import annotations

import click

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """readerkit: composable data readers and minibatching for training."""


if __name__ == "__main__":
    main()
