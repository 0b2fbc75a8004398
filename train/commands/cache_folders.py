"""``python cli.py cache info|clear DIR``: look into, or empty, the disk tier of ``readers.cached``.

The figures and lines come from ``readers.caching.admin``; this is the click adapter.

>>> from click.testing import CliRunner
>>> CliRunner().invoke(cache_group, ["--help"]).exit_code
0
"""
from __future__ import annotations

import json

import click

from train.commands.console import fail_cleanly
from train.commands.progress import Meter

__all__ = ["cache_group"]


@click.group("cache")
def cache_group() -> None:
    """Look into, or empty, the disk cache of readers.cached(..., directory=DIR)."""


@cache_group.command("info")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object.")
@click.option("--check-pages", is_flag=True,
              help="Read every page of the database to find damage (sqlite's quick_check: about a second a GiB). "
                   "Without it, only the tables' first pages are looked at.")
@fail_cleanly
def cache_info_command(directory: str, as_json: bool, check_pages: bool) -> None:
    """Show what the cache in DIRECTORY holds, per namespace and in all.

    A namespace is a function over a dataset: a line each with its entries, their size and the function's mean
    time per entry; then the totals and the limit (disk_bytes)."""
    from readers.caching.admin import cache_info, info_lines

    info = cache_info(directory, check_pages=check_pages)
    click.echo(json.dumps(info, indent=2) if as_json else "\n".join(info_lines(info)))


@cache_group.command("clear")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--ns", type=int, default=None, help="Empty only this namespace (a number `cache info` shows).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@fail_cleanly
def cache_clear_command(directory: str, ns: int | None, yes: bool) -> None:
    """Empty the cache in DIRECTORY and give the space back.

    Processes using the cache meanwhile compute what they ask for again."""
    from readers.caching.admin import cache_info, clear_cache, cleared_line

    if not yes:
        info = cache_info(directory)  # a folder with no cache fails before the question
        held = [s for s in info["namespaces"] if ns in (None, s["ns"])]
        if held:  # an --ns it does not hold is refused below, unasked
            click.confirm(f"delete {sum(s['entries'] for s in held):,} entries ({sum(s['bytes'] for s in held) / (1 << 20):,.2f} "
                          f"MiB) from {info['directory']}{'' if ns is None else f' (namespace {ns})'}?", abort=True)
    with Meter("cache clear", unit="entries") as meter:  # a bar, or a log line every --progress-every s
        def progress(deleted: int, total: int) -> None:
            meter.total = total
            meter.update(deleted - meter.done)

        cleared = clear_cache(directory, ns, progress=progress)
    click.echo(cleared_line(cleared))
