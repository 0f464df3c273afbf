"""The hyperparameter file says what trains: every file of hparams/authors/ and hparams/recipe/ ends with a note
of what each protocol's overlay changes in it, and what `python -m multitab.runs show` resolves for a run of that
file (params.yaml adding nothing for its model) is exactly the file's values with its note's changes."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import yaml

from multitab.config import parse_params, read_yaml
from multitab.hparams.authors import files
from multitab.hparams.notes import MARKER, read_note
from multitab.protocol import PROTOCOLS
from multitab.registry import MODEL_NAMES
from multitab.runs.expand import expand
from multitab.runs.resolve import Files, resolve_run

ROOT = Path(__file__).resolve().parents[1]
BASE = read_yaml(ROOT / "params.yaml")
NOTED = sorted(p for folder in ("authors", "recipe") for p in (ROOT / "hparams" / folder).rglob("*.yaml"))


def test_every_authors_and_recipe_file_ends_with_its_current_note() -> None:
    wanted = files(ROOT)
    assert len(NOTED) == len(wanted) > 40
    for path in NOTED:
        text = path.read_text(encoding="utf-8")
        assert MARKER in text, path
        assert text == wanted[str(path.relative_to(ROOT))], f"{path}: run `python -m multitab.hparams.authors`"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_runs_show_trains_the_file_with_its_note(protocol: str) -> None:
    raw = copy.deepcopy(BASE)
    raw["protocol"] = protocol
    assert not raw["train"]["optim"] and not raw["train"]["model_overrides"]
    params = parse_params(raw, str(ROOT / "params.yaml"))
    files_ = Files(ROOT, protocol, params)
    checked = 0
    for key, run in expand(params, ["real"]).items():
        if run.seed != 0:
            continue
        text = (ROOT / run.hparams_file).read_text(encoding="utf-8")
        written = yaml.safe_load(text)
        said = read_note(text)[protocol]
        record = resolve_run(params, run, files_)["hparams"]
        model = {k: said.get(f"model.{k}", v) for k, v in written["model"].items()}
        assert yaml.safe_load(yaml.safe_dump(record["model"])) == model, (key, protocol)
        if written.get("optim") is not None:
            optim = {k: said.get(f"optim.{k}", v) for k, v in written["optim"].items()}
            assert record["optim"] == optim, (key, protocol)
        checked += 1
    assert checked == 3 * len(MODEL_NAMES)


def test_a_stale_note_fails_the_check(tmp_path: Path) -> None:
    """An overlay edited without regenerating: the files' notes no longer say what trains."""
    shutil.copytree(ROOT / "hparams", tmp_path / "hparams")
    overlay = tmp_path / "hparams" / "protocol" / "paper.yaml"
    overlay.write_text(overlay.read_text().replace("optimizer: adam", "optimizer: adamw"))
    stale = files(tmp_path)["hparams/authors/higgs/mmoe.yaml"]
    assert stale != (tmp_path / "hparams" / "authors" / "higgs" / "mmoe.yaml").read_text()
