"""Data layer: the Events container, readers, the chronological split, the generator."""

from .events import Events
from .generate import generate_events, write_generated
from .readers import FORMATS, read_events
from .split import Split, chronological_split
from .tgb import read_tgb

__all__ = ["Events", "FORMATS", "Split", "chronological_split", "generate_events", "read_events",
           "read_tgb", "write_generated"]
