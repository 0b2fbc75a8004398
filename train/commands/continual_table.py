"""What ``pipeline run`` and ``pipeline status`` print: a trigger's table row, and the trainings of a store."""
from __future__ import annotations

import json
import time
from typing import Any

__all__ = ["HEADER", "finished_records", "row_of", "status_lines"]

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
        loss = training["progress"].get("loss") if isinstance(training["progress"], dict) else None
        shown = "" if loss is None or loss != loss else f", last step's loss {loss:.4g}"  # NaN: a model without a loss
        lines.append(f"  progress: {_progress(training)}{shown}")  # as the metrics below, not a loss rounded to 0.0000
        for key in ("started", "ended"):
            if training[key] is not None:
                lines.append(f"  {key}: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(training[key]))}")
        if training["error"]:
            lines.append(f"  error: {training['error']}")
        for key, value in training["metrics"].items():
            shown = " ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in value) if isinstance(
                value, list) else f"{value:.4g}" if isinstance(value, float) else json.dumps(value)
            lines.append(f"  {key}: {shown}")
        return lines
    pipelines = [store.pipeline(pipeline_id)] if pipeline_id is not None else store.pipelines()
    lines = [f"{store.path}: {len(pipelines)} pipeline{'s' * (len(pipelines) != 1)}"]
    for p in pipelines:
        config, count = p["config"], len(store.triggers(p["pipeline_id"]))
        held = store.lease(p["pipeline_id"])  # (who runs it, from any host: the owner's host and pid, its lease)
        owner = "" if held is None else f"; held by process {held['pid']} on host {held['host']!r}, " + (
            "no heartbeat" if held["age"] is None else f"heartbeat {held['age']:.1f} s ago") + (
            "" if held["alive"] else " (gone: its lease ran out)")
        lines.append(f"pipeline {p['pipeline_id']}: {config.get('stream', '?')}, trigger {config.get('trigger', '?')}, "
                     f"strategy {config.get('strategy', '?')}; {count} trigger{'s' * (count != 1)}{owner}")
    lines.append(f"{'training':>8}  {'pipeline':>8}  {'trigger':>7}  {'status':<9}  {'progress':<18}  {'average':>7}  "
                 f"{'seconds':>7}  error")
    now, gone = time.time(), {p["pipeline_id"] for p in pipelines if store.owner_alive(p["pipeline_id"]) is False}
    for t in store.trainings(pipeline_id):
        average = t["metrics"].get("average_accuracy")
        seconds = (t["ended"] or now) - t["started"]
        error = t["error"] or ""
        if t["status"] == "running" and t["pipeline_id"] in gone:  # killed: it will never finish
            error = f"its process is gone; resume pipeline {t['pipeline_id']} to go on"
        lines.append(f"{t['training_id']:>8}  {t['pipeline_id']:>8}  {t['trigger_id']:>7}  {t['status']:<9}  "
                     f"{_progress(t):<18}  {'n/a' if average is None else f'{100 * average:.1f}%':>7}  "
                     f"{seconds:>7.1f}  {error}".rstrip())
    return lines


def finished_records(store: Any, pipeline_id: int) -> list[dict[str, Any]]:
    """The records ``run_pipeline`` made for the pipeline's finished trainings, rebuilt from the store, in
    trigger order (the latest finished training of each trigger).

    >>> import tempfile
    >>> from readers import PipelineStore
    >>> folder = tempfile.TemporaryDirectory()
    >>> with PipelineStore(f"{folder.name}/runs.db") as store:
    ...     p = store.register_pipeline({})
    ...     store.add_trigger(p, 0, [1, 2], position=2, info={"classes": {"0": 2}})
    ...     t = store.start_training(p, 0)
    ...     store.finish_training(t, {"set_size": 2, "accuracies": [0.5], "average_accuracy": 0.5})
    ...     [(r["trigger_id"], r["training_id"], r["classes"], r["accuracies"]) for r in finished_records(store, p)]
    [(0, 1, {'0': 2}, [0.5])]
    """
    latest: dict[int, dict[str, Any]] = {}
    for training in store.trainings(pipeline_id):
        if training["status"] == "finished":
            latest[training["trigger_id"]] = training
    records = []
    for trigger_id, training in sorted(latest.items()):
        info = store.trigger_meta(pipeline_id, trigger_id)["info"]
        metrics = training["metrics"]
        records.append({**{k: metrics.get(k) for k in ("set_size", "steps", "passes", "train_loss", "seconds",
                                                      "tasks", "accuracies", "average_accuracy")},
                        "pipeline_id": pipeline_id, "trigger_id": trigger_id, "training_id": training["training_id"],
                        "classes": info.get("classes", {})})
    return records
