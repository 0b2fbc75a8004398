"""The next-token language model: learning, gradients, padding, checkpoints, errors, and the unigram entropy."""
import math
import pickle
import re

import numpy as np
import pytest

import readers
from tests.helpers.model_checks import assert_round_trip_continues, assert_same_state
from train.driver import train
from train.models.language import (
    NextTokenMLP,
    TokenRangeError,
    _forward,
    _loss_and_gradients,
    unigram_entropy,
)

NAMES = ("embedding", "W0", "b0", "W1", "b1")


def tiny(**kw) -> NextTokenMLP:
    return NextTokenMLP(**{"vocab_size": 6, "context": 3, "embed": 4, "hidden": 8, **kw})


def windows(text: np.ndarray, seq_len: int) -> np.ndarray:
    """Windows of seq_len + 1 tokens every seq_len tokens, as readers.tokens reads them."""
    return np.lib.stride_tricks.sliding_window_view(text, seq_len + 1)[::seq_len].copy()


def batches(n_batches: int, size: int = 4, seq_len: int = 7, vocab: int = 6, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"tokens": rng.integers(0, vocab, (size, seq_len + 1)), "weight": rng.uniform(0.5, 2.0, size)}
            for _ in range(n_batches)]


def second_order_chain(n: int, vocab: int, seed: int = 0) -> np.ndarray:
    """x[t] = x[t-1] + x[t-2] mod vocab, a tenth of the time a random token instead: the previous token
    alone tells almost nothing of the next, the two previous almost everything."""
    rng = np.random.default_rng(seed)
    x = np.zeros(n, np.int64)
    x[:2] = rng.integers(0, vocab, 2)
    noise, random = rng.random(n) < 0.1, rng.integers(0, vocab, n)
    for t in range(2, n):
        x[t] = random[t] if noise[t] else (x[t - 1] + x[t - 2]) % vocab
    return x


def conditional_entropy(text: np.ndarray, vocab: int) -> float:
    """H(next | previous) of the text's own bigram counts, in nats: the loss of the best bigram model."""
    pairs = np.bincount(text[:-1] * vocab + text[1:], minlength=vocab * vocab).reshape(vocab, vocab)
    p = pairs / pairs.sum()
    rows = p.sum(axis=1, keepdims=True)
    inside = p > 0
    return float(-(p[inside] * np.log((p / np.where(rows > 0, rows, 1))[inside])).sum())


def test_next_token_beats_unigram_and_bigram_entropy():
    vocab = 8
    text = second_order_chain(20_000, vocab)
    data = windows(text, 32)
    unigram, bigram = unigram_entropy(text, vocab), conditional_entropy(text, vocab)
    assert unigram > 2.0 and bigram > 1.8  # near log(8) = 2.08: neither counting helps much
    model = NextTokenMLP(vocab, context=3, embed=8, hidden=64, lr=0.01, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(300):
        model.step({"tokens": data[rng.integers(0, len(data), 16)]})
    loss = model.evaluate({"tokens": data})["loss"]
    # the best possible is the noise's entropy, about 0.9 * -log(0.9 + 0.1/8) + 0.1*7/8 * log(80) ≈ 0.47
    assert loss < 0.7 < 0.4 * bigram


def test_next_token_gradients_match_finite_differences():
    model = NextTokenMLP(5, context=2, embed=3, hidden=4, seed=1)
    noise = np.random.default_rng(3)
    # float64 copies with nonzero biases (zero ones put units on the ReLU kink), for a precise check
    params = [model.state_dict()[name] + noise.normal(0, 0.1, model.state_dict()[name].shape) for name in NAMES]
    ids = noise.integers(0, 6, (9, 2))  # 5 is the start slot
    ids[0] = [3, 3]  # one token twice in a context: both slots add to its embedding's gradient
    y = noise.integers(0, 5, 9)
    w = noise.uniform(0.5, 2.0, 9)
    scale = w / w.sum()

    def loss() -> float:
        return float(scale @ _loss_and_gradients(params, ids, y, scale)[0])

    grads = _loss_and_gradients(params, ids, y, scale)[2]
    h = 1e-6
    for name, p, g in zip(NAMES, params, grads):
        assert g.dtype == np.float64, name
        numeric = np.empty_like(p)
        for i in np.ndindex(p.shape):
            saved = p[i]
            p[i] = saved + h
            up = loss()
            p[i] = saved - h
            numeric[i] = (up - loss()) / (2 * h)
            p[i] = saved
        np.testing.assert_allclose(g, numeric, rtol=1e-5, atol=1e-8, err_msg=name)


def test_next_token_first_adam_step_moves_each_parameter_by_lr():
    # Bias-corrected Adam's first update is lr * g / (|g| + eps): lr in the sign of -g; the lr set last counts.
    model = tiny(lr=0.5)
    model.lr = 0.01
    before = model.state_dict()
    model.step(batches(1)[0])
    after = model.state_dict()
    for name in NAMES:
        moved = np.abs(after[name] - before[name])
        assert moved.any() and np.allclose(moved[moved > 0], 0.01, rtol=1e-3), name
    assert after["step"] == 1 and model.settings()["lr"] == 0.5


def test_next_token_ignores_zero_weight_windows_holding_garbage():
    padded, clean = tiny(), tiny()
    rng = np.random.default_rng(1)
    for batch in batches(4):
        garbage = {"tokens": np.array([[-7, 99, 0, 1, 2, 3, 4, 5]] * 3), "weight": np.zeros(3)}
        where = np.sort(rng.integers(0, 5, 3))  # padding anywhere, the real windows kept in order
        mixed = {name: np.insert(batch[name], where, garbage[name], axis=0) for name in batch}
        assert padded.step(mixed) == clean.step(batch)
        assert padded.evaluate(mixed) == clean.evaluate(batch)
    assert_same_state(padded.state_dict(), clean.state_dict())


def test_next_token_ignores_minus_100_targets():
    # Contexts look back only, so -100 in the last column is the same as windows one token shorter.
    masked, short = tiny(), tiny()
    for batch in batches(4):
        tokens = batch["tokens"].copy()
        tokens[:, -1] = -100
        assert masked.step({**batch, "tokens": tokens}) == short.step({**batch, "tokens": tokens[:, :-1]})
    assert_same_state(masked.state_dict(), short.state_dict())


def test_next_token_reads_a_minus_100_input_as_the_start_of_text():
    model = tiny()
    metrics = model.evaluate({"tokens": np.array([[1, 2, -100, 3, 4]])})
    state = model.state_dict()
    params = [state[name].astype(np.float64) for name in NAMES]
    start = 6  # the row after the vocabulary's
    ids = np.array([[start, start, 1], [1, 2, start], [2, start, 3]])  # before targets 2, 3 and 4
    logits = _forward(params, ids)[0]
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    assert metrics["tokens"] == 3
    assert metrics["loss"] == pytest.approx(-log_p[[0, 1, 2], [2, 3, 4]].mean(), rel=1e-5)


@pytest.mark.parametrize("size", [0, 3])
def test_next_token_batch_with_nothing_to_count_is_a_noop(size):
    model = tiny()
    model.step(batches(1)[0])
    before = model.state_dict()
    expected = {"loss": 0.0, "accuracy": 0.0, "count": 0, "weight": 0.0, "tokens": 0}
    for batch in ({"tokens": np.ones((size, 5), np.int64), "weight": np.zeros(size)},
                  {"tokens": np.full((size, 5), -100)}):
        assert model.step(batch) == expected
        assert model.evaluate(batch) == expected
    assert_same_state(model.state_dict(), before)  # step count included: Adam skipped the batch


def test_next_token_metrics_are_per_token_weighted_means():
    model = tiny()
    tokens = np.array([[0, 1, 2, 3], [4, 5, -100, 1], [2, 2, 2, 2]])
    w = np.array([1.0, 3.0, 0.0])
    metrics = model.evaluate({"tokens": tokens, "weight": w})
    assert metrics["count"] == 2 and metrics["tokens"] == 5 and metrics["weight"] == 1.0 * 3 + 3.0 * 2
    one = [model.evaluate({"tokens": tokens[i:i + 1]}) for i in range(2)]
    per_token_weight = np.array([1.0 * one[0]["tokens"], 3.0 * one[1]["tokens"]])
    for key in ("loss", "accuracy"):
        expected = (per_token_weight * [one[0][key], one[1][key]]).sum() / per_token_weight.sum()
        assert metrics[key] == pytest.approx(expected, rel=1e-6)
    assert all(type(v) in (int, float) for v in metrics.values())


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int32, np.uint32, np.int64])
def test_next_token_takes_any_integer_dtype(dtype):
    batch = batches(1)[0]
    expected = tiny().evaluate(batch)
    assert tiny().evaluate({**batch, "tokens": batch["tokens"].astype(dtype)}) == expected


def test_next_token_state_dict_round_trip_continues_bit_identically():
    assert_round_trip_continues(tiny, batches(40, seed=2))  # 40: past the 16-step flush of subnormal moments


def test_next_token_load_state_dict_rejects_a_mismatch_and_changes_nothing():
    model = tiny()
    before = model.state_dict()
    with pytest.raises(ValueError, match=re.escape(
            "state 'W0' has shape (8, 8) but NextTokenMLP(vocab_size=6, context=3, embed=4, hidden=8, lr=0.003, "
            "seed=0) needs (12, 8); build the model with the sizes it was saved with")):
        model.load_state_dict({**before, "W0": tiny(context=2).state_dict()["W0"], "step": 7})
    with pytest.raises(ValueError, match=r"missing \['step'\]"):
        model.load_state_dict({k: v for k, v in before.items() if k != "step"})
    with pytest.raises(ValueError, match=r"unexpected \['W2'\]"):
        model.load_state_dict({**before, "W2": np.zeros(1)})
    with pytest.raises(ValueError, match="'b1' must hold floats"):
        model.load_state_dict({**before, "b1": np.zeros(6, np.int64)})
    assert_same_state(model.state_dict(), before)


def test_next_token_is_deterministic_for_a_seed_and_float32():
    a, b, c = tiny(seed=5), tiny(seed=5), tiny(seed=6)
    for batch in batches(10):
        assert a.step(batch) == b.step(batch)
        c.step(batch)
    assert_same_state(a.state_dict(), b.state_dict())
    assert not np.array_equal(a.state_dict()["W0"], c.state_dict()["W0"])
    assert all(a.state_dict()[name].dtype == np.float32 for name in NAMES)
    assert a.state_dict()["embedding"].shape == (7, 4)  # a row for each token, and the start slot


def test_next_token_settings_and_repr():
    model = NextTokenMLP(300, context=2, embed=16, hidden=64, lr=0.02, seed=7)
    assert model.settings() == {"vocab_size": 300, "context": 2, "embed": 16, "hidden": 64, "lr": 0.02, "seed": 7}
    assert repr(model) == "NextTokenMLP(vocab_size=300, context=2, embed=16, hidden=64, lr=0.02, seed=7)"
    assert NextTokenMLP(seed=np.random.default_rng(0)).settings()["seed"] is None


@pytest.mark.parametrize("kwargs, message", [
    ({"vocab_size": 1}, "vocab_size must be an integer of at least 2, got 1"),
    ({"context": 0}, "context must be an integer of at least 1, got 0"),
    ({"embed": 2.0}, "embed must be an integer of at least 1, got 2.0"),
    ({"hidden": True}, "hidden must be an integer of at least 1, got True"),
    ({"lr": 0}, "lr must be a positive number, got 0"),
    ({"lr": math.nan}, "lr must be a positive number, got nan"),
])
def test_next_token_rejects_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        NextTokenMLP(**kwargs)


@pytest.mark.parametrize("batch, message", [
    ({"ids": np.zeros((2, 3), int)}, "the batch has no 'tokens' input, only ['ids']; fix the mapping"),
    ({"tokens": np.zeros((2, 3))}, "'tokens' must be integer token ids, got float64"),
    ({"tokens": np.zeros(3, int)}, "'tokens' must have shape (batch, seq_len + 1) with seq_len >= 1, got (3,)"),
    ({"tokens": np.zeros((2, 1), int)}, "with seq_len >= 1, got (2, 1)"),
    ({"tokens": np.zeros((2, 3), int), "weight": np.ones(3)}, "'weight' must have shape (2,), one per window"),
    ({"tokens": np.zeros((2, 3), int), "weight": np.array([1.0, -1.0])}, "weights must be finite and >= 0, got -1.0"),
])
def test_next_token_rejects_a_malformed_batch(batch, message):
    for method in ("step", "evaluate"):
        with pytest.raises(ValueError, match=re.escape(message)):
            getattr(tiny(), method)(batch)


@pytest.mark.parametrize("bad, fix", [
    (-3, "token ids must be 0..5, or -100 for none: renumber them in the reader"),
    (6, "build the model with vocab_size greater than the largest token id (at least 7)"),
])
def test_next_token_rejects_a_token_out_of_range(bad, fix):
    tokens = np.array([[0, 1, 2], [3, 4, 5], [0, bad, 1]])
    with pytest.raises(TokenRangeError, match=f"^{re.escape(f'token {bad} (window 2, position 1 of the tokens) is out of range for vocab_size=6 (0..5); {fix}')}$") as info:
        tiny().step({"tokens": tokens})
    assert (info.value.token, info.value.vocab_size, info.value.where) == (bad, 6, (2, 1))


def test_token_range_error_is_a_value_error_that_pickles():
    with pytest.raises(ValueError) as info:
        tiny().evaluate({"tokens": np.array([[0, 12]])})
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is TokenRangeError and str(copy) == str(info.value)
    assert (copy.token, copy.vocab_size, copy.where) == (12, 6, (0, 1))


def test_next_token_trains_through_the_driver():
    data = windows(second_order_chain(4_000, 6), 16)
    history = train(readers.from_arrays(data), ["tokens"], 8, 3, model=tiny(lr=0.03), seed=0)
    losses = [record["train_loss"] for record in history]  # per-token means: the metrics' weight is tokens
    assert losses == sorted(losses, reverse=True) and losses[-1] < 0.6 * unigram_entropy(data[:, 1:], 6)


@pytest.mark.parametrize("tokens, expected", [
    ([0, 1, 2, 3], math.log(4)),
    ([5, 5, 5], 0.0),
    ([0, 0, 0, 1, -100, -100], -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))),
    (np.array([[0, 1], [1, 0]], np.uint16), math.log(2)),
])
def test_unigram_entropy_of_counts(tokens, expected):
    assert unigram_entropy(tokens, 6) == pytest.approx(expected, abs=1e-12)


def test_unigram_entropy_rejects_what_it_cannot_count():
    with pytest.raises(TokenRangeError, match=re.escape("token 9 (index (1,) of the tokens)")):
        unigram_entropy([1, 9], 6)
    with pytest.raises(ValueError, match="no tokens to count"):
        unigram_entropy(np.full(3, -100), 6)
    with pytest.raises(ValueError, match="'tokens' must be integer token ids, got float64"):
        unigram_entropy([0.5], 6)


@pytest.mark.parametrize("vocab, context, embed, hidden", [(256, 4, 32, 256), (4096, 2, 16, 64), (64, 8, 64, 1024)])
def test_next_token_window_bytes_is_at_least_what_a_step_takes(vocab, context, embed, hidden):
    """What a run file's batch and seq_len are checked against (issue 27 item 17): it must not promise too little."""
    import tracemalloc
    model = NextTokenMLP(vocab, context=context, embed=embed, hidden=hidden)
    tokens = np.random.default_rng(0).integers(0, vocab, (3, 1025)).astype(np.int32)
    model.step({"tokens": tokens})  # Adam's moments are the model's, made once
    tracemalloc.start()
    try:
        model.step({"tokens": tokens})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 3 * model.window_bytes(1024) < 2 * peak
