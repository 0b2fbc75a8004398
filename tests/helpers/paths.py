"""Where things are: the repository's root, and the shared data folder beside it (absent on some machines)."""
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED_DATA = ROOT.parent / "shared" / "data"
