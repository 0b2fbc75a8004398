"""`cli.py train --config state.toml` with the run's token folder behind a URL (issue 29), as Psyche's HTTP provider
reads token files: the same losses as the local folder, and a checkpoint made on one resumes on the other."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from cli import main
from readers.tokenized.runfile_fields import RunFileError
from readers.tokenized.runfiles import load_data, load_run

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

from tests.helpers.fsspec_io import stop_io  # noqa: E402
from tests.helpers.http_server import serve_folder  # noqa: E402

STATE = """[config]
global_batch_size_start = 4
global_batch_size_end = 8
global_batch_size_warmup_tokens = 400
total_steps = 12
[model.LLM]
max_seq_len = 16
[model.LLM.data_location]
{location}
"""


@pytest.fixture(autouse=True)
def _no_io_thread_left():
    """fsspec's IO thread stopped after each test: a thread left in the process makes later tests' process workers
    start by spawn instead of fork."""
    yield
    stop_io()


def _tokens(folder, data='dir = "."\ntoken_size = "TwoBytes"\nseq_len = 16\nshuffle_seed = 3\n'):
    folder.mkdir(parents=True, exist_ok=True)
    np.frombuffer(b"a rose is a rose is a rose. " * 40, np.uint8).astype("<u2").tofile(folder / "t.bin")
    if data is not None:
        (folder / "data.toml").write_text(data)
    return folder


def _state(folder, location):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state.toml").write_text(STATE.format(location=location))
    return str(folder / "state.toml")


def run(*args):
    return CliRunner().invoke(main, list(args))


def _losses(log):
    return [(r["step"], r["loss"]) for r in map(json.loads, log.read_text().splitlines())]


def test_a_url_data_location_trains_as_the_local_folder_and_its_data_toml_is_read_there(tmp_path):
    tokens = _tokens(tmp_path / "tokens")
    local = _state(tmp_path / "local", f'Local = "{tokens}"')
    want = run("train", "--config", local, "--log-every", "4", "--log-json", str(tmp_path / "local.jsonl"))
    assert want.exit_code == 0, want.output
    with serve_folder(tokens) as server:
        remote = _state(tmp_path / "remote", f'Local = "{server.url}/"')
        run_file = load_run(remote)
        assert run_file.data.path == f"{server.url}/" and run_file.data.shuffle_seed == 3
        assert run_file.data.data_file == f"{server.url}/data.toml"
        got = run("train", "--config", remote, "--log-every", "4", "--log-json", str(tmp_path / "remote.jsonl"))
        assert got.exit_code == 0, got.output
        assert any(q.path == "/data.toml" for q in server.requests)
        assert {q.path for q in server.requests if q.method == "GET" and q.range} >= {"/t.bin"}
    assert _losses(tmp_path / "remote.jsonl") == _losses(tmp_path / "local.jsonl")
    assert got.stdout.splitlines()[0] == want.stdout.splitlines()[0] == (
        "model nexttoken: vocabulary 256 (largest token id 115 in the 1,120 tokens); 69 windows of 16 tokens; "
        "12 steps, global batch 4 to 8 windows over 400 tokens")


@pytest.mark.parametrize("first", ["local", "url"])
def test_a_checkpoint_made_on_local_files_resumes_from_the_url_and_back(tmp_path, first):
    tokens = _tokens(tmp_path / "tokens")
    local = _state(tmp_path / "local", f'Local = "{tokens}"')
    whole = run("train", "--config", local, "--log-every", "4", "--log-json", str(tmp_path / "whole.jsonl"))
    assert whole.exit_code == 0, whole.output
    with serve_folder(tokens) as server:
        remote = _state(tmp_path / "remote", f'Local = "{server.url}/"')
        one, two = (local, remote) if first == "local" else (remote, local)
        ck, log = str(tmp_path / "ck"), tmp_path / "parts.jsonl"
        begun = run("train", "--config", one, "--steps", "8", "--log-every", "4", "--log-json", str(log),
                    "--checkpoint-dir", ck)
        assert begun.exit_code == 0, begun.output
        resumed = run("train", "--config", two, "--log-every", "4", "--log-json", str(log), "--checkpoint-dir", ck,
                      "--resume")
        assert resumed.exit_code == 0, resumed.output
    assert _losses(log) == _losses(tmp_path / "whole.jsonl") and len(_losses(log)) == 3


def test_an_s3_data_location_trains_as_the_local_folder(tmp_path, s3_server):
    pytest.importorskip("s3fs")
    tokens = _tokens(tmp_path / "tokens")
    bucket = s3_server.make_bucket()
    s3_server.upload(tokens, bucket, "runs/tokens")
    local = _state(tmp_path / "local", f'Local = "{tokens}"')
    want = run("train", "--config", local, "--log-every", "6", "--log-json", str(tmp_path / "local.jsonl"))
    remote = _state(tmp_path / "remote", f'[model.LLM.data_location.Local]\npath = "s3://{bucket}/runs/tokens"\n'
                                          'token_size_in_bytes = "TwoBytes"\nshuffle = { Seeded = 3 }')
    got = run("train", "--config", remote, "--log-every", "6", "--log-json", str(tmp_path / "remote.jsonl"))
    assert want.exit_code == 0 and got.exit_code == 0, got.output
    assert _losses(tmp_path / "remote.jsonl") == _losses(tmp_path / "local.jsonl")


def test_a_data_toml_behind_a_url_names_its_dir_relative_to_itself(tmp_path):
    _tokens(tmp_path / "corpus" / "tokens", data=None)
    (tmp_path / "corpus" / "data.toml").write_text('dir = "tokens"\ntoken_size = 2\nseq_len = 16\n')
    (tmp_path / "corpus" / "bad.toml").write_text('dir = "/data/tokens"\ntoken_size = 2\nseq_len = 16\n')
    with serve_folder(tmp_path) as server:
        data = load_data(f"{server.url}/corpus/data.toml")
        assert (data.dir, data.token_size, data.seq_len, data.shuffle_seed) == (f"{server.url}/corpus/tokens/", 2,
                                                                                16, None)
        with pytest.raises(RunFileError, match=r"^http://127\.0\.0\.1:\d+/corpus/bad\.toml: dir: '/data/tokens' is "
                                                r"a local folder, named by a file behind a URL"):
            load_data(f"{server.url}/corpus/bad.toml")
        with pytest.raises(RunFileError, match=r"^http://127\.0\.0\.1:\d+/corpus/none\.toml: no such object; give "
                                                r"the URL of the data\.toml file"):
            load_data(f"{server.url}/corpus/none.toml")


def test_url_data_location_faults_are_one_line_naming_the_url_without_its_password(tmp_path):
    _tokens(tmp_path / "tokens", data='dir = "."\ntoken_size = "TwoBytes"\nseq_len = 32\n')
    (tmp_path / "empty").mkdir()
    with serve_folder(tmp_path, auth=("me", "pa55word")) as server:
        hidden = server.url.replace("http://", "http://me:pa55word@")
        wrong_len = _state(tmp_path / "a", f'Local = "{hidden}/tokens/"')
        got = run("train", "--config", wrong_len)
        assert got.exit_code == 1 and "Traceback" not in got.output
        assert f"Error: {server.url}/tokens/data.toml: seq_len: is 32, but model.LLM.max_seq_len is 16" in got.output
        empty = _state(tmp_path / "b", f'Local = "{hidden}/empty/"')
        got_empty = run("train", "--config", empty)
        assert got_empty.exit_code == 1 and "Traceback" not in got_empty.output
        assert f"{server.url}/empty/: no .bin or .npy token files there" in got_empty.output
        refused = _state(tmp_path / "c", f'Local = "{server.url}/tokens/"')  # no password: 401
        got_refused = run("train", "--config", refused)
        assert got_refused.exit_code == 1 and "check the credentials" in got_refused.output
    assert not any("pa55word" in r.output for r in (got, got_empty, got_refused))


def test_psyche_http_location_is_refused_pointing_to_a_folder_url():
    from pathlib import Path

    path = Path(__file__).parents[2] / "readers" / "tokenized" / "runfiles" / "http" / "state.toml"
    with pytest.raises(RunFileError, match=r"readerkit cannot read Http data .*Local = \"https://host/tokens/\" or "
                                           r"\"s3://bucket/tokens/\""):
        load_run(path)


def test_cli_serve_serves_the_token_windows_of_a_data_toml_behind_a_url(tmp_path):
    import readers
    from tests.test_cli_serve import cli_serve

    tokens = _tokens(tmp_path / "tokens")
    local = readers.tokens(tokens, seq_len=16)
    with serve_folder(tokens) as web, cli_serve(tmp_path, "--config", f"{web.url}/data.toml") as server:
        server.announced()
        assert server.entries == len(local) == 69
        remote = readers.remote(server.address)
        assert remote.info["seq_len"] == 16 and remote.info["shuffle_seed"] == 3
        np.testing.assert_array_equal(remote.gather_columns(np.arange(69)), local.gather_columns(np.arange(69)))
        assert server.stop() == 0, server.stderr()
