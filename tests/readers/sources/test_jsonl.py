"""jsonl: entries and fields, the line index (one pass, numpy), paths, exactly once under shuffle/shard/workers/resume,
bad lines named, the plugin. Files are written by json.dumps, the standard library's writer, and by datasets."""
import json
import os
import pickle

import numpy as np
import pytest

import readers
from readers.identity import fingerprint
from readers.plugins.registry import find_reader, reader_splits
from readers.sources import jsonl as module
from readers.sources.jsonl import JsonlError, jsonl, line_index
from readers.testing import assert_resumes_at_every_step, assert_seeded_passes
from tests.helpers.layouts import as_rank

ROWS = [{"id": k, "text": f"line {k} é" * (k % 3), "tags": list(range(k % 4)), "score": k / 4} for k in range(17)]


def write_jsonl(path, rows, *, newline="\n", last_newline=True) -> None:
    text = newline.join(json.dumps(row, ensure_ascii=False) for row in rows) + (newline if last_newline else "")
    path.write_bytes(text.encode())


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "rows.jsonl"
    write_jsonl(p, ROWS)
    return p


def ids(entries) -> list[int]:
    return [e["id"] for e in entries]


def test_jsonl_reads_back_each_line_as_written(path):
    r = jsonl(path)
    assert len(r) == len(ROWS)
    assert list(r()) == ROWS
    assert r[5] == ROWS[5] and r[-1] == ROWS[-1]


def test_jsonl_fields_give_tuples_in_the_order_asked(path):
    r = jsonl(path, fields=["text", "id"])
    assert list(r()) == [(row["text"], row["id"]) for row in ROWS]
    assert jsonl(path, fields=("score",))[4] == (1.0,)


@pytest.mark.parametrize("newline, last_newline", [("\n", True), ("\n", False), ("\r\n", True), ("\r\n", False)])
def test_jsonl_line_endings_and_a_last_line_without_newline(tmp_path, newline, last_newline):
    p = tmp_path / "rows.jsonl"
    write_jsonl(p, ROWS, newline=newline, last_newline=last_newline)
    assert list(jsonl(p)()) == ROWS


def test_jsonl_skips_empty_lines_and_reports_real_line_numbers(tmp_path):
    p = tmp_path / "gaps.jsonl"
    p.write_text('\n{"a": 1}\n\n\r\n{"a": 2}\n{"a": \n')
    r = jsonl(p)
    assert len(r) == 3 and r[0] == {"a": 1} and r[1] == {"a": 2}
    with pytest.raises(JsonlError, match=rf"jsonl: {p}, line 6 is not JSON: Expecting value at column 7; fix"):
        r[2]


def test_jsonl_any_json_value_is_an_entry_without_fields(tmp_path):
    p = tmp_path / "values.jsonl"
    p.write_text('1\n"two"\n[3]\nnull\n{"five": 5}\n')
    assert list(jsonl(p)()) == [1, "two", [3], None, {"five": 5}]


def test_jsonl_index_is_numpy_made_in_one_pass_over_each_file(path, monkeypatch):
    scanned = []
    real = module._scan
    monkeypatch.setattr(module, "_scan", lambda p: scanned.append(p) or real(p))
    r = jsonl(path)
    assert scanned == []  # nothing read when made
    assert len(r) == len(ROWS) and scanned == [str(path)]
    list(r()), list(readers.shuffle(r, seed=0)()), r[3], fingerprint(r)
    assert scanned == [str(path)]
    index = r.index()
    assert isinstance(index.starts, np.ndarray) and index.starts.dtype == np.int64
    data = path.read_bytes()
    assert [json.loads(data[s:e]) for s, e in zip(index.starts, index.ends)] == ROWS


def test_jsonl_index_spans_blocks(path, monkeypatch):
    monkeypatch.setattr(module, "BLOCK", 7)  # lines and \r\n cut across blocks
    p = path.with_name("crlf.jsonl")
    write_jsonl(p, ROWS, newline="\r\n")
    assert list(jsonl(p)()) == ROWS and list(jsonl(path)()) == ROWS


def test_jsonl_paths_may_be_a_folder_a_list_or_a_glob(tmp_path):
    folder = tmp_path / "parts"
    (folder / "deeper").mkdir(parents=True)
    write_jsonl(folder / "b.jsonl", ROWS[5:9])
    write_jsonl(folder / "a.jsonl", ROWS[:5])
    write_jsonl(folder / "deeper" / "c.ndjson", ROWS[9:])
    (folder / "notes.txt").write_text("not json lines")
    (folder / "empty.jsonl").write_text("")
    assert list(jsonl(folder)()) == ROWS
    files = [folder / "a.jsonl", folder / "b.jsonl", folder / "deeper" / "c.ndjson"]
    assert list(jsonl(files)()) == ROWS
    assert list(jsonl(str(folder / "*.jsonl"))()) == ROWS[:9]
    r = jsonl(folder)
    picked = np.array([16, 0, 7, 4, 5, 9, 3])
    assert list(r.gather(picked)) == [ROWS[i] for i in picked]
    with pytest.raises(readers.MissingFile, match="nowhere.jsonl: no JSON lines files"):
        jsonl(tmp_path / "nowhere.jsonl")


def test_jsonl_gather_reads_close_and_distant_lines(tmp_path):
    p = tmp_path / "big.jsonl"
    rows = [{"k": k, "pad": "x" * 100} for k in range(2000)]
    write_jsonl(p, rows)
    r = jsonl(p)
    for picked in (np.arange(10, 30), np.array([1999, 0, 1000, 3, 3])):  # one range; lines far apart
        assert list(r.gather(picked)) == [rows[i] for i in picked]


def test_jsonl_from_datasets_to_json(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": ["a", "bé", "c"], "label": [0, 1, 0]})
    ds.to_json(str(tmp_path / "ds.jsonl"))
    assert list(jsonl(tmp_path / "ds.jsonl", fields=["text", "label"])()) == list(zip(ds["text"], ds["label"]))


@pytest.mark.parametrize("fields, error, message", [
    ("text", readers.BadType, "fields must be a list of field names, e.g. fields=['text']"),
    ([1], readers.BadType, "fields must be a list of field names"),
    ([], readers.BadValue, "fields is empty"),
])
def test_jsonl_refuses_bad_fields(path, fields, error, message):
    with pytest.raises(error, match=message.replace("[", r"\[").replace("]", r"\]")):
        jsonl(path, fields=fields)


# -- exactly once -------------------------------------------------------------------------------


def test_jsonl_shuffle_and_three_shards_give_each_line_once(path):
    shuffled = readers.shuffle(jsonl(path), seed=3)
    parts = [ids(readers.shard(shuffled, i, 3)()) for i in range(3)]
    assert sorted(sum(parts, [])) == list(range(len(ROWS)))
    assert sum(parts, []) != list(range(len(ROWS)))


def test_jsonl_three_ranks_shard_by_global_worker_id(path):
    got = []
    for rank in range(3):
        as_rank(rank, 3)
        got += ids(readers.shard(readers.shuffle(jsonl(path), seed=1))())
    assert sorted(got) == list(range(len(ROWS)))


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_jsonl_process_workers_give_each_line_once(path, start_method):
    r = readers.prefetch(readers.shard(readers.shuffle(jsonl(path), seed=2)), 3, mode="process",
                         start_method=start_method)
    got = ids(r())
    assert sorted(got) == list(range(len(ROWS)))
    assert got == ids(readers.shard(readers.shuffle(jsonl(path), seed=2), 0, 1)())


@pytest.mark.parametrize("shuffled", [False, True])
def test_jsonl_resumes_at_every_step(path, shuffled):
    assert_resumes_at_every_step(lambda: readers.shuffle(jsonl(path), seed=5) if shuffled else jsonl(path))


def test_jsonl_shuffle_is_seeded_per_pass(path):
    assert_seeded_passes(lambda: readers.shuffle(jsonl(path, fields=["id"]), seed=7))


def test_jsonl_resumed_on_three_shards_sees_the_rest_once(path):
    it = readers.shuffle(jsonl(path), seed=4)()
    head = [next(it)["id"] for _ in range(5)]
    state = it.get_state()
    rest = []
    for i in range(3):
        part = readers.shard(readers.shuffle(jsonl(path), seed=4), i, 3)
        part.set_state(state)
        rest += ids(part())
    assert sorted(head + rest) == list(range(len(ROWS)))


# -- pickles, identity ---------------------------------------------------------------------------


def test_jsonl_pickles_with_its_index(path, monkeypatch):
    r = jsonl(path)
    len(r)
    monkeypatch.setattr(module, "_scan", None)  # a copy that indexed again would fail
    again = pickle.loads(pickle.dumps(r))
    assert list(again()) == ROWS


def test_jsonl_fingerprint_follows_the_lines_not_the_path(path, tmp_path):
    copy = tmp_path / "elsewhere" / "copy.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    a = fingerprint(jsonl(path))
    assert a == fingerprint(jsonl(copy)) and a["pipeline"] == ["jsonl(files)"]
    write_jsonl(copy, ROWS[::-1])
    assert fingerprint(jsonl(copy))["content"] != a["content"]


# -- faults -------------------------------------------------------------------------------------


def test_jsonl_names_the_file_and_line_that_does_not_parse(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", ROWS[:3])
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"id": 3}\n{"id": 4,}\n')
    r = jsonl(tmp_path)
    assert list(r.gather(np.array([0, 3]))) == [ROWS[0], {"id": 3}]
    with pytest.raises(JsonlError, match=rf"jsonl: {bad}, line 2 is not JSON: Expecting property name enclosed in double quotes at column 10") as info:
        list(r())
    assert isinstance(info.value, ValueError) and "fix the line or remove it" in str(info.value)


def test_jsonl_names_bytes_that_are_not_text(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"a": 1}\n{"a": "\xff\xfe"}\n')
    with pytest.raises(JsonlError, match=rf"{bad}, line 2 is not JSON text: 'utf-8' codec can't decode byte 0xff"):
        jsonl(bad)[1]


def test_jsonl_names_a_missing_field_and_its_line(path):
    with open(path, "a") as f:
        f.write('{"id": 99}\n')
    r = jsonl(path, fields=["id", "text"])
    with pytest.raises(JsonlError, match=rf"{path}, line 18 has no field 'text' \(it has \['id'\]\); add the field"):
        list(r())


def test_jsonl_names_a_line_that_is_no_object_when_fields_are_asked(path):
    with open(path, "a") as f:
        f.write('[1, 2]\n')
    with pytest.raises(JsonlError, match=rf"{path}, line 18 is a JSON list, not an object with fields \['id'\]"):
        jsonl(path, fields=["id"])[17]


def test_jsonl_bad_line_in_a_process_worker_reaches_the_consumer_named(path):
    with open(path, "a") as f:
        f.write("{oops\n")
    with pytest.raises(JsonlError, match=rf"{path}, line 18 is not JSON"):
        list(readers.prefetch(jsonl(path), 2, mode="process")())


# -- the plugin ---------------------------------------------------------------------------------


def test_jsonl_is_the_builtin_reader_jsonl(path):
    assert find_reader("jsonl") is module.from_data_dir
    train, test = reader_splits("jsonl", data_dir=os.fspath(path.parent), download=False)
    assert list(train()) == ROWS and test is None


def test_line_index_of_no_files_is_empty():
    index = line_index([])
    assert len(index) == 0 and index.bounds.tolist() == [0]
