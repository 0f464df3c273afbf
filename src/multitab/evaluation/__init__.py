"""Evaluation: metrics per task (metrics.py); tables, Δm and significance live beside it."""
