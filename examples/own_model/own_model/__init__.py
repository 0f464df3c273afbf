"""A multitask model of a package of its own, entered into the multitab benchmark by one params.yaml entry
(README.md): nothing here is part of multitab."""
