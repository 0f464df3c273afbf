"""Evaluation: metrics per task (metrics.py), multitask gain, significance tests, complexity, tables and figures."""

from multitab.evaluation.complexity import complexity

__all__ = ["complexity"]
