"""What ``pipeline run`` and ``pipeline status`` print: a trigger's table row, and the trainings of a store."""
from __future__ import annotations

import json
import time
from typing import Any

__all__ = ["HEADER", "row_of", "status_lines"]

HEADER = f"{'trigger':>7} {'set':>6} {'seconds':>7} {'average':>7}  {'accuracy per task (%)':<30}  classes (label:count)"


def row_of(record: dict[str, Any]) -> str:
    """A trigger's row of the table ``pipeline run`` prints (``HEADER`` names its columns).

    >>> print(row_of({"trigger_id": 1, "set_size": 500, "classes": {"0": 125, "1": 125, "2": 130, "3": 120},
    ...               "seconds": 2.31, "accuracies": [0.951, 0.9], "average_accuracy": 0.9255}))
          1    500     2.3    92.5  95.1 90.0                       0:125 1:125 2:130 3:120
    """
    classes = " ".join(f"{c}:{n}" for c, n in sorted(record["classes"].items(), key=lambda kv: int(kv[0])))
    accuracies = " ".join(f"{100 * a:.1f}" for a in record["accuracies"]) or "n/a (no test split)"
    average = "n/a" if record["average_accuracy"] is None else f"{100 * record['average_accuracy']:.1f}"
    return (f"{record['trigger_id']:>7} {record['set_size']:>6} {record['seconds']:>7.1f} {average:>7}  "
            f"{accuracies:<30}  {classes}")


def _progress(training: dict[str, Any]) -> str:
    progress = training["progress"]
    if isinstance(progress, dict) and "steps" in progress:
        return f"{progress.get('step', 0)}/{progress['steps']} steps"
    return f"{100 * float(progress):.0f}%" if isinstance(progress, (int, float)) else json.dumps(progress)


def status_lines(store: Any, pipeline_id: int | None = None, training_id: int | None = None) -> list[str]:
    """What ``pipeline status`` prints: the pipelines and a line per training, or one training in full.

    >>> import tempfile
    >>> from readers import PipelineStore
    >>> folder = tempfile.TemporaryDirectory()
    >>> with PipelineStore(f"{folder.name}/runs.db") as store:
    ...     p = store.register_pipeline({"trigger": "time:86400", "strategy": "gdumb:500", "stream": "s"})
    ...     store.add_trigger(p, 0, [1, 2], position=2)
    ...     t = store.start_training(p, 0)
    ...     store.update_training(t, progress={"step": 10, "steps": 600})
    ...     print("\\n".join(status_lines(store)[1:]))
    pipeline 1: s, trigger time:86400, strategy gdumb:500; 1 trigger
    training  pipeline  trigger  status     progress            average  seconds  error
           1         1        0  running    10/600 steps            n/a      ...
    """
    if training_id is not None:
        training = store.training(training_id)
        lines = [f"training {training_id} of pipeline {training['pipeline_id']}, trigger {training['trigger_id']}: "
                 f"{training['status']}"]
        for key in ("progress", "metrics", "started", "ended", "error"):
            value = training[key]
            if key in ("started", "ended") and value is not None:
                value = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))
            lines.append(f"  {key}: {json.dumps(value) if isinstance(value, (dict, list)) else value}")
        return lines
    pipelines = [store.pipeline(pipeline_id)] if pipeline_id is not None else store.pipelines()
    lines = [f"{store.path}: {len(pipelines)} pipeline{'s' * (len(pipelines) != 1)}"]
    for p in pipelines:
        config, count = p["config"], len(store.triggers(p["pipeline_id"]))
        lines.append(f"pipeline {p['pipeline_id']}: {config.get('stream', '?')}, trigger {config.get('trigger', '?')}, "
                     f"strategy {config.get('strategy', '?')}; {count} trigger{'s' * (count != 1)}")
    lines.append(f"{'training':>8}  {'pipeline':>8}  {'trigger':>7}  {'status':<9}  {'progress':<18}  {'average':>7}  "
                 f"{'seconds':>7}  error")
    now = time.time()
    for t in store.trainings(pipeline_id):
        average = t["metrics"].get("average_accuracy")
        seconds = (t["ended"] or now) - t["started"]
        lines.append(f"{t['training_id']:>8}  {t['pipeline_id']:>8}  {t['trigger_id']:>7}  {t['status']:<9}  "
                     f"{_progress(t):<18}  {'n/a' if average is None else f'{100 * average:.1f}%':>7}  "
                     f"{seconds:>7.1f}  {t['error'] or ''}".rstrip())
    return lines
