"""Thin command-line entry points, one per DVC stage (paths come from dvc.yaml)."""
