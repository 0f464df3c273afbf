"""multitab: a benchmark pipeline for multitask learning on tabular data (MultiTab, AAAI'26)."""

__version__ = "0.1.0"
