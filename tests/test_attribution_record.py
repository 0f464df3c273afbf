"""An attribution record of more seeds than an earlier one (`record --reuse FOLDER --seeds S ...`): the report's new
seeds with every configuration's earlier seeds from the committed record, and a header that names each commit the
runs came from (flows.progress's index, --progress; the reused record's own runs by commit, nested)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from multitab.evaluation.bench.attribution import main as attribution_main

ROOT = Path(__file__).resolve().parents[1]
EARLIER = ROOT / "results/study/layers_n100k_3seeds_9of9"


def _report(folder: Path) -> pd.DataFrame:
    """A report of seeds 3 and 4 of p10_pd3_t3 alone: the earlier record's seeds 0 and 1 of it, renamed."""
    metrics = pd.read_csv(EARLIER / "metrics.csv", dtype={"degrees": str})
    curves = pd.read_csv(EARLIER / "curves.csv")
    new = {0: 3, 1: 4}
    mine = metrics[(metrics.config == "p10_pd3_t3") & metrics.seed.isin(list(new))].copy()
    mine["run"] = [r.rsplit("/seed", 1)[0] + f"/seed{new[s]}" for r, s in zip(mine.run, mine.seed, strict=True)]
    mine["seed"] = mine["seed"].map(new)
    own_curves = curves[(curves.config == "p10_pd3_t3") & curves.seed.isin(list(new))].copy()
    own_curves["seed"] = own_curves["seed"].map(new)
    folder.mkdir()
    mine.to_csv(folder / "metrics.csv", index=False, float_format="%.6g")
    own_curves.to_csv(folder / "curves.csv", index=False, float_format="%.6g")
    (folder / "arms.csv").write_bytes((EARLIER / "arms.csv").read_bytes())
    return mine


def test_five_seeds_from_a_three_seed_record_and_two_new_seeds_name_every_commit(tmp_path: Path) -> None:
    report = _report(tmp_path / "report")
    runs = list(dict.fromkeys(report["run"]))
    index = {f"attribution-{r.replace('/', '-').replace('-seed', '-')}": {
        "entry": "runs/x", "commit": ("abc1234" if i % 2 else "def5678") + "0" * 33, "cpu": "c", "saved": "t"}
        for i, r in enumerate(runs[:-1])}  # the last run was never saved
    (tmp_path / "index.json").write_text(json.dumps(index))
    out = tmp_path / "five"
    assert attribution_main(["record", "--from", str(tmp_path / "report"), "--to", str(out), "--note", "Five.",
                             "--reuse", str(EARLIER), "--seeds", "3", "4", "--progress",
                             str(tmp_path / "index.json")]) == 0
    metrics = pd.read_csv(out / "metrics.csv")
    seeds = metrics.groupby("config")["seed"].unique().map(sorted)
    assert seeds["p10_pd3_t3"] == [0, 1, 2, 3, 4] and seeds["p06_pd3_t7"] == [0, 1, 2]
    old = pd.read_csv(EARLIER / "metrics.csv")
    assert len(metrics) == len(old) + len(report)  # seeds 0-2 as they were, plus the report's
    header = (out / "header.md").read_text()
    assert "- Trained at the commit above: seeds [3, 4] of configurations ['p10_pd3_t3']." in header
    assert (f"): p10_pd3_t3: {len(runs) // 2} at def5678 (c), {len(runs) // 2 - 1} at abc1234 (c), 1 not in the "
            "index." in header)
    lines = header.splitlines()
    reused = next(line for line in lines if line.startswith("- Reused, not retrained:"))
    assert reused.startswith("- Reused, not retrained: seeds [0, 1, 2] of configurations ['p06_pd3_t7', ")
    # the chain of earlier records still names both commits p06_pd5_t3's runs were trained at
    assert "runs by commit: p06_pd5_t3: 14 at 9d9ac7d (AMD EPYC), 4 at 5fd4623 (AMD EPYC)" in header
    ladder = pd.read_csv(out / "ladder.csv").set_index(["config", "arm"])
    assert ladder.loc[("p06_pd3_t7", "A6_mask_t_t"), "verdict"] == "holds"
    # seeds the report does not hold, or --seeds without --reuse: refused, nothing written
    for args in (["--reuse", str(EARLIER), "--seeds", "5"], ["--seeds", "3"]):
        assert attribution_main(["record", "--from", str(tmp_path / "report"), "--to", str(tmp_path / "no"),
                                 "--note", "x", *args]) == 1
        assert not (tmp_path / "no").exists()
