"""The store of continual-learning pipelines (Modyn's metadata): trigger sets, trainings, owners.

``store`` (PipelineStore) keeps pipelines, each trigger's training set, the
trainings with their models and which process runs each pipeline, in one
database (``schema``: its tables, a sqlite file opened through
``readers.storage.sqlite`` or a PostgreSQL database that machines share,
through ``readers.storage.postgres``); ``migrate`` copies a store into an
empty one, either backend to either;
``owners`` judges a pipeline's owner (this process, alive or gone);
``trigger_sets`` reads a trigger's set back as an indexed reader
(readers.trigger_set).
"""
