"""train.commands.token_training: `cli.py train --config state.toml`, a next-token model trained step by step."""
import json

import numpy as np
from click.testing import CliRunner

import readers
from cli import main
from train.checkpoints.files import load_checkpoint
from train.commands.token_training import infer_vocabulary

STATE = """run_id = "test"
[config]
global_batch_size_start = 4
global_batch_size_end = 8
global_batch_size_warmup_tokens = 400
total_steps = 12
[model.LLM]
architecture = "HfLlama"
max_seq_len = 16
[model.LLM.data_location]
{location}
"""


def _run_files(tmp_path, location='Local = "tokens"'):
    (tmp_path / "tokens").mkdir(exist_ok=True)
    text = np.frombuffer(b"a rose is a rose is a rose. " * 40, np.uint8)
    text.astype("<u2").tofile(tmp_path / "tokens" / "t.bin")
    (tmp_path / "tokens" / "data.toml").write_text('dir = "."\ntoken_size = "TwoBytes"\nseq_len = 16\nshuffle_seed = 3\n')
    (tmp_path / "state.toml").write_text(STATE.format(location=location))
    return str(tmp_path / "state.toml")


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_a_run_file_trains_with_a_line_and_a_json_object_every_n_steps(tmp_path):
    state = _run_files(tmp_path)
    log = tmp_path / "log.jsonl"
    result = run("train", "--config", state, "--log-every", "4", "--log-json", str(log))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == ("model nexttoken: vocabulary 256 (largest token id 115 in the 1,120 tokens); 69 windows of "
                        "16 tokens; 12 steps, global batch 4 to 8 windows over 400 tokens")
    assert [line.split(":")[0] for line in lines[1:]] == ["step 4", "step 8", "step 12"]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [sorted(r) for r in records] == [["loss", "perplexity", "step", "tokens_per_s"]] * 3
    assert records[-1]["loss"] < records[0]["loss"]
    assert "ignored in" in result.stderr and "run_id, model.LLM.architecture" in result.stderr


def test_a_run_file_run_resumes_from_its_checkpoint_and_keeps_its_log(tmp_path):
    state, ck, log = _run_files(tmp_path), str(tmp_path / "ck"), tmp_path / "log.jsonl"
    first = run("train", "--config", state, "--steps", "8", "--log-every", "4", "--log-json", str(log),
                "--checkpoint-dir", ck)
    assert first.exit_code == 0, first.output
    assert load_checkpoint(ck)[1]["step"] == 8
    resumed = run("train", "--config", state, "--log-every", "4", "--log-json", str(log), "--checkpoint-dir", ck,
                  "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [4, 8, 12]
    done = run("train", "--config", state, "--steps", "10", "--checkpoint-dir", ck, "--resume")
    assert done.exit_code == 0 and "already holds 12 steps; nothing to train for --steps 10" in done.stderr
    refused = run("train", "--config", state, "--checkpoint-dir", ck, "--resume", "--lr", "0.1")
    assert refused.exit_code == 1 and "--lr: 0.003 then, 0.1 now" in refused.output


def test_options_of_image_runs_are_refused_clearly(tmp_path):
    state = _run_files(tmp_path)
    mixed = run("train", "--config", state, "--batch-size", "64")
    assert mixed.exit_code == 2 and "--batch-size does not apply with --config" in mixed.output
    alone = run("train", "--steps", "5")
    assert alone.exit_code == 2 and "--steps applies only with --config" in alone.output


def _served_tokens(tmp_path, **options):
    from readers.tokenized.runfiles import load_data

    data = load_data(tmp_path / "tokens" / "data.toml")
    tokens = readers.tokens(data.dir, seq_len=data.seq_len, token_size=data.token_size)
    return readers.serve(tokens, info={"seq_len": data.seq_len, "token_size": data.token_size,
                                       "shuffle_seed": data.shuffle_seed, "max_token": tokens.max_token(),
                                       "tokens": sum(tokens.sizes)}, **options)


def test_a_server_location_trains_with_the_same_losses_as_the_local_folder(tmp_path):
    local = _run_files(tmp_path)
    expected = run("train", "--config", local, "--log-every", "4", "--log-json", str(tmp_path / "local.jsonl"))
    assert expected.exit_code == 0, expected.output
    with _served_tokens(tmp_path) as server:
        state = tmp_path / "remote" / "state.toml"
        state.parent.mkdir()
        state.write_text(STATE.format(location=f'Server = "{server.address}"'))
        got = run("train", "--config", str(state), "--log-every", "4", "--log-json", str(tmp_path / "remote.jsonl"))
        assert got.exit_code == 0, got.output
        assert server.stats["requests"] >= 12
    losses = [[json.loads(line)["loss"] for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
              for name in ("local", "remote")]
    assert losses[0] == losses[1] and len(losses[0]) == 3
    assert got.stdout.splitlines()[0] == ("model nexttoken: vocabulary 256 (largest token id 115 in the 1,120 tokens "
                                          "the server holds); 69 windows of 16 tokens; 12 steps, global batch 4 to 8 "
                                          "windows over 400 tokens")


def test_a_server_list_trains_with_the_same_losses_as_the_local_folder(tmp_path):
    """Issue 30: a run file's Server as a list of replicas reads through one readers.remote over them all."""
    local = _run_files(tmp_path)
    expected = run("train", "--config", local, "--log-every", "4", "--log-json", str(tmp_path / "local.jsonl"))
    assert expected.exit_code == 0, expected.output
    with _served_tokens(tmp_path) as one, _served_tokens(tmp_path) as two:
        state = tmp_path / "remote" / "state.toml"
        state.parent.mkdir()
        state.write_text(STATE.format(location=f'Server = ["{one.address}", "{two.address}"]'))
        got = run("train", "--config", str(state), "--log-every", "4", "--log-json", str(tmp_path / "remote.jsonl"))
        assert got.exit_code == 0, got.output
    losses = [[json.loads(line)["loss"] for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
              for name in ("local", "remote")]
    assert losses[0] == losses[1] and len(losses[0]) == 3


def test_a_server_list_of_other_data_is_refused_naming_both(tmp_path):
    _run_files(tmp_path)
    other = readers.serve(readers.np_array(np.arange(69)), log=lambda line: None)
    with _served_tokens(tmp_path) as one, other:
        state = tmp_path / "state.toml"
        state.write_text(STATE.format(location=f'Server = ["{one.address}", "{other.address}"]'))
        got = run("train", "--config", str(state))
    assert got.exit_code != 0
    assert f"data_location Server: {other.address} serves" in got.output and one.address in got.output, got.output


def test_a_server_location_over_tls_needs_ca_file_and_says_so(tmp_path):
    """Issue 27: a plain client against a TLS server was tried again for 120 s, naming only ConnectionResetError;
    the command line had no way to speak TLS to a server."""
    from readers.network.server import tls_context
    from tests.helpers.certificates import make_certificate

    _run_files(tmp_path)
    cert, key = make_certificate(tmp_path)
    with _served_tokens(tmp_path, tls=tls_context(cert, key)) as server:
        state = tmp_path / "tls.toml"
        state.write_text(STATE.format(location=f'Server = "{server.address}"'))
        plain = run("train", "--config", str(state), "--steps", "2")
        assert plain.exit_code == 1 and "Traceback" not in plain.output
        assert plain.output.splitlines()[-1].startswith(
            f"Error: {state}: data_location Server: {server.address} speaks TLS, and this client does not: give "
            "readers.remote ca_file= (the server's certificate; --ca-file on the command line)")
        got = run("train", "--config", str(state), "--steps", "2", "--ca-file", cert)
        assert got.exit_code == 0, got.output
    alone = run("train", "--ca-file", cert)
    assert alone.exit_code == 2 and "--ca-file applies only with --config" in alone.output


def test_a_server_location_with_other_windows_or_other_data_is_refused(tmp_path):
    _run_files(tmp_path)
    with _served_tokens(tmp_path) as server:
        other = tmp_path / "other.toml"
        other.write_text(STATE.format(location=f'Server = "{server.address}"').replace("max_seq_len = 16",
                                                                                     "max_seq_len = 8"))
        refused = run("train", "--config", str(other))
        assert refused.exit_code == 1
        assert "the run's sequence length is 8, and the server at 127.0.0.1:" in refused.output
        assert "serves windows of 16 tokens (its data.toml's seq_len); make them equal" in refused.output
    with readers.serve(readers.from_arrays(np.zeros((3, 2)), np.arange(3))) as server:
        images = tmp_path / "images.toml"
        images.write_text(STATE.format(location=f'Server = "{server.address}"'))
        refused = run("train", "--config", str(images))
        assert refused.exit_code == 1 and "not token windows; start it with `python cli.py serve --config" in refused.output


def test_a_folder_without_data_toml_says_what_it_assumed_and_checkpoints_come_every_log_line(tmp_path):
    """New-user trial of issue 13: 4-byte tokens without a data.toml were read as 2-byte ones in silence, and
    a Ctrl-C before step 200 found no checkpoint."""
    state = _run_files(tmp_path)
    (tmp_path / "tokens" / "data.toml").unlink()
    ck = tmp_path / "ck"
    result = run("train", "--config", state, "--steps", "8", "--log-every", "4", "--checkpoint-dir", str(ck))
    assert result.exit_code == 0, result.output
    assert "has no data.toml, so its tokens are read as 2-byte ids, in order" in result.stderr
    assert [r["step"] for r in load_checkpoint(str(ck))[1]["history"]] == [4, 8]


def test_a_token_beyond_the_vocabulary_names_the_option(tmp_path):
    state = _run_files(tmp_path)
    result = run("train", "--config", state, "--vocab-size", "100", "--steps", "2")
    assert result.exit_code == 1 and "pass --vocab-size 1" in result.output and "out of range for vocab_size=100" in result.output


def test_the_vocabulary_is_the_largest_id_in_spread_windows_and_at_least_256():
    windows = np.zeros((5000, 4), np.int32)
    windows[4999, 2] = 1000  # the last window: sampled, since the spread includes both ends
    assert infer_vocabulary(readers.np_array(windows)) == (1001, "largest token id 1000 in 1,000 windows spread over all 5,000")


def test_a_server_lost_for_good_ends_the_run_with_the_resume_command(tmp_path, monkeypatch):
    from train import steps as steps_module

    _run_files(tmp_path)
    handle = _served_tokens(tmp_path)
    state = tmp_path / "remote.toml"
    state.write_text(STATE.format(location=f'Server = "{handle.address}"'))
    built = readers.remote
    given_up_soon = lambda address, **options: built(address, **options, deadline=0.5)  # noqa: E731
    monkeypatch.setattr(readers, "remote", given_up_soon)
    real = steps_module._windows_ahead

    def windows(reader, schedule, first, steps, seed, info):  # the server goes away for good after step 4
        for step, got in real(reader, schedule, first, steps, seed, info):
            if step == 4:
                handle.stop()
            yield step, got

    monkeypatch.setattr(steps_module, "_windows_ahead", windows)
    ck = str(tmp_path / "ck")
    result = run("train", "--config", str(state), "--log-every", "2", "--checkpoint-dir", ck)
    assert result.exit_code == 1
    assert "no data-provider server answered" in result.output
    assert f"the checkpoint in {ck} holds the steps saved so far: once the server is back, run the same command " \
           "with --resume" in result.output
    assert load_checkpoint(ck)[1]["step"] >= 4


def test_a_local_run_resumes_from_a_server_of_the_same_data(tmp_path):
    local, ck = _run_files(tmp_path), str(tmp_path / "ck")
    first = run("train", "--config", local, "--steps", "8", "--log-every", "4", "--checkpoint-dir", ck)
    assert first.exit_code == 0, first.output
    with _served_tokens(tmp_path) as server:
        state = tmp_path / "remote.toml"
        state.write_text(STATE.format(location=f'Server = "{server.address}"'))
        resumed = run("train", "--config", str(state), "--log-every", "4", "--checkpoint-dir", ck, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert load_checkpoint(ck)[1]["step"] == 12


def test_a_data_toml_given_as_the_run_file_is_named_as_the_wrong_kind(tmp_path):
    _run_files(tmp_path)
    data = tmp_path / "tokens" / "data.toml"
    result = run("train", "--config", str(data))
    # before: "Error: .../data.toml: dir: unknown key 'dir'; remove it, or use one of: config, model, ..."
    assert result.exit_code == 1 and result.output.splitlines() == [
        f"Error: {data}: this is a token folder's data.toml (dir, token_size, seq_len), but train --config expects "
        "a run file (state.toml, with [config] and [model.LLM]); give the run's state.toml, or write one whose "
        f'[model.LLM.data_location] is Local = "{tmp_path / "tokens"}" (the folder of this data.toml)']


def _never_built(*args, **kwargs):
    raise AssertionError("the model was built: a refused vocabulary must be refused before anything is allocated")


def test_two_byte_tokens_read_as_four_bytes_are_refused_before_the_model_is_built(tmp_path, monkeypatch):
    """Issue 27: token_size = "FourBytes" over a 2-byte tokens.bin inferred a vocabulary of millions of ids, and
    `train --config` asked for 14.1 GiB and was killed (rc 137) with no message."""
    state = _run_files(tmp_path)
    data = tmp_path / "tokens" / "data.toml"
    data.write_text(data.read_text().replace('"TwoBytes"', '"FourBytes"'))
    monkeypatch.setattr("train.commands.token_training.NextTokenMLP", _never_built)
    result = run("train", "--config", state, "--steps", "1")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    line = result.output.strip()
    assert line.startswith(f'Error: {tmp_path / "tokens" / "t.bin"}: read as 4-byte tokens (token_size = "FourBytes"), '
                           "largest token id ")
    assert "more than the 1,048,576 a next-token model plausibly has" in line
    assert line.endswith(f'the file probably holds 2-byte tokens: write token_size = "TwoBytes" in {data}')


def test_a_vocabulary_that_does_not_fit_in_memory_is_refused_before_the_model_is_built(tmp_path, monkeypatch):
    state = _run_files(tmp_path)
    monkeypatch.setattr("readers.tokenized.run_limits.available_memory", lambda: 1 << 20)
    monkeypatch.setattr("train.commands.token_training.NextTokenMLP", _never_built)
    result = run("train", "--config", state, "--vocab-size", "300", "--steps", "1")
    assert result.exit_code == 1, result.output
    assert result.output.strip() == ("Error: --vocab-size: a vocabulary of 300 ids, the model would take "
                                     "2.4 MiB (its parameters, Adam's moments and a step's gradients), more than the "
                                     "1.0 MiB of memory available; give a smaller --vocab-size (one more than the "
                                     "largest token id)")


def test_four_byte_tokens_read_as_two_bytes_are_refused(tmp_path):
    """Issue 27: a 4-byte file read as "TwoBytes" gave [35 0 32 0 114 0 ...], and training reported a plausible loss."""
    state = _run_files(tmp_path)
    path = tmp_path / "tokens" / "t.bin"
    np.fromfile(path, "<u2").astype("<u4").tofile(path)
    result = run("train", "--config", state, "--steps", "1")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.output.strip() == (
        f'Error: {path}: read as 2-byte tokens (token_size = "TwoBytes"), every second token is 0 in a sample of '
        '2,048: probably 4-byte tokens; read them with token_size = "FourBytes" (in the folder\'s data.toml, or '
        "token_size=4); if they are 2-byte tokens, record their vocab_size in the data.toml (or pass vocab_size=), "
        "which says so")
    data = tmp_path / "tokens" / "data.toml"
    data.write_text(data.read_text().replace('"TwoBytes"', '"FourBytes"'))
    assert run("train", "--config", state, "--steps", "1").exit_code == 0


def test_a_recorded_vocabulary_is_the_models_and_bounds_the_ids(tmp_path):
    state = _run_files(tmp_path)
    data = tmp_path / "tokens" / "data.toml"
    data.write_text(data.read_text() + "vocab_size = 256\n")
    result = run("train", "--config", state, "--steps", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"model nexttoken: vocabulary 256 (vocab_size in {data}); 69 windows")
    data.write_text(data.read_text().replace("vocab_size = 256", "vocab_size = 100"))
    refused = run("train", "--config", state, "--steps", "1")
    assert refused.exit_code == 1, refused.output
    assert refused.output.strip() == (f"Error: {tmp_path / 'tokens' / 't.bin'} holds the token id 115, beyond "
                                      "vocab_size = 100 (ids 0..99), which its data.toml records: is token_size right? "
                                      "If it is, the data.toml is stale: correct its vocab_size")


def test_a_server_gives_the_vocabulary_its_data_toml_records(tmp_path):
    state = _run_files(tmp_path)
    with readers.serve(readers.tokens(tmp_path / "tokens", seq_len=16), info={"seq_len": 16, "token_size": 2,
                                                                           "vocab_size": 200}) as server:
        (tmp_path / "state.toml").write_text(STATE.format(location=f'Server = "{server.address}"'))
        result = run("train", "--config", state, "--steps", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("model nexttoken: vocabulary 200 (vocab_size in the server's data.toml); ")


def test_four_byte_tokens_of_a_vocabulary_over_65536_read_as_two_bytes_are_refused(tmp_path):
    """Trial of issue 27, problem 3 (mended on main before this test): 4-byte ids, 1% of them 65,536 or more, read
    with the reference's data.toml (TwoBytes, no vocab_size) trained: "vocabulary 30000", loss 9.89."""
    state = _run_files(tmp_path)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 30_000, 20_000).astype("<u4")
    big = rng.choice(len(ids), 200, replace=False)
    ids[big] = rng.integers(65_536, 100_000, len(big))
    path = tmp_path / "tokens" / "t.bin"
    ids.tofile(path)
    result = run("train", "--config", state, "--steps", "1")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.output.startswith(f'Error: {path}: read as 2-byte tokens (token_size = "TwoBytes"), every second '
                                    "token is "), result.output
    assert ": probably 4-byte tokens; read them with token_size = \"FourBytes\"" in result.output
