"""What trains from a hyperparameter file, written into the file: each protocol's overlay (hparams/protocol/) lays
values over the file before a run trains, so the file alone would not say what trains. Every file of
hparams/authors/ and hparams/recipe/ ends with a generated note, one line per protocol, naming each value the
overlay changes (`python -m multitab.hparams.authors` writes them; tests/test_hparams_notes.py fails while one is
stale). params.yaml's `train.optim` / `train.model_overrides` go on top, per run: `python -m multitab.runs show`.

    # ---- What trains from this file (written by `python -m multitab.hparams.authors`, do not edit) ----
    # protocol paper: model.inter_sample = rope_attention; optim.optimizer = adam   (hparams/protocol/paper.yaml)
    # protocol authors_code: as written   (hparams/protocol/authors_code.yaml)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from multitab.hparams import Hparams, apply_protocol, protocol_overlay
from multitab.protocol import PROTOCOLS

MARKER = "# ---- What trains from this file"
HEADER = f"{MARKER} (written by `python -m multitab.hparams.authors`, do not edit) ----\n"


def _text(value: Any) -> str:
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def changes(h: Hparams, model: str, root: Path, protocol: str) -> dict[str, Any]:
    """`section.key` -> the value `protocol`'s overlay gives where it differs from the file's (`h`, registry
    `model`), in the file's order."""
    laid = apply_protocol(h, model, protocol_overlay(root, protocol))
    out = {f"model.{k}": v for k, v in laid.model.items() if h.model.get(k, object()) != v}
    if h.optim is not None and laid.optim is not None:
        out.update({f"optim.{k}": v for k, v in laid.optim.items() if h.optim.get(k, object()) != v})
    return out


def note(h: Hparams, model: str, root: Path) -> str:
    """The note ending a file of `model` whose values are `h` (MARKER's block, every protocol)."""
    lines = [HEADER]
    for protocol in PROTOCOLS:
        found = changes(h, model, root, protocol)
        said = "; ".join(f"{k} = {_text(v)}" for k, v in found.items()) or "as written"
        lines.append(f"# protocol {protocol}: {said}   (hparams/protocol/{protocol}.yaml)\n")
    return "".join(lines)


def with_note(text: str, block: str) -> str:
    """`text` (a file's content) ending with `block` in place of the note it ends with, if any."""
    kept = text.split(MARKER, 1)[0].rstrip("\n")
    return f"{kept}\n{block}"


def read_note(text: str) -> dict[str, dict[str, Any]]:
    """protocol -> `section.key` -> value, as a file's note says (empty: a protocol that changes nothing)."""
    if MARKER not in text:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for line in text.split(MARKER, 1)[1].splitlines()[1:]:
        head, _, body = line.removeprefix("# protocol ").partition(": ")
        said = body.rsplit("   (", 1)[0]
        out[head] = {} if said == "as written" else {
            k: json.loads(v) for k, _, v in (item.partition(" = ") for item in said.split("; "))}
    return out
