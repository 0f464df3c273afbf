"""The attribution study (issue 28): the authors' data options (evaluation on the training rows, a dataset per
seed), the arms expanded to train@ stages with shared runs, the arm overlay reaching the model, and the ladder
report regenerated from its own CSVs."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from multitab.config import ConfigError, parse_params, read_yaml
from multitab.config.aggregate import SyntheticConfig
from multitab.config.attribution import arm_runs, study_runs, train_config, trains_arm
from multitab.datasets.bench import synthesize_config
from multitab.evaluation.bench.attribution import collect_arms, flips, ladder, regenerate
from multitab.evaluation.bench.attribution import main as attribution_main
from multitab.evaluation.bench.numbers import CURVES_COLUMNS, METRICS_COLUMNS, StudySettings
from multitab.hparams import for_run
from multitab.runs.document import document
from multitab.runs.expand import expand
from multitab.runs.profiles import group_train, run_train
from multitab.runs.types import point_id
from multitab.runtime.provenance import machine
from stages.aggregate_study import arm_note, collect_study, data_settings

ROOT = Path(__file__).resolve().parents[1]


def _params(**attribution):
    raw = read_yaml(ROOT / "params.yaml")
    raw["bench"]["data"]["n_samples"] = 200
    raw["attribution"]["configs"] = ["p06_pd3_t3"]
    raw["attribution"]["run_arms"] = None  # every arm (params.yaml runs the two layers alone)
    raw["attribution"].update(attribution)
    raw["runs"]["attribution"]["models"] = ["stl_mlp", "mmoe", "multitab_net"]
    raw["attribution"]["claim"]["rivals"] = ["mmoe"]
    raw["runs"]["attribution"]["seeds"] = [0, 1]
    return raw, parse_params(raw)


def test_training_rows_evaluation_tests_exactly_the_training_rows_and_held_out_none_of_them():
    _, params = _params()
    frames, meta = synthesize_config("p06_pd3_t3", params.bench, evaluation="training_rows")
    assert len(frames["train"]) == 200  # no split: every generated row trains, as in the authors' loader
    pd.testing.assert_frame_equal(frames["test"], frames["train"])
    pd.testing.assert_frame_equal(frames["val"], frames["train"])
    assert meta["generator"]["evaluation"] == "training_rows" and meta["generator"]["split"] is None
    held, _ = synthesize_config("p06_pd3_t3", params.bench)
    assert (len(held["train"]), len(held["test"])) == (140, 30)
    rows = lambda f: set(map(tuple, f[[c for c in f if c.startswith("x")]].to_numpy().round(6)))  # noqa: E731
    assert not rows(held["test"]) & rows(held["train"]) and rows(held["test"]) <= rows(frames["train"])


def test_a_dataset_per_seed_differs_between_seeds_and_repeats_for_the_same_seed():
    _, params = _params()
    one, _ = synthesize_config("p06_pd3_t3", params.bench, evaluation="training_rows", seed=1)
    again, _ = synthesize_config("p06_pd3_t3", params.bench, evaluation="training_rows", seed=1)
    two, meta = synthesize_config("p06_pd3_t3", params.bench, evaluation="training_rows", seed=2)
    pd.testing.assert_frame_equal(one["train"], again["train"])
    assert not np.allclose(one["train"].to_numpy(), two["train"].to_numpy()) and meta["generator"]["seed"] == 2
    # the arms' data: per_run gives each run seed its own folder, generated with that seed
    folders = document(params, ["attribution"])["synthetic_data"]
    entries = {k.removeprefix("attribution-"): f["options"] for k, f in folders.items() if k.startswith("attribution-")}
    assert entries["p06_pd3_t3_tr_raw_s1"]["data-seed"] == 1 and entries["p06_pd3_t3_ho_std_fixed"]["data-seed"] == -1
    assert list(entries) == ["p06_pd3_t3_tr_raw_s0", "p06_pd3_t3_tr_raw_s1", "p06_pd3_t3_ho_raw_s0",
                             "p06_pd3_t3_ho_raw_s1", "p06_pd3_t3_ho_raw_fixed", "p06_pd3_t3_ho_std_fixed"]


def test_arms_expand_to_train_stages_sharing_the_runs_their_settings_share():
    _, params = _params()
    doc = document(params, ["attribution"])
    keys = [k for k in doc["train_runs"] if k.startswith("attribution-")]
    arms = arm_runs(params)
    assert list(arms) == ["A0_authors", "A1_held_out", "A2_fixed_data", "A3_standard_targets", "A4_adam",
                          "A5_epochs40", "A6_mask_t_t", "A7_inter_sample"]
    # 6 runs (3 models x 2 seeds) per arm; A1..A5 change every model's settings, A6 and A7 only MultiTab-Net's
    assert len(keys) == 6 * 6 + 2 + 2 and len(set(keys)) == len(keys)
    run_keys = {arm: {k for k, r in expand(params, ["attribution"]).items()
                      if any((r.dataset, r.model, r.seed, r.point) == (d, m, s, p) for _, m, s, d, p in members)}
                for arm, members in arms.items()}
    assert all(len(v) == 6 for v in run_keys.values())
    shared = run_keys["A5_epochs40"] & run_keys["A6_mask_t_t"]
    assert shared == run_keys["A6_mask_t_t"] & run_keys["A7_inter_sample"]
    assert {k.split("-")[2] for k in shared} == {"stl_mlp", "mmoe"} and len(shared) == 4
    assert "attribution-p06_pd3_t3_tr_raw_s0-multitab_net-optadamw0-epauthors-masknone-mixpsm-0" in keys
    assert "attribution-p06_pd3_t3_ho_std_fixed-multitab_net-optadam1e5-ep40-maskt_t-mixrope-1" in keys
    # run_arms: the authors' and the paper study's arms alone, each with the settings the whole list gives it
    raw, _ = _params(run_arms=["A0_authors", "A7_inter_sample"])
    two = parse_params(raw)
    assert {k for k in document(two, ["attribution"])["train_runs"] if k.startswith("attribution-")} == {
        k for arm in ("A0_authors", "A7_inter_sample") for k in run_keys[arm]}
    assert two.attribution.changes()["A7_inter_sample"] == (
        "evaluation=held_out, data_seed=fixed, targets=standard, optimizer=adam_wd1e-5, mask=t_t, "
        "inter_sample=rope_attention, epochs=40")
    assert params.attribution.changes()["A6_mask_t_t"] == "mask=t_t"
    # the default run matrix holds none of them
    assert not [k for k in document(params)["train_runs"] if k.startswith("attribution-")]
    assert not [k for k in document(params)["synthetic_data"] if k.startswith("attribution-")]


def test_each_arm_changes_exactly_one_factor_and_the_first_sets_them_all():
    raw, _ = _params()
    bad = copy.deepcopy(raw)
    bad["attribution"]["arms"]["A1_held_out"]["set"] = {"evaluation": "held_out", "targets": "standard"}
    with pytest.raises(ConfigError, match="A1_held_out: an arm after the first changes exactly one factor"):
        parse_params(bad)
    bad = copy.deepcopy(raw)
    del bad["attribution"]["arms"]["A0_authors"]["set"]["mask"]
    with pytest.raises(ConfigError, match=r"A0_authors: the first arm sets every factor; missing \['mask'\]"):
        parse_params(bad)
    bad = copy.deepcopy(raw)
    bad["attribution"]["arms"]["A4_adam"]["set"] = {"optimizer": "sgd"}
    with pytest.raises(ConfigError, match=r"A4_adam.optimizer='sgd': expected one of"):
        parse_params(bad)


def test_the_authors_arm_trains_their_multitab_net_under_protocol_paper():
    _, params = _params()
    assert params.protocol == "paper"
    file = "hparams/authors/multitab_bench/multitab_net.yaml"
    base = group_train(params, "attribution")
    first, last = arm_runs(params)["A0_authors"], arm_runs(params)["A7_inter_sample"]
    point = next(p for _, m, _, _, p in first if m == "multitab_net")
    h = for_run(ROOT, file, model="multitab_net", dataset="x", point=None,
                config=train_config(base, point, "multitab_net"))
    assert (h.model["inter_sample"], h.model["mask"], h.model["multi_token"]) == ("per_sample_mixing", "none", True)
    assert (h.optim["optimizer"], h.optim["weight_decay"], h.optim["lr"]) == ("adamw", 0.0, 0.001)
    assert train_config(base, point, "multitab_net").max_epochs is None  # the file's 10 epochs
    point = next(p for _, m, _, _, p in last if m == "multitab_net")
    h = for_run(ROOT, file, model="multitab_net", dataset="x", point=None,
                config=train_config(base, point, "multitab_net"))
    paper = for_run(ROOT, file, model="multitab_net", dataset="x", point=None, config=group_train(params, "study"))
    assert h.model == paper.model and h.optim == {**paper.optim}  # the last arm is the `paper` study's model
    assert train_config(base, point, "multitab_net").max_epochs == 40 == group_train(params, "study").max_epochs


CONFIGS = {"c1": SyntheticConfig("c1", ("correlation",), 0.2, (3, 3, 3))}
# mean test EV per arm and model: MultiTab-Net best under A0, MMoE best under A1 (the verdict flips there)
LEVELS = {"A0": {"stl_mlp": 0.80, "mmoe": 0.82, "ple": 0.81, "stem": 0.83, "multitab_net": 0.90},
          "A1": {"stl_mlp": 0.80, "mmoe": 0.92, "ple": 0.81, "stem": 0.83, "multitab_net": 0.85}}


def _fake_runs(root: Path) -> dict[str, list[tuple[str, str, int, str, str]]]:
    rng = np.random.default_rng(5)
    arms: dict[str, list[tuple[str, str, int, str, str]]] = {}
    for arm, models in LEVELS.items():
        arms[arm] = []
        for model, level in models.items():
            for seed in (0, 1, 2):
                point = point_id({"opt": "x", "ep": arm})
                run = root / f"c1_{arm}" / model / point / f"seed{seed}"
                (run / "dvclive" / "plots" / "metrics").mkdir(parents=True)
                test = {t: level + float(rng.normal(0, 0.002)) for t in ("y1", "y2", "y3")}
                for name, values in (("val_mean", [level - 0.1, level]), ("train_loss", [0.5, 0.1])):
                    (run / "dvclive" / "plots" / "metrics" / f"{name}.tsv").write_text(
                        f"timestamp\tstep\t{name}\n" + "".join(f"0\t{i}\t{v}\n" for i, v in enumerate(values)))
                (run / "metrics.json").write_text(json.dumps({
                    "test": test, "val": test, "best_epoch": 2, "epochs": 7, "max_epochs": 40, "stopped_early": True,
                    "train_seconds": 1.0, "samples_per_second": 10.0, "n_rows": {"train": 140}, "device": "cpu"}))
                arms[arm].append(("c1", model, seed, f"c1_{arm}", point))
    return arms


def test_ladder_flip_and_record_regenerated_byte_for_byte(tmp_path):
    metrics, curves = collect_arms(tmp_path / "runs", CONFIGS, _fake_runs(tmp_path / "runs"))
    arms = pd.DataFrame({"arm": ["A0", "A1"], "source": ["authors_code", "ours"],
                         "changed": ["evaluation=training_rows, ...", "evaluation=held_out"]})
    settings = StudySettings()
    table = ladder(metrics, arms, settings)
    assert table.verdict.tolist() == ["holds", "does not hold"] and table.best_rival.tolist() == ["stem", "mmoe"]
    assert table.gap.iloc[0] > 0 > table.gap.iloc[1] and (table.gap_se > 0).all()
    assert flips(table) == {"c1": [("A1", "holds", "does not hold")]}
    record = tmp_path / "record"
    record.mkdir()
    metrics.to_csv(record / "metrics.csv", index=False, float_format="%.6g")
    curves.to_csv(record / "curves.csv", index=False, float_format="%.6g")
    arms.to_csv(record / "arms.csv", index=False)
    written = regenerate(record)
    section = (record / "section.md").read_text()
    assert "the claim (MultiTab-Net significantly above every rival at α 0.05) **holds**" in section
    assert "the verdict turns to **does not hold** at A1, once evaluation=held_out" in section
    assert "| A0 | the authors' code |" in section
    copy_ = tmp_path / "copy"
    copy_.mkdir()
    for name in ("metrics.csv", "curves.csv", "arms.csv"):
        shutil.copy(record / name, copy_ / name)
    for path in regenerate(copy_):
        assert path.read_bytes() == (record / path.relative_to(copy_)).read_bytes(), path.name
    assert {p.relative_to(record).as_posix() for p in written} == {
        "ladder.csv", "ladder.md", "figures/ladder.png", "figures/ladder.svg", "section.md"}
    # `record`: the report's three CSVs into a record folder with its header (distinct runs counted once)
    assert attribution_main(["record", "--from", str(record), "--to", str(tmp_path / "rec"), "--note", "Tiny."]) == 0
    header = (tmp_path / "rec" / "header.md").read_text()
    assert "> Tiny." in header and "30 distinct runs for 30 arm-runs" in header
    assert f"; machine: {machine()}." in header
    # written on another machine than the report's runs trained on: the header names both
    assert attribution_main(["record", "--from", str(record), "--to", str(tmp_path / "elsewhere"), "--note", "Tiny.",
                             "--machine", "Other CPU, 2 CPUs, Linux"]) == 0
    assert f"; machine: Other CPU, 2 CPUs, Linux (given; this record written on {machine()})." in (
        tmp_path / "elsewhere" / "header.md").read_text()
    assert (tmp_path / "rec" / "ladder.csv").read_bytes() == (record / "ladder.csv").read_bytes()
    # an arm without its runs reads missing and is skipped over by the flip
    partial = ladder(metrics[metrics.arm == "A0"], arms, settings)
    assert partial.verdict.tolist() == ["holds", "missing"] and flips(partial) == {"c1": []}


def test_a_record_reuses_an_earlier_records_runs_of_the_configurations_it_lacks(tmp_path):
    """`record --reuse FOLDER`: the configurations the report has no run of come from an earlier attribution
    record for the report's arms, rows as they are, and the header names that record's commit; here the
    committed eight-arm record gives p04_pdmix_t7 to a two-arm report of p06_pd3_t3 alone, and the ladder's
    rungs for it are the earlier record's own."""
    earlier = ROOT / "results/study/attribution_n100k_3seeds"
    arms = ["A6_mask_t_t", "A7_inter_sample"]
    old = pd.read_csv(earlier / "metrics.csv", dtype={"degrees": str})
    old_curves = pd.read_csv(earlier / "curves.csv")
    report = tmp_path / "report"
    report.mkdir()
    mine = old[old.arm.isin(arms) & (old.config == "p06_pd3_t3")]
    mine.to_csv(report / "metrics.csv", index=False, float_format="%.6g")
    old_curves[old_curves.arm.isin(arms) & (old_curves.config == "p06_pd3_t3")].to_csv(
        report / "curves.csv", index=False, float_format="%.6g")
    pd.DataFrame({"arm": arms, "source": ["paper", "paper"],
                  "changed": ["mask=t_t, inter_sample=per_sample_mixing", "inter_sample=rope_attention"]}
                 ).to_csv(report / "arms.csv", index=False)
    record = tmp_path / "record"
    assert attribution_main(["record", "--from", str(report), "--to", str(record), "--note", "Two layers.",
                             "--reuse", str(earlier)]) == 0
    header = (record / "header.md").read_text()
    assert "configurations ['p04_pdmix_t7'] (arms ['A6_mask_t_t', 'A7_inter_sample'])" in header
    assert "216cfffc2d65fb499c7ec98abee53edd0af106d5" in header and "> Two layers." in header
    assert {p.name for p in (record / "figures").iterdir()} >= {"figure5_layers.png", "figure6_layers.svg"}
    section = (record / "section.md").read_text()
    assert "](figures/figure5_layers.png)" in section
    # the answer per figure and layer, from the ladder: p06_pd3_t3 is Figure 5's, p04_pdmix_t7 Figure 6's
    assert ("- Figure 5, MultiTab-Net with per_sample_mixing (A6_mask_t_t): **holds** on 1 of the 1 "
            "configuration(s) run (p06_pd3_t3 +1.07 ± 0.19).") in section
    assert ("- Figure 6, MultiTab-Net with rope_attention (A7_inter_sample): **inconclusive** on 1 of the 1 "
            "configuration(s) run (p04_pdmix_t7 -2.98 ± 0.71 (80 % power: 5 seeds, does not hold)).") in section
    assert "The answer per figure" not in (earlier / "section.md").read_text()  # its arms change the rivals too
    # in plain words, the first arm is named by its layer, not by whose choice its last change was
    assert "- p06_pd3_t3: under A6_mask_t_t (MultiTab-Net with per_sample_mixing) the claim" in section
    assert "under A0_authors (the authors' code) the claim" in (earlier / "section.md").read_text()
    both = pd.read_csv(record / "metrics.csv", dtype={"degrees": str})
    assert len(both) == len(old[old.arm.isin(arms)]) and set(both.config) == {"p06_pd3_t3", "p04_pdmix_t7"}
    pd.testing.assert_frame_equal(both[both.config == "p04_pdmix_t7"].reset_index(drop=True),
                                  old[old.arm.isin(arms) & (old.config == "p04_pdmix_t7")].reset_index(drop=True))
    new_rungs = pd.read_csv(record / "ladder.csv").set_index(["config", "arm"])
    old_rungs = pd.read_csv(earlier / "ladder.csv").set_index(["config", "arm"])
    for arm in arms:
        for column in ("gap", "gap_se", "verdict", "best_rival"):
            assert new_rungs.loc[("p04_pdmix_t7", arm), column] == old_rungs.loc[("p04_pdmix_t7", arm), column]
    # a record made by reuse is reused in turn (its p04 rows come along, the header names it); the record being
    # written, nothing left to reuse, or a reused configuration without one of the report's arms: a clear error
    assert attribution_main(["record", "--from", str(report), "--to", str(tmp_path / "chained"), "--note", "x",
                             "--reuse", str(record)]) == 0
    assert (tmp_path / "chained" / "ladder.csv").read_bytes() == (record / "ladder.csv").read_bytes()
    # ... and its header names the commit each configuration was trained at: p04 came to `record` from the
    # eight-arm record, so the chained header nests that record's line under its own
    chained = (tmp_path / "chained" / "header.md").read_text().splitlines()
    at = next(i for i, line in enumerate(chained) if line.startswith("- Reused, not retrained:"))
    assert chained[at].startswith(f"- Reused, not retrained: configurations ['p04_pdmix_t7'] (arms {arms}) are "
                                  f"the runs of {record.as_posix()}, rows copied as they are; it had itself reused")
    assert chained[at + 1].startswith("  - Reused, not retrained: configurations ['p04_pdmix_t7'] ") and (
        "216cfffc2d65fb499c7ec98abee53edd0af106d5" in chained[at + 1])
    # a record that trained some of what it gives and reused the rest names both
    wide = tmp_path / "wide"
    wide.mkdir()
    for name in ("metrics.csv", "curves.csv", "arms.csv"):
        shutil.copy(report / name, wide / name)
    mine[mine.config == "__none__"].to_csv(wide / "metrics.csv", index=False)  # the report has nothing: all reused
    assert attribution_main(["record", "--from", str(wide), "--to", str(tmp_path / "both"), "--note", "x",
                             "--reuse", str(record)]) == 0
    line = next(x for x in (tmp_path / "both" / "header.md").read_text().splitlines() if x.startswith("- Reused"))
    assert (f"configurations ['p06_pd3_t3', 'p04_pdmix_t7'] (arms {arms}) are the runs of {record.as_posix()}, "
            "rows copied as they are: ['p06_pd3_t3'] trained there (Commit: `unknown`") in line
    assert line.endswith("; ['p04_pdmix_t7'] it had itself reused:"), line
    (tmp_path / "both" / "header.md").write_text(
        (tmp_path / "both" / "header.md").read_text().replace("configurations ['p06", "configurations ['p06'"))
    assert attribution_main(["record", "--from", str(wide), "--to", str(tmp_path / "bad"), "--note", "x",
                             "--reuse", str(tmp_path / "both")]) == 1
    assert not (tmp_path / "bad").exists()
    # --configs: only those configurations of the report (the ones trained since), the rest from --reuse
    old[old.arm.isin(arms)].to_csv(wide / "metrics.csv", index=False, float_format="%.6g")
    old_curves[old_curves.arm.isin(arms)].to_csv(wide / "curves.csv", index=False, float_format="%.6g")
    assert attribution_main(["record", "--from", str(wide), "--to", str(tmp_path / "part"), "--note", "x",
                             "--configs", "p06_pd3_t3", "--reuse", str(earlier)]) == 0
    assert (tmp_path / "part" / "ladder.csv").read_bytes() == (record / "ladder.csv").read_bytes()
    assert "- Trained at the commit above: configurations ['p06_pd3_t3']." in (
        tmp_path / "part" / "header.md").read_text()
    for args in (["--configs", "p02_pd3_t3", "--reuse", str(earlier)], ["--configs", "p06_pd3_t3"]):
        assert attribution_main(["record", "--from", str(wide), "--to", str(tmp_path / "no"), "--note", "x",
                                 *args]) == 1
        assert not (tmp_path / "no").exists()
    before = {p.name: p.read_bytes() for p in (tmp_path / "chained").iterdir() if p.is_file()}
    assert attribution_main(["record", "--from", str(report), "--to", str(tmp_path / "chained"), "--note", "x",
                             "--reuse", str(tmp_path / "chained")]) == 1
    assert {p.name: p.read_bytes() for p in (tmp_path / "chained").iterdir() if p.is_file()} == before
    assert attribution_main(["record", "--from", str(record), "--to", str(tmp_path / "again"), "--note", "x",
                             "--reuse", str(earlier)]) == 1
    pd.DataFrame({"arm": ["A6_mask_t_t", "A9"], "source": ["paper", "ours"], "changed": ["mask=t_t", "x=y"]}
                 ).to_csv(report / "arms.csv", index=False)
    assert attribution_main(["record", "--from", str(report), "--to", str(tmp_path / "lack"), "--note", "x",
                             "--reuse", str(earlier)]) == 1


# ------------------------------------------------------------------- the study under `protocol: authors_code`
def _study(protocol: str, **attribution):
    """The repo's params with a one-configuration, three-model, two-seed study under `protocol`."""
    raw, _ = _params(**attribution)
    raw["protocol"] = protocol
    raw["study"]["configs"] = ["p06_pd3_t3"]
    raw["runs"]["study"]["models"] = ["stl_mlp", "mmoe", "multitab_net"]
    raw["runs"]["study"]["seeds"] = [0, 1]
    raw["study"]["claim"]["rivals"] = ["mmoe"]
    return parse_params(raw)


def _hparams(params, run):
    config, point = run_train(params, run.group, run.model, run.point)
    return config, for_run(ROOT, run.hparams_file, model=run.model, dataset=run.dataset, point=point, config=config)


def test_protocol_authors_code_makes_the_study_the_authors_arm():
    params = _study("authors_code")
    doc = document(params, ["study"])
    # the data: the authors' options, a dataset per run seed (seed 0 and 1 differ, every model of a seed shares it)
    assert list(doc["group_reports"]) == ["study-authors_code"]
    assert {k: f for k, f in doc["synthetic_data"].items() if k.startswith("study-")} == {
        f"study-p06_pd3_t3_tr_raw_s{s}": {
            "options": {"config": "p06_pd3_t3", "profile": "study", "evaluation": "training_rows", "targets": "raw",
                        "data-seed": s},
            "out": f"data/study/p06_pd3_t3_tr_raw_s{s}", "verdict": f"data/validated/study/p06_pd3_t3_tr_raw_s{s}.json",
            "profile_data": "study.data"} for s in (0, 1)}
    runs = expand(params, ["study"])
    assert set(runs) == {k for k in doc["train_runs"] if k.startswith("study-")} == {
        "study-p06_pd3_t3_tr_raw_s0-stl_mlp-optadamw0-epauthors-0",
        "study-p06_pd3_t3_tr_raw_s1-stl_mlp-optadamw0-epauthors-1",
        "study-p06_pd3_t3_tr_raw_s0-mmoe-optadamw0-epauthors-0",
        "study-p06_pd3_t3_tr_raw_s1-mmoe-optadamw0-epauthors-1",
        "study-p06_pd3_t3_tr_raw_s0-multitab_net-optadamw0-epauthors-masknone-mixpsm-0",
        "study-p06_pd3_t3_tr_raw_s1-multitab_net-optadamw0-epauthors-masknone-mixpsm-1"}
    assert {r.seed: r.data for r in runs.values() if r.model == "mmoe"} == {
        0: "data/study/p06_pd3_t3_tr_raw_s0", 1: "data/study/p06_pd3_t3_tr_raw_s1"}
    assert {r.data for r in runs.values() if r.seed == 0} == {"data/study/p06_pd3_t3_tr_raw_s0"}
    net = runs["study-p06_pd3_t3_tr_raw_s1-multitab_net-optadamw0-epauthors-masknone-mixpsm-1"]
    assert (net.verdict, net.out, net.hparams_file) == (
        "data/validated/study/p06_pd3_t3_tr_raw_s1.json",
        "results/study_runs/p06_pd3_t3_tr_raw_s1/multitab_net/optadamw0-epauthors-masknone-mixpsm/seed1",
        "hparams/authors/multitab_bench/multitab_net.yaml")
    # the training: AdamW with weight decay 0 for every model, the authors' epochs (the file's 10, not the
    # group's cap of 40), mask none and per-sample mixing for MultiTab-Net; recorded in metrics.json
    assert trains_arm(params, "study") and group_train(params, "study").max_epochs == 40
    config, h = _hparams(params, net)
    assert config.max_epochs is None and h.optim["max_epochs"] == 10
    assert (h.optim["optimizer"], h.optim["weight_decay"]) == ("adamw", 0.0)
    assert (h.model["mask"], h.model["inter_sample"]) == ("none", "per_sample_mixing")
    config, h = _hparams(params, runs["study-p06_pd3_t3_tr_raw_s0-mmoe-optadamw0-epauthors-0"])
    assert config.max_epochs is None and (h.optim["optimizer"], h.optim["weight_decay"]) == ("adamw", 0.0)
    # A0's settings whichever arms the attribution study trains
    assert set(expand(_study("authors_code", run_arms=["A7_inter_sample"]), ["study"])) == set(runs)


def test_protocol_paper_leaves_the_study_as_it_was():
    params = _study("paper")
    doc = document(params, ["study"])
    assert list(doc["group_reports"]) == ["study"]
    assert {k: f["options"] for k, f in doc["synthetic_data"].items() if k.startswith("study-")} == {
        "study-p06_pd3_t3": {"config": "p06_pd3_t3", "profile": "study"}}
    runs = expand(params, ["study"])
    assert set(runs) == {f"study-p06_pd3_t3-{m}-{s}" for m in ("stl_mlp", "mmoe", "multitab_net") for s in (0, 1)}
    net = runs["study-p06_pd3_t3-multitab_net-1"]
    assert (net.point, net.data, net.verdict, net.out) == (
        None, "data/study/p06_pd3_t3", "data/validated/study/p06_pd3_t3.json",
        "results/study_runs/p06_pd3_t3/multitab_net/seed1")
    assert not trains_arm(params, "study")
    config, h = _hparams(params, net)
    assert config.max_epochs == 40 and (h.optim["optimizer"], h.optim["weight_decay"]) == ("adam", 1e-5)
    assert (h.model["mask"], h.model["inter_sample"]) == ("t_t", "rope_attention")
    assert params.bench.data.targets == "standard"


def test_protocol_authors_code_needs_an_authors_arm_for_the_study():
    raw, _ = _params()
    raw["protocol"] = "authors_code"
    raw["attribution"]["arms"]["A0_authors"]["source"] = "ours"
    with pytest.raises(ConfigError, match="params.yaml: attribution.arms: no arm has source authors_code"):
        document(parse_params(raw), ["study"])


def test_the_study_report_reads_the_authors_arm_runs(tmp_path):
    params = _study("authors_code")
    for _config, model, seed, data, point in study_runs(params):
        run = tmp_path / data / model / point_id(point) / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "metrics.json").write_text(json.dumps({"test": {"y1": 0.5 + seed}, "val": {"y1": 0.5}, "epochs": 10}))
    configs = {"p06_pd3_t3": SyntheticConfig("p06_pd3_t3", ("correlation",), 0.6, (3, 3, 3))}
    metrics, curves = collect_study(params, tmp_path, configs, ["stl_mlp", "mmoe", "multitab_net"], [0, 1])
    assert list(metrics.columns) == METRICS_COLUMNS and list(curves.columns) == CURVES_COLUMNS
    assert sorted(zip(metrics.model, metrics.seed, metrics.test_ev)) == [
        (m, s, 0.5 + s) for m in ("mmoe", "multitab_net", "stl_mlp") for s in (0, 1)]
    assert set(metrics.config) == {"p06_pd3_t3"}
    assert data_settings(params) == "evaluation training_rows, data_seed per_run, targets raw"
    assert arm_note(params) == (", with protocol authors_code's arm A0_authors of `attribution.arms` laid over them "
                                "(optimizer adamw_wd0, mask none, inter_sample per_sample_mixing, epochs authors)")
    assert (data_settings(_study("paper")), arm_note(_study("paper"))) == ("70/15/15 split", "")


def test_the_answer_per_figure_lists_configurations_in_the_papers_order_whatever_the_records():
    """figure_answer orders each figure's configurations along the paper's x-axes (here Figure 5: p=0.2 before
    p=0.6), not in the order the ladder holds them (a record appends the configurations it reuses)."""
    from multitab.evaluation.bench.layers import figure_answer

    record = ROOT / "results/study/layers_n100k_3seeds_4of9"
    table = pd.read_csv(record / "ladder.csv", keep_default_na=False, na_values=[""])
    metrics = pd.read_csv(record / "metrics.csv", dtype={"degrees": str})
    settings = StudySettings()
    for order in (table, table.iloc[::-1].reset_index(drop=True)):
        lines = [x for x in figure_answer(order, metrics, settings) if x.startswith("- Figure 5")]
        assert len(lines) == 2 and all(x.index("p02_pd3_t3") < x.index("p06_pd3_t3") for x in lines)


def _claim_rows(p_values: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame({"rival": list(p_values), "p_value": list(p_values.values()),
                         "status": ["above (significant)" if p < 0.05 else "not significant"
                                    for p in p_values.values()]})


def test_short_of_names_the_rivals_that_keep_holds_from_a_claim_above_the_others():
    """Above MMoE and STEM, not PLE: the ladder says which rival (and its p) made the verdict inconclusive; above
    every rival or none, nothing (the gap to the best rival says it)."""
    from multitab.evaluation.bench.numbers import short_of
    from multitab.evaluation.bench.render import not_above

    settings = StudySettings()
    assert short_of(_claim_rows({"mmoe": 0.024, "ple": 0.0711, "stem": 0.032}), settings) == "PLE p 0.071"
    assert short_of(_claim_rows({"mmoe": 0.2, "ple": 0.3, "stem": 0.01}), settings) == "MMoE p 0.200, PLE p 0.300"
    assert short_of(_claim_rows({"mmoe": 0.01, "ple": 0.02, "stem": 0.03}), settings) == ""
    assert short_of(_claim_rows({"mmoe": 0.6, "ple": 0.7, "stem": 0.5}), settings) == ""
    assert short_of(_claim_rows({"mmoe": 0.01, "ple": float("nan"), "stem": 0.03}), settings) == "PLE p nan"
    assert not_above("PLE p 0.071") == ", not above PLE p 0.071"
    assert not_above(float("nan")) == "" and not_above("") == ""


def test_a_positive_gap_that_is_inconclusive_names_the_rival_it_is_not_above():
    """p06_pd3_t5 in the 8-of-9 layers record: MultiTab-Net (A6) is above STEM, the best rival, by +1.24 ± 0.33
    and significantly above MMoE and STEM, but not PLE (one seed far below the other two): the ladder, the plain
    words and the answer per figure say so."""
    record = ROOT / "results/study/layers_n100k_3seeds_8of9"
    table = pd.read_csv(record / "ladder.csv", keep_default_na=False, na_values=[""]).set_index(["config", "arm"])
    assert table.loc[("p06_pd3_t5", "A6_mask_t_t"), "verdict"] == "inconclusive"
    assert table.loc[("p06_pd3_t5", "A6_mask_t_t"), "short_of"] == "PLE p 0.071"
    assert table["short_of"].isna().sum() == len(table) - 1  # the one configuration and arm where it applies
    section = (record / "section.md").read_text()
    assert "p06_pd3_t5 +1.24 ± 0.33 (not above PLE p 0.071; 80 % power: 6 seeds, holds)" in section
    assert "(gap to the best rival +1.24 ± 0.33 points, not above PLE p 0.071)" in section
    assert "| **inconclusive**, not above PLE p 0.071 |" in section
