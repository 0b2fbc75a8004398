"""The store of continual-learning pipelines (Modyn's metadata): trigger sets, trainings, owners.

``store`` (PipelineStore) keeps pipelines, each trigger's training set, the
trainings with their models and which process runs each pipeline, in one
database (``schema``: its tables, opened through ``readers.storage.sqlite``);
``owners`` judges a pipeline's owner (this process, alive or gone);
``trigger_sets`` reads a trigger's set back as an indexed reader
(readers.trigger_set).
"""
