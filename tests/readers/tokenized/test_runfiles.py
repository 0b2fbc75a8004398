"""readers.tokenized.runfiles: data.toml and state.toml as Psyche's config/ examples write them.

tests/readers/runfiles/ holds copies of Psyche's published examples
(PsycheFoundation/psyche, config/): server/ is
llama2-20m-dolma-noverify-no-checkpointer (dir pointed at ../tokens), http/ is
solana-test/light-config.toml, weighted/ is consilience/state.toml, dummy/ is
test/state.toml; local/ and local-table/ are the server example with its
data_location swapped for the Local forms.

psyche-*/ are verbatim copies of Psyche's
config/llama2-20m-dolma-noverify-no-checkpointer/state.toml at four commits:
psyche-main/ at main 0bdb13d94a05675da93d69ffa5d4c4e5a680736c (2026-03-20),
psyche-newer/ at split-coord 5d46751f25f0ae3515a2331143488ff2867b4c29
(2026-03-24: [model_extra_data], checkpoint_source), psyche-round-apply/ at
8355bd61a34355f558c0c42f6ee11e9ceddd95bf (round_apply_time) and
psyche-rounds-per-epoch/ at 14780710f696a6dc14ef51a08ad65ad2eeae8b58
(rounds_per_epoch); psyche-newer-weighted/ is config/consilience/state.toml at
5d46751f (a WeightedHttp location under [model_extra_data]).
"""
import pathlib
import pickle

import pytest

from readers.ops.shuffling import shuffle
from readers.sources.in_memory import from_sequence
from readers.tokenized.runfiles import (
    LocalData,
    RunConfig,
    RunFileError,
    ServerData,
    load_data,
    load_run,
)

HERE = pathlib.Path(__file__).parent / "runfiles"
TOKENS = str(HERE / "tokens")
SERVER_STATE = (HERE / "server" / "state.toml").read_text()
PSYCHE_SEED = int.from_bytes(bytes(range(1, 33)), "little")  # Psyche's examples' shuffle_seed = [1, ..., 32]
EXAMPLE_IGNORED = (
    "run_id", "run_state",
    "config.warmup_time", "config.cooldown_time", "config.epoch_time", "config.max_round_train_time",
    "config.round_witness_time", "config.min_clients", "config.init_min_clients", "config.verification_percent",
    "config.witness_nodes", "config.waiting_for_members_extra_time",
    "model.LLM.architecture", "model.LLM.data_type", "model.LLM.cold_start_warmup_steps", "model.LLM.checkpoint",
    "model.LLM.lr_schedule", "model.LLM.optimizer",
)
MINIMAL_STATE = """[config]
global_batch_size_start = 8
global_batch_size_end = 16
global_batch_size_warmup_tokens = 1000
total_steps = 100

[model.LLM]
max_seq_len = 512
"""


def write(folder: pathlib.Path, name: str, text: str) -> pathlib.Path:
    path = folder / name
    path.write_text(text)
    return path


def data_text(**lines: str) -> str:
    """A data.toml's text: the four keys in Psyche's order, each overridable (None leaves it out)."""
    keys = {"dir": '"tokens"', "token_size": '"TwoBytes"', "seq_len": "2048", "shuffle_seed": "7"} | lines
    return "".join(f"{k} = {v}\n" for k, v in keys.items() if v is not None)


def check(excinfo: pytest.ExceptionInfo, path: object, key: str | None, *fragments: str) -> None:
    err = excinfo.value
    assert (err.path, err.key) == (str(path), key)
    assert str(err).startswith(f"{path}: {key}: " if key else f"{path}: ")
    for fragment in fragments:
        assert fragment in str(err)


# -- data.toml ------------------------------------------------------------------------------

def test_load_data_reads_psyche_example():
    data = load_data(HERE / "server" / "data.toml")
    assert (data.dir, data.token_size, data.seq_len, data.shuffle_seed) == (TOKENS, 2, 2048, PSYCHE_SEED)


@pytest.mark.parametrize("written, size", [('"TwoBytes"', 2), ('"FourBytes"', 4), ("2", 2), ("4", 4)])
def test_load_data_token_size_spellings(tmp_path, written, size):
    (tmp_path / "tokens").mkdir()
    assert load_data(write(tmp_path, "data.toml", data_text(token_size=written))).token_size == size


@pytest.mark.parametrize("written, seed", [
    ("7", 7), (None, None), ('"DontShuffle"', None), ("[" + ", ".join(["255"] * 32) + "]", 2 ** 256 - 1),
    ("[0, 1" + ", 0" * 30 + "]", 256),  # little-endian: byte i is worth 256 ** i
])
def test_load_data_shuffle_seed_forms(tmp_path, written, seed):
    (tmp_path / "tokens").mkdir()
    assert load_data(write(tmp_path, "data.toml", data_text(shuffle_seed=written))).shuffle_seed == seed


def test_load_data_dir_is_relative_to_the_file_not_the_working_folder(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert load_data(HERE / "server" / "data.toml").dir == TOKENS
    monkeypatch.chdir(HERE)
    assert load_data("server/data.toml").dir == TOKENS


def test_load_data_absolute_dir_is_kept(tmp_path):
    path = write(tmp_path, "data.toml", data_text(dir=f'"{TOKENS}"'))
    assert load_data(path).dir == TOKENS


def test_psyche_seed_drives_a_shuffle():
    reader = shuffle(from_sequence(range(50)), seed=PSYCHE_SEED)
    first = list(reader())
    assert sorted(first) == list(range(50)) and first != list(range(50))
    assert list(shuffle(from_sequence(range(50)), seed=PSYCHE_SEED)()) == first


@pytest.mark.parametrize("lines, key, fragments", [
    ({"token_size": '"TwoByte"'}, "token_size", ["got 'TwoByte'", "did you mean 'TwoBytes'?"]),
    ({"token_size": "3"}, "token_size", ["got 3", '"TwoBytes"']),
    ({"seq_len": "0"}, "seq_len", ["must be >= 1, got 0", "seq_len = 2048"]),
    ({"seq_len": '"2048"'}, "seq_len", ["must be an integer, got '2048'"]),
    ({"seq_len": None}, "seq_len", ["missing; add seq_len = 2048"]),
    ({"dir": '"nowhere"'}, "dir", ["'nowhere'", "no such folder", "relative to this file's folder"]),
    ({"dir": '"data.toml"'}, "dir", ["is a file, not a folder"]),
    ({"dir": "3"}, "dir", ["must be a folder path (a string), got 3"]),
    ({"shuffle_seed": "[1, 2, 3]"}, "shuffle_seed", ["32 byte values, got 3"]),
    ({"shuffle_seed": "[1, 256" + ", 0" * 30 + "]"}, "shuffle_seed[1]", ["a byte (an integer 0..255), got 256"]),
    ({"shuffle_seed": "[-1" + ", 0" * 31 + "]"}, "shuffle_seed[0]", ["got -1"]),
    ({"shuffle_seed": "[true" + ", 0" * 31 + "]"}, "shuffle_seed[0]", ["got True"]),
    ({"shuffle_seed": "-5"}, "shuffle_seed", ["a seed must be >= 0, got -5"]),
    ({"shuffle_seed": '"Seeded"'}, "shuffle_seed", ["32 byte values or an integer, got 'Seeded'"]),
    ({"shuffle_seeds": "7"}, "shuffle_seeds", ["unknown key 'shuffle_seeds'", "did you mean 'shuffle_seed'?"]),
])
def test_load_data_errors_name_file_key_and_fix(tmp_path, lines, key, fragments):
    (tmp_path / "tokens").mkdir()
    path = write(tmp_path, "data.toml", data_text(**lines))
    with pytest.raises(RunFileError) as excinfo:
        load_data(path)
    check(excinfo, path, key, *fragments)


# -- state.toml: the reference forms ----------------------------------------------------------

def test_load_run_reads_psyche_server_example():
    assert load_run(HERE / "server" / "state.toml") == RunConfig(
        batch_start=8, batch_end=8, warmup_tokens=0, total_steps=25000, seq_len=2048,
        data=ServerData("127.0.0.1", 20001), ignored=EXAMPLE_IGNORED)


def test_load_run_local_folder_takes_size_and_seed_from_its_data_toml():
    run = load_run(HERE / "local" / "state.toml")
    assert run.data == LocalData(TOKENS, token_size=4, shuffle_seed=PSYCHE_SEED, seq_len=2048)
    assert run.ignored == EXAMPLE_IGNORED


def test_load_run_local_table_is_self_contained():
    run = load_run(HERE / "local-table" / "state.toml")
    # the table's TwoBytes and seed win over the folder's data.toml (FourBytes, seed 1..32)
    assert run.data == LocalData(TOKENS, 2, int.from_bytes(bytes(range(32, 0, -1)), "little"), 2048)


def test_load_run_local_folder_without_data_toml_defaults_to_two_bytes_in_order(tmp_path):
    (tmp_path / "tokens").mkdir()
    path = write(tmp_path, "state.toml", MINIMAL_STATE + 'data_location = { Local = "tokens" }\n')
    run = load_run(path)
    assert run == RunConfig(8, 16, 1000, 100, 512, LocalData(str(tmp_path / "tokens"), 2, None, 512), ())


@pytest.mark.parametrize("location, data", [
    ('[model.LLM.data_location.Local]\npath = "tokens"\ntoken_size_in_bytes = "FourBytes"\nshuffle = "DontShuffle"\n',
     ("tokens", 4, None)),
    ('data_location = { Local = { path = "tokens", token_size_in_bytes = 2, shuffle = { Seeded = 9 } } }\n',
     ("tokens", 2, 9)),
    ('[model.LLM.data_location.Local]\npath = "tokens"\ntoken_size_in_bytes = "TwoBytes"\n'
     '[model.LLM.data_location.Local.shuffle]\nSeeded = [5' + ', 0' * 31 + ']\n', ("tokens", 2, 5)),
])
def test_load_run_local_table_forms(tmp_path, location, data):
    (tmp_path / "tokens").mkdir()
    run = load_run(write(tmp_path, "state.toml", MINIMAL_STATE + location))
    assert run.data == LocalData(str(tmp_path / data[0]), data[1], data[2], 512)


@pytest.mark.parametrize("location, host, port", [
    ('[model.LLM.data_location]\nServer = "10.0.0.2:8000"\n', "10.0.0.2", 8000),
    ('data_location = { Server = "localhost:20001" }\n', "localhost", 20001),
    ('data_location = { Server = "[::1]:20001" }\n', "::1", 20001),
])
def test_load_run_server_forms(tmp_path, location, host, port):
    run = load_run(write(tmp_path, "state.toml", MINIMAL_STATE + location))
    assert run.data == ServerData(host, port)


def test_load_run_server_list(tmp_path):
    """Issue 30: Server may list several servers (replicas or parts), read by one readers.remote."""
    location = '[model.LLM.data_location]\nServer = ["10.0.0.2:8000", "[::1]:8001"]\n'
    run = load_run(write(tmp_path, "state.toml", MINIMAL_STATE + location))
    assert run.data == ServerData("10.0.0.2", 8000, (("::1", 8001),))
    assert run.data.addresses == ["10.0.0.2:8000", "[::1]:8001"]


@pytest.mark.parametrize("value, key, fragment", [
    ("[]", "model.LLM.data_location.Server", "is an empty list"),
    ('["10.0.0.2:8000", "10.0.0.3"]', "model.LLM.data_location.Server[1]", "must be \"host:port\", got '10.0.0.3'"),
])
def test_load_run_server_list_errors(tmp_path, value, key, fragment):
    path = write(tmp_path, "state.toml", MINIMAL_STATE + f"[model.LLM.data_location]\nServer = {value}\n")
    with pytest.raises(RunFileError) as excinfo:
        load_run(path)
    check(excinfo, path, key, fragment)


def test_load_run_paths_are_relative_to_the_file(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert load_run(HERE / "local" / "state.toml").data.path == TOKENS
    monkeypatch.chdir(HERE / "local")
    assert load_run("state.toml").data.path == TOKENS


@pytest.mark.parametrize("example, variant", [("http", "Http"), ("weighted", "WeightedHttp"), ("dummy", "Dummy")])
def test_load_run_refuses_psyche_locations_it_cannot_read(example, variant):
    path = HERE / example / "state.toml"
    with pytest.raises(RunFileError) as excinfo:
        load_run(path)
    check(excinfo, path, f"model.LLM.data_location.{variant}", f"readerkit cannot read {variant} data",
          'write Server = "host:port"', 'write Local = "folder"')


# -- state.toml: errors ------------------------------------------------------------------------

@pytest.mark.parametrize("old, new, key, fragments", [
    ("total_steps = 25000\n", "total_step = 25000\n", "config.total_step",
     ["unknown key 'total_step'; did you mean 'total_steps'?"]),
    ('run_id = "llama2-20m-dolma"', 'run_idd = "x"', "run_idd", ["did you mean 'run_id'?"]),
    ("[model.LLM]\n", "[model.LMM]\n", "model.LMM", ["did you mean 'LLM'?"]),
    ("max_seq_len = 2048\n", "max_seq_len = 2048\nmax_seqlen = 1\n", "model.LLM.max_seqlen",
     ["did you mean 'max_seq_len'?"]),
    ("global_batch_size_warmup_tokens = 0\n", "", "config.global_batch_size_warmup_tokens",
     ["missing; add global_batch_size_warmup_tokens = 0"]),
    ('total_steps = 25000\n', 'total_steps = "25000"\n', "config.total_steps", ["must be an integer, got '25000'"]),
    ("max_seq_len = 2048\n", "max_seq_len = 2048.0\n", "model.LLM.max_seq_len", ["must be an integer, got 2048.0"]),
    ("max_seq_len = 2048\n", "max_seq_len = 0\n", "model.LLM.max_seq_len", ["must be >= 1, got 0"]),
    ("global_batch_size_warmup_tokens = 0\n", "global_batch_size_warmup_tokens = -1\n",
     "config.global_batch_size_warmup_tokens", ["must be >= 0, got -1"]),
    ("global_batch_size_start = 8\n", "global_batch_size_start = 0\n", "config.global_batch_size_start",
     ["must be >= 1, got 0"]),
    ("global_batch_size_end = 8\n", "global_batch_size_end = 4\n", "config.global_batch_size_end",
     ["is 4, less than config.global_batch_size_start (8)", "make end >= start"]),
    ('Server = "127.0.0.1:20001"', 'Server = "127.0.0.1:0"', "model.LLM.data_location.Server",
     ["port must be 1..65535, got '0'", 'Server = "127.0.0.1:20001"']),
    ('Server = "127.0.0.1:20001"', 'Server = "127.0.0.1:http"', "model.LLM.data_location.Server",
     ["port must be 1..65535, got 'http'"]),
    ('Server = "127.0.0.1:20001"', 'Server = "127.0.0.1"', "model.LLM.data_location.Server",
     ["must be \"host:port\", got '127.0.0.1'"]),
    ('Server = "127.0.0.1:20001"', 'Server = "::1:20001"', "model.LLM.data_location.Server",
     ["IPv6 host not in brackets"]),
    ('Server = "127.0.0.1:20001"', "Server = 20001", "model.LLM.data_location.Server", ["got 20001"]),
    ('Server = "127.0.0.1:20001"', 'Sever = "127.0.0.1:20001"', "model.LLM.data_location.Sever",
     ["unknown data location 'Sever'; did you mean 'Server'?"]),
    ('Server = "127.0.0.1:20001"', 'Server = "127.0.0.1:20001"\nLocal = "."', "model.LLM.data_location",
     ["must name one data location"]),
    ('Server = "127.0.0.1:20001"', 'Local = "nowhere"', "model.LLM.data_location.Local",
     ["'nowhere'", "no such folder"]),
])
def test_load_run_errors_name_file_key_and_fix(tmp_path, old, new, key, fragments):
    assert old in SERVER_STATE
    path = write(tmp_path, "state.toml", SERVER_STATE.replace(old, new))
    with pytest.raises(RunFileError) as excinfo:
        load_run(path)
    check(excinfo, path, key, *fragments)


@pytest.mark.parametrize("text, key, fragments", [
    ("config = 3\n" + MINIMAL_STATE.replace("[config]\n", "[configs]\n"), "configs", ["did you mean 'config'?"]),
    ("config = 3\nmodel = 4\n", "config", ["must be a table, got 3", "[config]"]),
    (MINIMAL_STATE, "model.LLM.data_location", ["missing", "[model.LLM.data_location]"]),
    (MINIMAL_STATE.split("[model.LLM]")[0], "model", ["missing", "[model.LLM]"]),
    (MINIMAL_STATE + 'data_location = "Local"\n', "model.LLM.data_location.Local", ["needs a value"]),
    (MINIMAL_STATE + 'data_location = { Preprocessed = "x" }\n', "model.LLM.data_location.Preprocessed",
     ["readerkit cannot read Preprocessed data"]),
    (MINIMAL_STATE + "data_location = 5\n", "model.LLM.data_location", ["must name one data location, got 5"]),
    (MINIMAL_STATE + '[model.LLM.data_location.Local]\npath = "tokens"\ntoken_size_in_bytes = "TwoBytes"\n',
     "model.LLM.data_location.Local.shuffle", ["missing", 'shuffle = "DontShuffle"']),
    (MINIMAL_STATE + '[model.LLM.data_location.Local]\npaht = "tokens"\n', "model.LLM.data_location.Local.paht",
     ["did you mean 'path'?"]),
    (MINIMAL_STATE + 'data_location = { Local = { path = "tokens", token_size_in_bytes = "TwoByte", '
     'shuffle = "DontShuffle" } }\n', "model.LLM.data_location.Local.token_size_in_bytes",
     ["did you mean 'TwoBytes'?"]),
    (MINIMAL_STATE + 'data_location = { Local = { path = "tokens", token_size_in_bytes = 2, '
     'shuffle = "Dontshuffle" } }\n', "model.LLM.data_location.Local.shuffle",
     ["unknown shuffle 'Dontshuffle'; did you mean 'DontShuffle'?"]),
    (MINIMAL_STATE + 'data_location = { Local = { path = "tokens", token_size_in_bytes = 2, '
     'shuffle = { Seeded = [1, 2] } } }\n', "model.LLM.data_location.Local.shuffle.Seeded",
     ["32 byte values, got 2"]),
    (MINIMAL_STATE + 'data_location = { Local = { path = "tokens", token_size_in_bytes = 2, '
     'shuffle = { Seeded = [0, 0, 0, 300' + ', 0' * 28 + '] } } }\n', "model.LLM.data_location.Local.shuffle.Seeded[3]",
     ["got 300"]),
    (MINIMAL_STATE + 'data_location = { Local = { path = "tokens", token_size_in_bytes = 2, '
     'shuffle = { Sorted = 1 } } }\n', "model.LLM.data_location.Local.shuffle.Sorted",
     ["unknown shuffle 'Sorted'; remove it, or use one of: Seeded"]),
])
def test_load_run_errors_in_written_files(tmp_path, text, key, fragments):
    (tmp_path / "tokens").mkdir()
    path = write(tmp_path, "state.toml", text)
    with pytest.raises(RunFileError) as excinfo:
        load_run(path)
    check(excinfo, path, key, *fragments)


def test_load_run_local_data_toml_must_agree_on_seq_len(tmp_path):
    (tmp_path / "tokens").mkdir()
    described = write(tmp_path / "tokens", "data.toml", data_text(dir='"."', seq_len="1024"))
    path = write(tmp_path, "state.toml", MINIMAL_STATE + 'data_location = { Local = "tokens" }\n')
    with pytest.raises(RunFileError) as excinfo:
        load_run(path)
    assert str(excinfo.value) == (f"{described}: seq_len: is 1024, but model.LLM.max_seq_len is 512 in {path}; "
                                  "make the two equal")


def test_load_run_local_data_toml_errors_name_that_file(tmp_path):
    (tmp_path / "tokens").mkdir()
    described = write(tmp_path / "tokens", "data.toml", data_text(dir='"."', token_size='"OneByte"'))
    path = write(tmp_path, "state.toml", MINIMAL_STATE + 'data_location = { Local = "tokens" }\n')
    with pytest.raises(RunFileError) as excinfo:
        load_run(path)
    check(excinfo, described, "token_size", "got 'OneByte'")


def test_unknown_key_message_is_exact(tmp_path):
    path = write(tmp_path, "state.toml", SERVER_STATE.replace("total_steps = 25000\n", "total_step = 25000\n"))
    with pytest.raises(RunFileError) as excinfo:
        load_run(path)
    assert str(excinfo.value) == f"{path}: config.total_step: unknown key 'total_step'; did you mean 'total_steps'?"


# -- Psyche's older and newer layouts ------------------------------------------------------------

NEWER_IGNORED = tuple(k for k in EXAMPLE_IGNORED if not k.startswith("model.LLM.")) + (
    "model.LLM.cold_start_warmup_steps", "model.LLM.checkpoint_source",
    "model_extra_data.architecture", "model_extra_data.data_type", "model_extra_data.lr_schedule",
    "model_extra_data.optimizer", "model_extra_data.checkpoint",
)


def older(*extra: str, replacing: str = "") -> tuple[str, ...]:
    """EXAMPLE_IGNORED with ``extra`` config keys, in the file's order (after round_witness_time)."""
    keys = [k for k in EXAMPLE_IGNORED if k != replacing]
    at = keys.index("config.round_witness_time") + 1
    keys[at:at] = extra
    if replacing:
        keys.insert(keys.index("config.cooldown_time") + 1, "config.rounds_per_epoch")
    return tuple(keys)


@pytest.mark.parametrize("folder, ignored", [
    ("psyche-main", EXAMPLE_IGNORED),
    ("psyche-newer", NEWER_IGNORED),
    ("psyche-round-apply", older("config.round_apply_time")),
    ("psyche-rounds-per-epoch", older("config.round_apply_time", replacing="config.epoch_time")),
])
def test_load_run_reads_psyche_layouts(folder, ignored):
    run = load_run(HERE / folder / "state.toml")
    assert run == RunConfig(8, 8, 0, 25000, 2048, ServerData("127.0.0.1", 20001), ignored)


def test_load_run_newer_layout_refuses_weighted_http_by_its_key():
    path = HERE / "psyche-newer-weighted" / "state.toml"
    with pytest.raises(RunFileError) as excinfo:
        load_run(path)
    check(excinfo, path, "model_extra_data.data_location.WeightedHttp", "readerkit cannot read WeightedHttp data")


def test_load_run_newer_layout_local_folder(tmp_path):
    (tmp_path / "tokens").mkdir()
    path = write(tmp_path, "state.toml", MINIMAL_STATE + 'checkpoint_source = "Stored"\n[model_extra_data]\n'
                 'architecture = "HfLlama"\ndata_location = { Local = "tokens" }\n')
    run = load_run(path)
    assert run.data == LocalData(str(tmp_path / "tokens"), 2, None, 512)
    assert run.ignored == ("model.LLM.checkpoint_source", "model_extra_data.architecture")


@pytest.mark.parametrize("text, key, fragments", [
    (MINIMAL_STATE + 'data_location = { Server = "127.0.0.1:1" }\n[model_extra_data.data_location]\n'
     'Server = "127.0.0.1:2"\n', "model_extra_data.data_location",
     ["given twice: as model.LLM.data_location and as model_extra_data.data_location", "keep only one"]),
    (MINIMAL_STATE + '[model_extra_data]\narchitecture = "HfLlama"\n', "model.LLM.data_location",
     ["missing", "[model.LLM.data_location]", "[model_extra_data.data_location]"]),
    (MINIMAL_STATE + '[model_extra_data]\ndata_locaton = { Server = "127.0.0.1:1" }\n',
     "model_extra_data.data_locaton", ["did you mean 'data_location'?"]),
    ("model_extra_data = 3\n" + MINIMAL_STATE, "model_extra_data", ["must be a table, got 3", "[model_extra_data]"]),
    (MINIMAL_STATE + '[model_extra_data.data_location]\nServer = "127.0.0.1"\n',
     "model_extra_data.data_location.Server", ["must be \"host:port\""]),
])
def test_load_run_layout_errors(tmp_path, text, key, fragments):
    path = write(tmp_path, "state.toml", text)
    with pytest.raises(RunFileError) as excinfo:
        load_run(path)
    check(excinfo, path, key, *fragments)


# -- the files themselves ----------------------------------------------------------------------

def test_syntax_error_names_file_line_and_text(tmp_path):
    path = write(tmp_path, "state.toml", SERVER_STATE.replace("total_steps = 25000", "total_steps == 25000"))
    line = SERVER_STATE.splitlines().index("total_steps = 25000") + 1
    with pytest.raises(RunFileError) as excinfo:
        load_run(path)
    assert str(excinfo.value) == (f"{path}: line {line}, column 14: not valid TOML (Invalid value); "
                                  "correct the TOML syntax of that line: 'total_steps == 25000'")
    assert excinfo.value.__cause__ is None and excinfo.value.__suppress_context__


@pytest.mark.parametrize("load, name", [(load_data, "data.toml"), (load_run, "state.toml")])
def test_missing_file_and_folder_given_for_file(tmp_path, load, name):
    with pytest.raises(RunFileError) as excinfo:
        load(tmp_path / name)
    assert str(excinfo.value) == f"{tmp_path / name}: no such file; give the path of the {name} file"
    with pytest.raises(RunFileError) as excinfo:
        load(tmp_path)
    assert str(excinfo.value) == f"{tmp_path}: is a folder, not a file; give the path of the {name} file"


def test_not_utf8_is_one_error(tmp_path):
    path = tmp_path / "state.toml"
    path.write_bytes(b'run_id = "caf\xe9"\n')
    with pytest.raises(RunFileError) as excinfo:
        load_run(path)
    check(excinfo, path, None, "not UTF-8 text (byte 0xe9 at offset 13)", "save the file as UTF-8")


def test_run_file_error_is_a_value_error_and_pickles(tmp_path):
    with pytest.raises(ValueError) as excinfo:
        load_run(tmp_path / "state.toml")
    again = pickle.loads(pickle.dumps(excinfo.value))
    assert type(again) is RunFileError and str(again) == str(excinfo.value) and again.key is None


def test_results_are_frozen():
    run = load_run(HERE / "server" / "state.toml")
    with pytest.raises(AttributeError):
        run.total_steps = 1
    with pytest.raises(AttributeError):
        run.data.port = 1


# -- the wrong kind of file (issue 27, item 5) ----------------------------------------------

def test_a_data_toml_given_to_load_run_says_which_kind_it_is_and_which_is_expected():
    path = HERE / "server" / "data.toml"
    with pytest.raises(RunFileError) as excinfo:
        load_run(path, caller="train --config")
    check(excinfo, path, None,  # before: "dir: unknown key 'dir'; remove it, or use one of: config, model, ..."
          "this is a token folder's data.toml (dir, token_size, seq_len), but train --config expects a run file "
          "(state.toml, with [config] and [model.LLM]); give the run's state.toml, or write one whose "
          f'[model.LLM.data_location] is Local = "{HERE / "server"}" (the folder of this data.toml)')


@pytest.mark.parametrize("location, advice", [
    ('Local = "tokens"', "this run's tokens are described by {folder}/tokens/data.toml: give that file"),
    ('Local = "bare"', "this run's token folder {folder}/bare has no data.toml: write one there"),
    ('Server = "10.0.0.1:20001"', "this run reads its tokens from the server at 10.0.0.1:20001: give the "
                                  "data.toml that server was started with"),
    (None, "give the data.toml of a token folder"),
])
def test_a_state_toml_given_to_load_data_says_which_kind_it_is_and_where_its_data_toml_is(tmp_path, location, advice):
    (tmp_path / "tokens").mkdir()
    (tmp_path / "bare").mkdir()
    write(tmp_path / "tokens", "data.toml", data_text(dir='"."'))
    state = MINIMAL_STATE + ("" if location is None else f"[model.LLM.data_location]\n{location}\n")
    path = write(tmp_path, "state.toml", state)
    with pytest.raises(RunFileError) as excinfo:
        load_data(path, caller="serve --config")
    check(excinfo, path, None,  # before: "config: unknown key 'config'; remove it, or use one of: dir, ..."
          "this is a run file (state.toml, with [config] and [model.LLM]), but serve --config expects a token "
          "folder's data.toml (dir, token_size, seq_len); " + advice.format(folder=tmp_path))


def test_a_file_of_neither_kind_still_gets_the_key_by_key_errors(tmp_path):
    path = write(tmp_path, "other.toml", "colour = 1\n")
    with pytest.raises(RunFileError) as excinfo:
        load_run(path)
    check(excinfo, path, "colour", "unknown key 'colour'")


def test_data_toml_records_the_vocabulary_size(tmp_path):
    """Issue 27: a data.toml records the vocabulary with the token size; one without it (Psyche's) still reads."""
    from readers.tokenized.runfiles import data_text, write_data
    path = write_data(tmp_path, data_text(token_size=2, vocab_size=256, seq_len=64, shuffle_seed=PSYCHE_SEED))
    data = load_data(path)
    assert (data.token_size, data.vocab_size, data.seq_len, data.shuffle_seed) == (2, 256, 64, PSYCHE_SEED)
    (tmp_path / "data.toml").write_text('dir = "."\ntoken_size = "TwoBytes"\nseq_len = 64\n')
    assert load_data(path).vocab_size is None
    (tmp_path / "data.toml").write_text('dir = "."\ntoken_size = "TwoBytes"\nseq_len = 64\nvocab_size = 70000\n')
    with pytest.raises(RunFileError, match='vocab_size: is 70000, more ids than 2-byte tokens hold .65,536.; write '
                                           'token_size = "FourBytes" if the tokens are 4 bytes each'):
        load_data(path)
    state = tmp_path / "state.toml"
    state.write_text('[config]\nglobal_batch_size_start = 1\nglobal_batch_size_end = 1\n'
                     'global_batch_size_warmup_tokens = 0\ntotal_steps = 1\n[model.LLM]\nmax_seq_len = 64\n'
                     '[model.LLM.data_location]\nLocal = "."\n')
    (tmp_path / "data.toml").write_text('dir = "."\ntoken_size = "FourBytes"\nseq_len = 64\nvocab_size = 70000\n')
    run = load_run(state)
    assert (run.data.token_size, run.data.vocab_size, run.data.data_file) == (4, 70000, str(tmp_path / "data.toml"))
