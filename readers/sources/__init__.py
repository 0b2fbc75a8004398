"""Reader creators over data: arrays and sequences in memory, text files, MNIST and Split-MNIST.

``in_memory`` (from_arrays, np_array, from_sequence), ``text`` (text_file),
``mnist`` (MNIST and files in its IDX format, ``idx``; found or downloaded by
``datafiles``) and ``split_mnist`` (a timestamped stream of MNIST's tasks).
"""
