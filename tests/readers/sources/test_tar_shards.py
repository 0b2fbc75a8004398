"""readers.sources.tar_shards: WebDataset shards written by webdataset's own ShardWriter, read back."""
import io
import json
import os
import pickle
import tarfile
import warnings

import numpy as np
import pytest

import readers
from readers.sources.tar_shards import TarMemberError, TarShardError, split_name
from readers.testing import assert_resumes_at_every_step, assert_seeded_passes

wds = pytest.importorskip("webdataset")
Image = pytest.importorskip("PIL.Image")

N, PER_SHARD = 11, 3  # 4 shards: 3 + 3 + 3 + 2 samples


def _image(i: int, size: int = 8) -> np.ndarray:
    return ((np.arange(size * size * 3).reshape(size, size, 3) * (i + 1)) % 256).astype(np.uint8)


def _encoded(array: np.ndarray, fmt: str) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, format=fmt)
    return out.getvalue()


def _write(folder, n=N, per_shard=PER_SHARD, extra=None):
    """Shards of n samples by ShardWriter: a PNG (lossless, compared exactly), a JPEG, .npy, .json, .txt, .cls."""
    pattern = os.path.join(str(folder), "shard-%03d.tar")
    with wds.ShardWriter(pattern, maxcount=per_shard, verbose=0) as sink:
        for i in range(n):
            sample = {"__key__": f"sample{i:04d}", "png": _encoded(_image(i), "PNG"),
                      "jpg": _encoded(_image(i), "JPEG"), "npy": np.full(3, i, np.int32),
                      "json": {"i": i}, "txt": f"text {i}", "cls": i % 5, "bin": bytes([i])}
            if extra:
                sample.update(extra(i))
            sink.write(sample)
    return sorted(os.path.join(str(folder), f) for f in os.listdir(folder))


@pytest.fixture
def shards(tmp_path):
    return _write(tmp_path)


def _ids(entries):
    """The sample numbers of entries, decoded or not (a .txt field is 'text i')."""
    return [int(e["txt"].split()[-1]) for e in entries]


def test_tar_shards_reads_back_what_shard_writer_wrote(shards):
    assert len(shards) == 4
    entries = list(readers.tar_shards(shards)())
    assert [e["__key__"] for e in entries] == [f"sample{i:04d}" for i in range(N)]
    for i, e in enumerate(entries):
        assert set(e) == {"__key__", "png", "jpg", "npy", "json", "txt", "cls", "bin"}
        assert e["png"].dtype == np.uint8 and e["png"].shape == (8, 8, 3)
        np.testing.assert_array_equal(e["png"], _image(i))
        assert e["jpg"].shape == (8, 8, 3) and e["jpg"].dtype == np.uint8
        np.testing.assert_array_equal(e["npy"], np.full(3, i, np.int32))
        assert (e["json"], e["txt"], e["cls"], e["bin"]) == ({"i": i}, f"text {i}", i % 5, bytes([i]))


def test_tar_shards_keys_and_fields_as_webdataset_gives_them(shards):
    ours = list(readers.tar_shards(shards, decode=False)())
    theirs = list(wds.WebDataset(shards, shardshuffle=False))
    assert [e["__key__"] for e in ours] == [e["__key__"] for e in theirs]
    assert [{k: v for k, v in e.items() if not k.startswith("__")} for e in ours] == \
           [{k: v for k, v in e.items() if not k.startswith("__")} for e in theirs]


@pytest.mark.parametrize("urls", ["shard-{000..003}.tar", "shard-*.tar", ".", ["shard-000.tar", "shard-00[1-3].tar"]])
def test_tar_shards_takes_lists_globs_folders_and_brace_patterns(shards, tmp_path, urls):
    given = [str(tmp_path / u) for u in urls] if isinstance(urls, list) else str(tmp_path / urls)
    assert _ids(readers.tar_shards(given)()) == list(range(N))


def test_tar_shards_decode_options(shards):
    upper = readers.tar_shards(shards, decode={"txt": bytes.upper})
    assert next(iter(upper()))["txt"] == b"TEXT 0"
    rest = readers.tar_shards(shards, decode=lambda ext, data: (ext, len(data)))
    assert next(iter(rest()))["bin"] == ("bin", 1)
    with pytest.raises(TypeError, match="decode="):
        readers.tar_shards(shards, decode="rgb8")
    with pytest.raises(ValueError, match="on_error must be"):
        readers.tar_shards(shards, on_error="warn")


def test_split_name_is_webdatasets():
    assert split_name("a/b.c/x.seg.png") == ("a/b.c/x", "seg.png")


def test_tar_shards_is_lazy_and_pickles(tmp_path):
    paths = _write(tmp_path, n=4)
    r = readers.tar_shards(paths)
    for p in paths:
        os.remove(p)  # nothing was opened when it was made: the files are first read in a pass
    with pytest.raises(FileNotFoundError, match="shard-000.tar"):
        list(r())
    _write(tmp_path, n=4)
    assert _ids(pickle.loads(pickle.dumps(r))()) == [0, 1, 2, 3]


def test_tar_shards_missing_pattern_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tar shards there"):
        readers.tar_shards(str(tmp_path / "shard-{000..001}.tar"))


def test_tar_shards_resumes_at_every_step(shards):
    assert_resumes_at_every_step(lambda: readers.tar_shards(shards, decode=False))
    assert_resumes_at_every_step(lambda: readers.tar_shards(shards, decode=False, seed=3), pass_id=1)


def test_tar_shards_shuffles_shards_and_buffer_seeded_and_resumes(shards):
    make = lambda: readers.shuffle(readers.tar_shards(shards, decode=False, seed=1), 4, seed=2)  # noqa: E731
    assert_seeded_passes(make)
    r = make()
    first, second = _ids(r()), _ids(r())
    assert sorted(first) == sorted(second) == list(range(N)) and first != second
    assert _ids(make()()) == first  # a fresh reader gives pass 0 again
    assert_resumes_at_every_step(make)


def test_tar_shards_shard_order_depends_on_seed_and_pass(shards):
    r = readers.tar_shards(shards, decode=False, seed=0)
    orders = {tuple(_ids(r())) for _ in range(6)}
    assert len(orders) > 1 and all(sorted(o) == list(range(N)) for o in orders)


@pytest.mark.parametrize("seed", [None, 5])
def test_tar_shards_split_by_file_across_three_global_workers(shards, monkeypatch, seed):
    parts = []
    for rank in range(3):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "3")
        r = readers.tar_shards(shards, decode=False, seed=seed)
        part = _ids(r())
        parts.append(part)
        assert_resumes_at_every_step(lambda: readers.tar_shards(shards, decode=False, seed=seed))
    assert sorted(sum(parts, [])) == list(range(N))
    # whole files: no two workers read samples of one shard (sample i is in shard i // 3)
    files = [{i // PER_SHARD for i in part} for part in parts]
    assert sum(len(f) for f in files) == 4 and all(files)


def test_tar_shards_explicit_shard_three_ways_exactly_once(shards):
    base = lambda: readers.shuffle(readers.tar_shards(shards, decode=False, seed=0), 3, seed=1)  # noqa: E731
    parts = [_ids(readers.shard(base(), i, 3)()) for i in range(3)]
    assert sorted(sum(parts, [])) == list(range(N))
    assert_resumes_at_every_step(lambda: readers.shard(base(), 1, 3))


def test_tar_shards_in_process_workers_exactly_once(shards):
    r = readers.prefetch(readers.tar_shards(shards, seed=0), 2, mode="process")
    entries = list(r())
    assert sorted(_ids(entries)) == list(range(N))
    for e in entries:  # decoded in the workers, arrays crossed intact
        np.testing.assert_array_equal(e["png"], _image(e["json"]["i"]))


@pytest.mark.parametrize("mode,workers", [("process", 2), ("process", 3), ("thread", 3)])
def test_tar_shards_in_workers_resume_at_every_step(shards, mode, workers):
    """Regression from issue 28: a prefetch over tar_shards (each worker reads its own shard files)
    refused to save a position; it now resumes each worker at its own (shard, offset). The workers'
    streams differ in length (shards of 3, 3, 3, 2 samples), so the merge's round-robin loses one."""
    make = lambda: readers.prefetch(  # noqa: E731
        readers.map_readers(lambda e: e, readers.tar_shards(shards, decode=False, seed=4)), workers, mode=mode)
    states = assert_resumes_at_every_step(make, pass_id=1)
    assert states[1]["layout"] == [[w, workers] for w in range(workers)]  # each worker's share is recorded


def test_tar_shards_in_workers_refuse_a_position_saved_with_other_workers(shards):
    r = readers.prefetch(readers.tar_shards(shards, decode=False), 2, mode="process")
    it = r()
    next(it), next(it), next(it)
    state = it.get_state()
    it.close()
    other = readers.prefetch(readers.tar_shards(shards, decode=False), 3, mode="process")
    other.set_state(state)
    with pytest.raises(ValueError, match=r"worker shares \[\[0, 2\], \[1, 2\]\].*each worker reads its own files"):
        list(other())


def test_tar_shards_under_a_buffer_shuffle_in_workers_is_refused_naming_it(shards):
    r = readers.prefetch(readers.shuffle(readers.tar_shards(shards, decode=False), 4, seed=0), 2)
    assert sorted(_ids(r())) == list(range(N))  # it reads every entry once; only a position is refused
    with pytest.raises(ValueError, match=r"runs tar_shards\(4 shards, decode=False\), which splits the pass by worker itself.*"
                                         r"put that stage above the prefetch"):
        r.set_state({"pass": 0, "cursor": 2, "seed": 0})


def _cut(path, keep):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:keep(data)])


@pytest.mark.parametrize("where", ["header boundary", "inside data", "inside header", "end blocks"])
def test_tar_shards_shard_cut_short_is_an_error_naming_it(shards, where):
    with tarfile.open(shards[1]) as t:
        members = t.getmembers()
    boundary = members[7].offset  # a member's header starts here: tar reads a file cut here as whole
    keep = {"header boundary": lambda d: boundary, "inside data": lambda d: members[7].offset_data + 3,
            "inside header": lambda d: boundary + 100, "end blocks": lambda d: members[-1].offset_data + 512}[where]
    _cut(shards[1], keep)
    with pytest.raises(TarShardError, match="shard-001.tar is cut short"):
        list(readers.tar_shards(shards, decode=False)())


def test_tar_shards_not_a_tar_names_it(shards):
    with open(shards[2], "wb") as f:
        f.write(b"not a tar file at all" * 100)
    with pytest.raises(TarShardError, match="shard-002.tar"):
        list(readers.tar_shards(shards)())


def _with_bad_image(tmp_path):
    good = _encoded(_image(0), "PNG")
    return _write(tmp_path, extra=lambda i: {"png": good[:40] if i == 4 else _encoded(_image(i), "PNG")})


def test_tar_shards_corrupt_member_raises_naming_shard_and_member(tmp_path):
    paths = _with_bad_image(tmp_path)
    with pytest.raises(TarMemberError, match=r"member 'sample0004.png' of .*shard-001.tar does not decode as .png"):
        list(readers.tar_shards(paths)())


def test_tar_shards_corrupt_member_skipped_with_a_warning(tmp_path):
    paths = _with_bad_image(tmp_path)
    make = lambda: readers.tar_shards(paths, on_error="skip")  # noqa: E731
    with pytest.warns(UserWarning, match="sample0004.png.*shard-001.tar"):
        got = _ids(make()())
    assert got == [i for i in range(N) if i != 4]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_resumes_at_every_step(make)


def test_tar_shards_plugin_finds_it_by_name(shards, tmp_path):
    from readers.plugins.registry import reader_splits
    train, test = reader_splits("tar-shards", data_dir=str(tmp_path / "shard-{000..003}.tar"), download=False)
    assert test is None and [label for _, label in train()] == [i % 5 for i in range(N)]  # (first image, cls)
    image, _ = next(iter(train()))
    np.testing.assert_array_equal(image, next(iter(readers.tar_shards(shards)()))["jpg"])
    picked = reader_splits("tar-shards", data=str(tmp_path), columns="png,txt", size=4)[0]
    assert [int(text.split()[-1]) for _, text in picked()] == list(range(N))
    assert next(iter(picked()))[0].shape == (4, 4, 3)


def test_tar_shards_json_field_name_is_its_extension(tmp_path):
    paths = _write(tmp_path, n=2, extra=lambda i: {"meta.json": json.dumps({"k": i}).encode()})
    assert [e["meta.json"] for e in readers.tar_shards(paths)()] == [{"k": 0}, {"k": 1}]


def test_tar_shards_without_pillow_says_which_pip_install(shards, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL fails, as where Pillow is not installed
    with pytest.raises(ImportError, match=r"pip install pillow \(or pip install readerkit\[images\]\)"):
        list(readers.tar_shards(shards)())
    assert _ids(readers.tar_shards(shards, decode=False)()) == list(range(N))  # no image decoded, no Pillow needed


def test_tar_shards_in_a_torch_dataloader_splits_files_between_its_workers(shards):
    data = pytest.importorskip("torch.utils.data")
    loader = data.DataLoader(readers.torch_dataset(readers.tar_shards(shards, decode=False)), batch_size=None,
                             num_workers=2)
    assert sorted(_ids(loader)) == list(range(N))
