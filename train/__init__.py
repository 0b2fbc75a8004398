"""readerkit train: the train() driver, its events, numpy models and checkpoints.

``train(provider, mapping, batch_size, passes, *, model, ...)`` calls
``provider()`` once per pass, builds minibatches, feeds them to
``model.step`` through the mapping and emits events. Models are pure numpy
(``MLP``, ``SoftmaxRegression``) or any object with ``step``, ``evaluate``,
``state_dict`` and ``load_state_dict``.

For continual pipelines (Modyn's training supervisor): triggers that fire on a
timestamped stream (``EveryN``, ``EveryT``, ``Drift``; ``parse_trigger``) and
strategies that choose each trigger's training set (``NewData``, ``AllData``,
``GDumb``; ``parse_strategy``), and ``run_pipeline``, the supervisor that trains
on each trigger's set and evaluates every task seen so far.

>>> import numpy as np, readers
>>> x = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
>>> y = (x[:, 0] > 0).astype(np.int64)
>>> history = train(readers.from_arrays(x, y), ["image", "label"], 16, 2, model=SoftmaxRegression(3, 2))
>>> [record["pass"] for record in history]
[0, 1]
"""
from train.checkpoints.files import CheckpointError, load_checkpoint, save_checkpoint
from train.checkpoints.resume import ResumeRefused
from train.checkpoints.settings import Checkpoints
from train.continual.strategies import AllData, GDumb, NewData, Strategy, parse_strategy
from train.continual.supervisor import (
    PipelineConfigError,
    PipelineReplayError,
    run_pipeline,
)
from train.continual.triggers import Drift, EveryN, EveryT, Trigger, parse_trigger
from train.driver import evaluate, train
from train.events import (
    BeginIteration,
    BeginPass,
    EndIteration,
    EndPass,
    Event,
    TestResult,
)
from train.feeds import columns_of, feeds
from train.models.classifiers import MLP, SoftmaxRegression
from train.models.language import NextTokenMLP, TokenRangeError, unigram_entropy
from train.steps import train_steps

__all__ = [
    "AllData",
    "BeginIteration",
    "BeginPass",
    "CheckpointError",
    "Checkpoints",
    "Drift",
    "EndIteration",
    "EndPass",
    "Event",
    "EveryN",
    "EveryT",
    "GDumb",
    "MLP",
    "NewData",
    "NextTokenMLP",
    "PipelineConfigError",
    "PipelineReplayError",
    "ResumeRefused",
    "SoftmaxRegression",
    "Strategy",
    "TestResult",
    "TokenRangeError",
    "Trigger",
    "columns_of",
    "evaluate",
    "feeds",
    "load_checkpoint",
    "parse_strategy",
    "parse_trigger",
    "run_pipeline",
    "save_checkpoint",
    "train",
    "train_steps",
    "unigram_entropy",
]
