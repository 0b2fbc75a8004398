"""Interoperability with PyTorch, imported only when used.

``torch_dataset`` (a reader as a torch Dataset for DataLoader) and
``torch_loader`` (collated batches as tensors, copied to the device ahead of
the training step).
"""
