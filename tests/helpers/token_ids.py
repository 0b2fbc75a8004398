"""Token ids as tokenizers' corpora hold them, for the checks that guess how a token file was written."""
import numpy as np


def zipf_ids(vocab, n=50_000, *, seed=0, spread=False):
    """n ids of a Zipf law over a vocabulary, as a tokenizer's corpus has: the most frequent ids the smallest, or
    (``spread``) placed anywhere in the vocabulary."""
    rng = np.random.default_rng(seed)
    ranks = rng.zipf(1.1, 4 * n)
    ids = ranks[ranks <= vocab][:n] - 1
    return rng.permutation(vocab)[ids] if spread else ids
