"""readers.tokenized.runfile_fields: each kind of value in Psyche's run files, its checks and its error."""
import importlib.util
import sys
import types

import pytest

from readers.tokenized import runfile_fields, runfiles
from readers.tokenized.runfile_fields import (
    EXAMPLES,
    RunFileError,
    check_keys,
    folder,
    host_port,
    integer,
    read_toml,
    seed,
    shuffle,
    subtable,
    token_size,
    unknown,
)

tomllib = runfile_fields.tomllib  # the standard library's, or tomli on Python 3.10


@pytest.mark.parametrize("text, line, column, source", [
    ('a = "x', 1, 7, 'a = "x'),       # tomllib says "at end of document": the last line's end
    ("a = 1\nb = ", 2, 5, "b = "),
    ("[a\n", 1, 3, "[a"),
])
def test_read_toml_syntax_error_names_line_column_and_text(tmp_path, text, line, column, source):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(RunFileError) as excinfo:
        read_toml(str(path), "run.toml")
    assert excinfo.value.key is None
    assert str(excinfo.value).startswith(f"{path}: line {line}, column {column}: not valid TOML (")
    assert str(excinfo.value).endswith(f"; correct the TOML syntax of that line: {source!r}")


def test_read_toml_reads_a_document(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[model.LLM.data_location]\nServer = "127.0.0.1:20001"\n')
    assert read_toml(str(path), "run.toml") == {"model": {"LLM": {"data_location": {"Server": "127.0.0.1:20001"}}}}


def test_falls_back_to_tomli_without_tomllib(monkeypatch, tmp_path):
    """Python 3.10 has no tomllib: the module imports the tomli backport under that name."""
    parsed = []
    fake = types.ModuleType("tomli")
    fake.loads = lambda text: parsed.append(text) or tomllib.loads(text)
    fake.TOMLDecodeError = tomllib.TOMLDecodeError
    monkeypatch.setitem(sys.modules, "tomllib", None)  # `import tomllib` now raises ModuleNotFoundError
    monkeypatch.setitem(sys.modules, "tomli", fake)
    spec = importlib.util.spec_from_file_location("runfile_fields_on_310", runfile_fields.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.tomllib is fake
    path = tmp_path / "data.toml"
    path.write_text("seq_len = 2048\n")
    assert module.read_toml(str(path), "data.toml") == {"seq_len": 2048}
    assert parsed == ["seq_len = 2048\n"]


@pytest.mark.parametrize("word, known, fix", [
    ("total_step", ["total_steps", "epoch_time"], "did you mean 'total_steps'?"),
    ("server", ["Server", "Local"], "did you mean 'Server'?"),
    ("colour", ["dir", "seq_len"], "remove it, or use one of: dir, seq_len"),
])
def test_unknown_suggests_the_closest_name(word, known, fix):
    err = unknown("f.toml", f"t.{word}", word, known)
    assert (err.key, err.fix, str(err)) == (f"t.{word}", fix, f"f.toml: t.{word}: unknown key {word!r}; {fix}")


def test_check_keys_unknown_before_missing():
    with pytest.raises(RunFileError, match="unknown key 'seqlen'; did you mean 'seq_len'"):
        check_keys("d.toml", {"seqlen": 1}, "", ["dir", "seq_len"], required=["dir"])
    with pytest.raises(RunFileError, match=r"^d.toml: dir: missing; add dir = \"tokens\"$"):
        check_keys("d.toml", {"seq_len": 1}, "", ["dir", "seq_len"], required=["dir"])


def test_every_required_key_has_an_example():
    required = (runfiles.DATA_KEYS + runfiles.CONFIG_USED + runfiles.LLM_USED + runfiles.LOCAL_KEYS
                + ("config", "model", "LLM"))
    assert set(required) <= set(EXAMPLES)


def test_subtable_needs_a_table():
    assert subtable("s.toml", {"config": {"a": 1}}, "", "config") == {"a": 1}
    with pytest.raises(RunFileError, match=r"^s.toml: model.LLM: must be a table, got 'x'"):
        subtable("s.toml", {"LLM": "x"}, "model", "LLM")


@pytest.mark.parametrize("value, problem", [
    (True, "must be an integer, got True"), (1.0, "must be an integer, got 1.0"), ("1", "must be an integer, got '1'"),
    (-1, "must be >= 0, got -1"),
])
def test_integer_refuses_non_integers_and_small_ones(value, problem):
    with pytest.raises(RunFileError) as excinfo:
        integer("s.toml", {"global_batch_size_warmup_tokens": value}, "config", "global_batch_size_warmup_tokens", 0)
    assert (excinfo.value.key, excinfo.value.problem) == ("config.global_batch_size_warmup_tokens", problem)
    assert excinfo.value.fix == "write it as global_batch_size_warmup_tokens = 0"


def test_integer_takes_big_values():
    assert integer("s.toml", {"total_steps": 549755813888}, "config", "total_steps", 1) == 549755813888


@pytest.mark.parametrize("value, fix", [
    ("FourByte", "did you mean 'FourBytes'?"), (True, 'write "TwoBytes"'), (2.0, 'write "TwoBytes"'),
    (8, 'write "TwoBytes"'), (None, 'write "TwoBytes"'),
])
def test_token_size_refuses_other_sizes(value, fix):
    with pytest.raises(RunFileError) as excinfo:
        token_size("d.toml", "token_size", value)
    assert excinfo.value.fix.startswith(fix)


@pytest.mark.parametrize("values, expected", [
    ([0] * 32, 0), ([1] + [0] * 31, 1), ([0] * 31 + [128], 2 ** 255), (list(range(1, 33)),
                                                                       int.from_bytes(bytes(range(1, 33)), "little")),
])
def test_seed_reads_32_bytes_little_endian(values, expected):
    assert seed("d.toml", "shuffle_seed", values) == expected


def test_seed_accepts_an_int_and_refuses_floats():
    assert seed("d.toml", "shuffle_seed", 2 ** 300) == 2 ** 300
    with pytest.raises(RunFileError, match="32 byte values or an integer, got 1.5"):
        seed("d.toml", "shuffle_seed", 1.5)
    with pytest.raises(RunFileError, match=r"shuffle_seed\[31\]: must be a byte .*got 1.0"):
        seed("d.toml", "shuffle_seed", [0] * 31 + [1.0])


@pytest.mark.parametrize("value, problem", [
    (3, 'must be "DontShuffle" or { Seeded = [...] }, got 3'),
    ({"Seeded": [0] * 32, "More": 1}, "must be \"DontShuffle\" or { Seeded = [...] }, got {'Seeded'"),
])
def test_shuffle_refuses_other_shapes(value, problem):
    with pytest.raises(RunFileError) as excinfo:
        shuffle("s.toml", "x.shuffle", value)
    assert excinfo.value.problem.startswith(problem)


def test_folder_is_resolved_against_the_file_folder(tmp_path):
    (tmp_path / "a" / "tokens").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    assert folder(str(tmp_path / "b" / "state.toml"), "dir", "../a/tokens") == str(tmp_path / "a" / "tokens")
    assert folder(str(tmp_path / "b" / "state.toml"), "dir", str(tmp_path / "a")) == str(tmp_path / "a")
    with pytest.raises(RunFileError, match="must be a folder path"):
        folder(str(tmp_path / "state.toml"), "dir", "")


@pytest.mark.parametrize("value, parsed", [
    ("127.0.0.1:20001", ("127.0.0.1", 20001)), ("[2001:db8::1]:1", ("2001:db8::1", 1)),
    ("data.example:65535", ("data.example", 65535)),
])
def test_host_port_accepts(value, parsed):
    assert host_port("s.toml", "Server", value) == parsed


@pytest.mark.parametrize("value, problem", [
    (":20001", 'must be "host:port"'), ("[]:20001", 'must be "host:port"'), ("h:65536", "port must be 1..65535"),
    ("h:", "port must be 1..65535"), ("h:２", "port must be 1..65535"), ("h:-1", "port must be 1..65535"),
    (["h", 1], 'must be "host:port"'),
])
def test_host_port_refuses(value, problem):
    with pytest.raises(RunFileError) as excinfo:
        host_port("s.toml", "Server", value)
    assert excinfo.value.problem.startswith(problem)
    assert "127.0.0.1:20001" in excinfo.value.fix


# -- nesting (issue 27 item 17: 500 nested inline tables were a RecursionError traceback) ---------------------------


@pytest.mark.parametrize("kind", ["state.toml", "data.toml"])
@pytest.mark.parametrize("value", ["{a = " * 500 + "1" + "}" * 500, "[" * 500 + "1" + "]" * 500],
                         ids=["inline tables", "arrays"])
def test_read_toml_refuses_values_nested_past_the_parser_with_the_line_and_key(tmp_path, value, kind):
    """Trial of issue 27, problem 9: a data.toml nested too deep was told "a run file's tables ..."; the advice
    names the kind of file read."""
    path = tmp_path / kind
    path.write_text(f'run_id = "x"\n[config]\n# a comment with {{[ brackets\nwarmup_time = {value}\n')
    with pytest.raises(RunFileError) as caught:
        read_toml(str(path), kind)
    assert str(caught.value) == (f"{path}: config.warmup_time: line 4: nested more than 32 deep; a {kind}'s tables "
                                 "and arrays nest a few levels: write them flat")


def test_read_toml_refuses_values_nested_deep_within_the_parser_naming_the_dotted_key(tmp_path):
    path = tmp_path / "state.toml"
    path.write_text("[config]\n" + "x." * 600 + "y = 1\n")  # dotted keys nest without brackets
    with pytest.raises(RunFileError, match=r"state\.toml: config\.x\.x\.\.\.: nested more than 32 deep; a state\.toml's"):
        read_toml(str(path), "state.toml")
    with pytest.raises(RunFileError, match=r"state\.toml: config\.x\.x\.\.\.: nested more than 32 deep; a data\.toml's"):
        read_toml(str(path), "data.toml")  # (named as the caller reads it)
    path.write_text("[config]\nwarmup_time = " + "[" * 20 + "1" + "]" * 20 + "\n")  # 22 deep: read
    assert read_toml(str(path), "state.toml")["config"]["warmup_time"] == [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]
