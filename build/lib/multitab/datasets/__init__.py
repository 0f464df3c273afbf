"""Datasets: schemas (registry), sources, splits, preprocessing and MultiTab-Bench."""
