"""Pre-tokenized text, as the reference data provider (Psyche) lays it out and shares it.

``windows`` (readers.tokens: fixed windows over memory-mapped token files,
and tokenize_bytes), ``token_checks`` (is a token file read as it was
written?), ``rounds`` (the coordinator that splits a round's global
batch among clients), ``schedule`` (the batch-size schedule) and
``runfiles`` with ``runfile_fields`` (data.toml and state.toml), and ``run_limits``
(what a run may ask of its data and memory).
"""
