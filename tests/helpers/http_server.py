"""The tests' HTTP file server: ``readers.network.file_server`` (serve_folder, its faults and request log)."""
from readers.network.file_server import FolderServer, Request, byte_range, serve_folder  # noqa: F401
