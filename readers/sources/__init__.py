"""Reader creators over data: arrays and sequences in memory, text files, MNIST and Split-MNIST, users' formats.

``in_memory`` (from_arrays, np_array, from_sequence), ``text`` (text_file),
``image_folder`` (a folder of images, one sub-folder a class), ``jsonl``
(JSON lines, through an index of line offsets); a format reader finds and
opens its files through ``locations``;
``mnist`` (MNIST and files in its IDX format, ``idx``; found or downloaded by
``datafiles``), ``split_mnist`` (a timestamped stream of MNIST's tasks), ``columnar``
(Arrow files, Hugging Face datasets, and the entry rules of columnar data) and ``parquet``;
``locations`` is where every format reader expands and opens its paths, local or
URLs (through fsspec), and ``file_cache`` keeps a URL's whole files on local disk.
"""
