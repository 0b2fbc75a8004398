"""cli.py train and inspect on the format readers (issue 28, section 4): files written by pyarrow, Pillow and
webdataset's ShardWriter, read with --reader NAME --data PATH --columns IMAGE,LABEL --size N."""
import io

import numpy as np
import pytest
from click.testing import CliRunner

Image = pytest.importorskip("PIL.Image")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import cli  # noqa: E402

N = 40


def run(*args):
    return CliRunner().invoke(cli.main, list(args))


def _png(i: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((8, 8), (i % 4) * 60, np.uint8)).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "mnist-like.parquet"
    pq.write_table(pa.table({"image": [{"bytes": _png(i), "path": None} for i in range(N)],
                             "label": [i % 4 for i in range(N)], "id": list(range(N))}), path, row_group_size=16)
    return path


def test_train_parquet_names_its_columns_in_its_first_line(table):
    result = run("train", "--reader", "parquet", "--data", str(table), "--columns", "image,label", "--passes", "1",
                 "--batch-size", "8")
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("model mlp: image = column 'image' (uint8[8, 8] decoded from PNG, scaled to [0, 1]), "
                            "label = column 'label': image float32[8, 8]: 64 inputs; labels 0..3"), first


def test_train_refuses_a_table_of_three_columns_naming_them(table):
    result = run("train", "--reader", "parquet", "--data", str(table), "--passes", "1")
    assert result.exit_code == 1
    assert "('image', 'label', 'id')" in result.output and "--columns IMAGE,LABEL" in result.output


def test_a_bad_column_is_named_with_the_columns_there_are(table):
    result = run("train", "--reader", "parquet", "--data", str(table), "--columns", "img,label", "--passes", "1")
    assert result.exit_code == 1
    assert "no column 'img'; its columns are 'image', 'label', 'id'" in result.output


def test_inspect_summarises_arrays_by_dtype_and_shape(table):
    result = run("inspect", "--reader", "parquet", "--data", str(table), "--columns", "image,label", "--count", "2")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "column 0 ('image'): uint8[8, 8]" in lines and "column 1 ('label'): int64 (int64)" in lines
    assert "entry 0: <uint8[8, 8] array>, 0" in lines and "[[" not in result.stdout


def test_train_image_folder_resizes_with_size(tmp_path):
    for label, colour in enumerate(((250, 0, 0), (0, 0, 250))):
        (tmp_path / f"class{label}").mkdir()
        for k in range(6):
            Image.new("RGB", (10 + k, 9), colour).save(tmp_path / f"class{label}" / f"{k}.png")
    result = run("train", "--reader", "image-folder", "--data", str(tmp_path), "--size", "4", "--passes", "1",
                 "--batch-size", "4")
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"model mlp: image = the image files under {tmp_path} (uint8[4, 4, 3], scaled to [0, 1]), "
                            "label = the index of the class sub-folder: image float32[4, 4, 3]: 48 inputs; labels 0..1"), first


def test_train_and_inspect_tar_shards(tmp_path):
    wds = pytest.importorskip("webdataset")
    with wds.ShardWriter(str(tmp_path / "shard-%03d.tar"), maxcount=10, verbose=0) as sink:
        for i in range(24):
            sink.write({"__key__": f"s{i:03d}", "png": _png(i), "cls": i % 4, "txt": f"t{i}"})
    data = str(tmp_path / "shard-{000..002}.tar")
    result = run("train", "--reader", "tar-shards", "--data", data, "--passes", "1", "--batch-size", "8")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith(
        "model mlp: image = field 'png' (uint8[8, 8, 3] decoded from PNG, scaled to [0, 1]), label = field 'cls': "
        "image float32[8, 8, 3]")
    shown = run("inspect", "--reader", "tar-shards", "--data", data, "--columns", "png,cls", "--size", "4")
    assert shown.exit_code == 0, shown.output
    assert "column 0: uint8[4, 4, 3]" in shown.stdout and "entry 0: <uint8[4, 4, 3] array>, 0" in shown.stdout
    bad = run("train", "--reader", "tar-shards", "--data", data, "--columns", "jpg,cls", "--passes", "1")
    assert bad.exit_code == 1 and "has no field 'jpg'; its fields are 'cls', 'png', 'txt'" in bad.output


def test_train_jsonl_fields_as_columns(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(f'{{"x": [{i % 2}.0, 1.0], "label": {i % 2}, "note": "n{i}"}}\n' for i in range(20)))
    result = run("train", "--reader", "jsonl", "--data", str(path), "--columns", "x,label", "--passes", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("model mlp: image = field 'x' (list), label = field 'label':")
    bad = run("train", "--reader", "jsonl", "--data", str(path), "--passes", "1")
    assert bad.exit_code == 1 and "a single dict" in bad.output


def test_train_parquet_resumes_from_its_checkpoint(table, tmp_path):
    args = ["train", "--reader", "parquet", "--data", str(table), "--columns", "image,label", "--batch-size", "8",
            "--checkpoint-dir", str(tmp_path / "run")]
    assert run(*args, "--passes", "1").exit_code == 0
    resumed = run(*args, "--passes", "2", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert [line.split(":")[0] for line in resumed.stdout.splitlines() if line.startswith("pass ")] == ["pass 1"]


def test_train_refuses_to_resume_with_other_columns_or_other_data_naming_what_changed(table, tmp_path):
    args = ["train", "--reader", "parquet", "--batch-size", "8", "--checkpoint-dir", str(tmp_path / "run")]
    assert run(*args, "--data", str(table), "--columns", "image,label", "--passes", "1").exit_code == 0
    other_columns = run(*args, "--data", str(table), "--columns", "image,id", "--passes", "2", "--resume")
    assert other_columns.exit_code == 1
    assert "DecodeImages(['image', 'label'], size=None)" in other_columns.output
    assert "now \"map_readers(DecodeImages(['image', 'id'], size=None)" in other_columns.output
    other = tmp_path / "other.parquet"  # the same columns and length, other values
    pq.write_table(pa.table({"image": [{"bytes": _png(i + 1), "path": None} for i in range(N)],
                             "label": [i % 4 for i in range(N)], "id": list(range(N))}), other, row_group_size=16)
    other_data = run(*args, "--data", str(other), "--columns", "image,label", "--passes", "2", "--resume")
    assert other_data.exit_code == 1 and "the data itself differs" in other_data.output
    moved = tmp_path / "moved.parquet"  # the same data at another path resumes
    moved.write_bytes(table.read_bytes())
    assert run(*args, "--data", str(moved), "--columns", "image,label", "--passes", "2", "--resume").exit_code == 0


def test_bench_reads_a_format_reader_from_data(table):
    result = run("bench", "--reader", "parquet", "--data", str(table), "--columns", "image,label", "--size", "4",
                 "--workers", "1", "--mode", "thread", "--limit", "20", "--batch-size", "8")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("bench: parquet, first 20 entries, 1 thread worker")
