"""readerkit train: the train() driver, events, numpy models and checkpoints.

The driver arrives with the main job (issue 3); this package holds its place
in the fixed layout.
"""
__all__: list[str] = []
