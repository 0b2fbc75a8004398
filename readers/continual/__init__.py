"""The store of continual-learning pipelines (Modyn's metadata): trigger sets, trainings, owners.

``store`` (PipelineStore) keeps pipelines, each trigger's training set and
the trainings in one database (``schema``); ``owners`` says which process
runs a pipeline; ``trainings`` their status and models; ``trigger_sets``
reads a trigger's set back as an indexed reader (readers.trigger_set).
"""
