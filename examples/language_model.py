"""A language model on real text: the Python standard library's own source, byte by byte.

Every machine with Python has this corpus. The script
1. tokenizes a set of standard-library modules into byte-level tokens
   (``readers.tokenized.windows.tokenize_bytes``, as ``python cli.py tokenize`` does),
2. writes a ``data.toml`` beside the tokens and a ``state.toml`` for the run,
   in the layout of the reference system (Psyche),
3. trains ``NextTokenMLP`` with ``python cli.py train --config state.toml``,
4. reports the final loss against the unigram entropy of the same tokens: a
   model that had learned nothing but byte frequencies would sit at the
   unigram entropy; one that learned some of the text's structure goes well
   below it.

Usage: python examples/language_model.py [WORKDIR] [--steps 300]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from readers.tokenized.windows import tokenize_bytes  # noqa: E402
from train.models.language import unigram_entropy  # noqa: E402

#: Standard-library modules of plain Python, present on every installation.
MODULES = ("json/decoder.py", "json/encoder.py", "csv.py", "textwrap.py", "string.py", "shlex.py", "fnmatch.py",
           "glob.py", "heapq.py", "bisect.py", "calendar.py", "difflib.py")
SEQ_LEN = 128

DATA_TOML = """dir = "."
token_size = "TwoBytes"
vocab_size = 256
seq_len = {seq_len}
shuffle_seed = 7
"""

STATE_TOML = """run_id = "stdlib-bytes"
[config]
global_batch_size_start = 8
global_batch_size_end = 32
global_batch_size_warmup_tokens = 40000
total_steps = {steps}

[model.LLM]
architecture = "HfLlama"
max_seq_len = {seq_len}
[model.LLM.data_location]
Local = "tokens"
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", nargs="?", default=None, help="Folder for the tokens, run files and log.")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="readerkit-lm-")
    library = sysconfig.get_paths()["stdlib"]
    sources = [os.path.join(library, m) for m in MODULES if os.path.isfile(os.path.join(library, m))]
    path = tokenize_bytes(sources, os.path.join(workdir, "tokens"), overwrite=True)  # a WORKDIR run again
    tokens = np.fromfile(path, "<u2")
    print(f"corpus: {len(sources)} standard-library modules, {len(tokens):,} byte-level tokens")
    with open(os.path.join(workdir, "tokens", "data.toml"), "w") as f:
        f.write(DATA_TOML.format(seq_len=SEQ_LEN))
    state = os.path.join(workdir, "state.toml")
    with open(state, "w") as f:
        f.write(STATE_TOML.format(steps=args.steps, seq_len=SEQ_LEN))
    log = os.path.join(workdir, "log.jsonl")
    subprocess.run([sys.executable, os.path.join(ROOT, "cli.py"), "train", "--config", state,
                    "--log-every", "50", "--log-json", log], check=True, cwd=workdir)
    with open(log) as f:
        final = [json.loads(line) for line in f][-1]
    entropy = unigram_entropy(tokens, 256)
    print(f"unigram entropy: {entropy:.3f} nats per token (perplexity {np.exp(entropy):.2f})")
    print(f"final loss: {final['loss']:.3f} nats per token (perplexity {final['perplexity']:.2f}), "
          f"{final['loss'] / entropy:.0%} of the unigram entropy")


if __name__ == "__main__":
    main()
