"""cli.py train and inspect with --data URL (issue 29): every format reader (parquet, tar-shards, image-folder,
jsonl) read from a real HTTP server with basic auth (tests/helpers/http_server.py); the password is in no line
printed, and a URL that names nothing is one clean line naming it, redacted."""
import io

import pytest

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")
Image = pytest.importorskip("PIL.Image")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import cli  # noqa: E402
from readers.plugins.registry import reader_splits  # noqa: E402
from tests.helpers.fsspec_io import stop_io  # noqa: E402
from tests.helpers.http_server import serve_folder  # noqa: E402
from tests.train.commands.test_format_readers import _png, run  # noqa: E402  (the local tests' helpers)

N = 24


@pytest.fixture(autouse=True, scope="module")
def _no_fsspec_thread_after():
    yield
    stop_io()  # a later test's process workers would spawn while it runs (tests/helpers/fsspec_io.py)



def write_formats(root) -> None:
    """The same 24 small images (4 classes) as a Parquet file, tar shards, an image folder; and a JSON lines file."""
    pq.write_table(pa.table({"image": [{"bytes": _png(i), "path": None} for i in range(N)],
                             "label": [i % 4 for i in range(N)]}), root / "table.parquet", row_group_size=8)
    (root / "shards").mkdir()
    for s in range(3):
        with __import__("tarfile").open(root / "shards" / f"shard-{s:03d}.tar", "w") as tar:
            for i in range(s * 8, s * 8 + 8):
                for ext, data in (("png", _png(i)), ("cls", str(i % 4).encode())):
                    info = __import__("tarfile").TarInfo(f"s{i:03d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    for i in range(N):
        (root / "images" / f"class{i % 4}").mkdir(parents=True, exist_ok=True)
        (root / "images" / f"class{i % 4}" / f"{i:03d}.png").write_bytes(_png(i))
    (root / "rows.jsonl").write_text("".join(f'{{"x": [{i % 2}.0, 1.0], "label": {i % 2}}}\n' for i in range(N)))


@pytest.fixture(scope="module")
def formats(tmp_path_factory):
    """(the URL, with user:secret@, of a folder of every format served with basic auth; the local folder)."""
    root = tmp_path_factory.mktemp("formats")
    write_formats(root)
    with serve_folder(root, auth=("user", "secret")) as server:
        yield server.url.replace("http://", "http://user:secret@"), str(root)


@pytest.fixture
def site(formats):
    return formats[0]


@pytest.fixture
def local_site(formats):
    return formats[1]


FORMATS = {  # reader: (--data below the site, more arguments, what inspect shows of column 0)
    "parquet": ("/table.parquet", ["--columns", "image,label"], "uint8[8, 8]"),
    "tar-shards": ("/shards/shard-{000..002}.tar", ["--columns", "png,cls"], "uint8[8, 8, 3]"),
    "image-folder": ("/images", ["--size", "8"], "uint8[8, 8, 3]"),
    "jsonl": ("/rows.jsonl", ["--columns", "x,label"], "list"),
}


@pytest.mark.parametrize("reader", FORMATS)
def test_train_reads_each_format_from_a_url_and_shows_no_password(site, reader):
    below, more, _ = FORMATS[reader]
    result = run("train", "--reader", reader, "--data", site + below, *more, "--passes", "1", "--batch-size", "8")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("model mlp: ") and "pass 0:" in result.stdout
    assert "secret" not in result.output


@pytest.mark.parametrize("reader", FORMATS)
def test_inspect_reads_each_format_from_a_url_and_shows_no_password(site, reader):
    below, more, column = FORMATS[reader]
    result = run("inspect", "--reader", reader, "--data", site + below, *more, "--count", "2")
    assert result.exit_code == 0, result.output
    assert any(line.startswith("column 0") and column in line for line in result.stdout.splitlines()), result.stdout
    assert "secret" not in result.output


@pytest.mark.parametrize("reader", FORMATS)
@pytest.mark.parametrize("command", ["train", "inspect"])
def test_a_url_naming_nothing_is_one_clean_line_naming_it(site, reader, command):
    below, more, _ = FORMATS[reader]
    missing = site + "/nothing" + below + "?token=secret"
    result = run(command, "--reader", reader, "--data", missing, *more, *(["--passes", "1"] if command == "train" else []))
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    shown = site.replace("user:secret@", "") + "/nothing"  # (inspect prints the pipeline first: a folder is listed late)
    assert shown in errors[0] and "secret" not in result.output, result.output


@pytest.mark.parametrize("reader", FORMATS)
def test_a_password_in_the_url_reaches_no_checkpoint_file_output_or_repr(site, reader, tmp_path, capfd):
    below, more, _ = FORMATS[reader]
    args = ["train", "--reader", reader, "--data", site + below, *more, "--batch-size", "8",
            "--checkpoint-dir", str(tmp_path / "run"), "--checkpoint-every", "1"]
    first = run(*args, "--passes", "1")
    assert first.exit_code == 0, first.output
    resumed = run(*args, "--passes", "2", "--resume")
    assert resumed.exit_code == 0, resumed.output
    captured = capfd.readouterr()
    for text in (first.output, resumed.output, captured.out, captured.err):
        assert "secret" not in text, text
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert files and not [p for p in files if b"secret" in p.read_bytes()]
    options = {"columns": more[1]} if more[0] == "--columns" else {"size": int(more[1])}
    built, _ = reader_splits(reader, data=site + below, **options)
    assert "secret" not in repr(built)


@pytest.mark.parametrize("reader", FORMATS)
def test_a_checkpoint_made_on_local_files_resumes_from_their_url(site, local_site, reader, tmp_path):
    below, more, _ = FORMATS[reader]
    args = [*more, "--batch-size", "8", "--checkpoint-dir", str(tmp_path / "run")]
    local = run("train", "--reader", reader, "--data", local_site + below, *args, "--passes", "1")
    assert local.exit_code == 0, local.output
    remote = run("train", "--reader", reader, "--data", site + below, *args, "--passes", "2", "--resume")
    assert remote.exit_code == 0, remote.output
    assert [line.split(":")[0] for line in remote.stdout.splitlines() if line.startswith("pass ")] == ["pass 1"]


def test_the_resume_command_printed_on_a_stop_holds_no_password():
    from train.commands.training import resume_command

    with cli.main.make_context("readerkit", ["train"]) as root:
        given = ["--reader", "jsonl", "--data", "https://user:secret@host/rows.jsonl?sig=secret", "--passes", "3"]
        with cli.train.make_context("train", given, parent=root):
            line = resume_command(None)
    assert "secret" not in line and "--data https://host/rows.jsonl" in line and line.endswith(" --resume")


def test_train_first_line_names_the_image_folder_by_its_redacted_url(site):
    result = run("train", "--reader", "image-folder", "--data", site + "/images", "--size", "8", "--passes", "1")
    assert result.exit_code == 0, result.output
    shown = site.replace("user:secret@", "") + "/images"
    assert result.stdout.splitlines()[0].startswith(f"model mlp: image = the image files under {shown} (uint8[8, 8, 3]")
