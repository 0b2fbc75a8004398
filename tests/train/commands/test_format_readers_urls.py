"""cli.py train on a Parquet file behind a URL (issue 29): a checkpoint made reading the URL resumes from the local
file, and one made on the local file resumes from the URL, as the fingerprint is the data's content; other data
behind the URL is refused."""
import pytest
from click.testing import CliRunner

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")
pytest.importorskip("PIL.Image")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import cli  # noqa: E402
from tests.helpers.fsspec_io import stop_io  # noqa: E402
from tests.helpers.http_server import serve_folder  # noqa: E402
from tests.train.commands.test_format_readers import N, _png, table  # noqa: E402,F401  (table: the fixture)


@pytest.fixture(autouse=True, scope="module")
def _no_fsspec_thread_after():
    yield
    stop_io()  # a later test's process workers would spawn while it runs (see the helper)


def run(*args):
    return CliRunner().invoke(cli.main, list(args))


def passes(result):
    return [line.split(":")[0] for line in result.stdout.splitlines() if line.startswith("pass ")]


@pytest.mark.parametrize("first", ["url", "local"])
def test_train_parquet_resumes_across_a_url_and_the_local_file(table, tmp_path, first):  # noqa: F811
    with serve_folder(table.parent) as server:
        where = {"url": f"{server.url}/{table.name}", "local": str(table)}
        then = "local" if first == "url" else "url"
        args = ["train", "--reader", "parquet", "--columns", "image,label", "--batch-size", "8",
                "--checkpoint-dir", str(tmp_path / "run")]
        made = run(*args, "--data", where[first], "--passes", "1")
        assert made.exit_code == 0, made.output
        resumed = run(*args, "--data", where[then], "--passes", "2", "--resume")
        assert resumed.exit_code == 0, resumed.output
        assert passes(resumed) == ["pass 1"]


def test_train_refuses_to_resume_from_other_data_behind_the_url(table, tmp_path):  # noqa: F811
    other = tmp_path / "other"
    other.mkdir()
    args = ["train", "--reader", "parquet", "--columns", "image,label", "--batch-size", "8",
            "--checkpoint-dir", str(tmp_path / "run")]
    assert run(*args, "--data", str(table), "--passes", "1").exit_code == 0
    labels = [(i + 1) % 4 for i in range(N)]  # the same images and length, other labels
    pq.write_table(pa.table({"image": [{"bytes": _png(i), "path": None} for i in range(N)], "label": labels,
                             "id": list(range(N))}), other / table.name, row_group_size=16)
    with serve_folder(other) as server:
        resumed = run(*args, "--data", f"{server.url}/{table.name}", "--passes", "2", "--resume")
    assert resumed.exit_code == 1
    assert "content" in resumed.output, resumed.output
