"""The MultiTab-Bench study profile: Δm per seed, the claim check, outputs regenerated from the metrics CSV,
the profile overlays, and the flow leaving opt-in (study) stages out of the default run."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from multitab.config import ConfigError
from multitab.config.aggregate import SyntheticConfig
from multitab.evaluation.bench.numbers import (
    StudyError,
    StudySettings,
    claims,
    collect,
    convergence,
    delta_m_runs,
    figure_number,
    read_metrics_csv,
    summarise,
    val_outliers,
)
from multitab.evaluation.bench.study import main as bench_study_main
from multitab.evaluation.bench.study import regenerate, section_only, write_study
from multitab.runs.profiles import profiled
from multitab.runtime.exit_codes import BAD_INPUT

CONFIGS = {
    "p02_pd3_t3": SyntheticConfig("p02_pd3_t3", ("correlation",), 0.2, (3, 3, 3)),
    "p06_pd234_t3": SyntheticConfig("p06_pd234_t3", ("nonuniform",), 0.6, (2, 3, 4)),
}
# mean EV per (config, model): MultiTab-Net clearly best on p02, MMoE best on p06_pd234
LEVELS = {
    "p02_pd3_t3": {"stl_mlp": 0.80, "mmoe": 0.82, "ple": 0.81, "stem": 0.83, "multitab_net": 0.90},
    "p06_pd234_t3": {"stl_mlp": 0.80, "mmoe": 0.92, "ple": 0.81, "stem": 0.83, "multitab_net": 0.85},
}

ROOT_STUDY = Path(__file__).resolve().parents[1] / "results" / "study"


def _write_runs(root: Path, seeds=(0, 1, 2)) -> None:
    rng = np.random.default_rng(3)
    for conf, models in LEVELS.items():
        for model, level in models.items():
            for seed in seeds:
                run = root / conf / model / f"seed{seed}"
                folder = run / "dvclive" / "plots" / "metrics"
                folder.mkdir(parents=True)
                test = {t: level + float(rng.normal(0, 0.002)) for t in ("y1", "y2", "y3")}
                curve = [level - 0.3 / (i + 1) for i in range(6)]
                (folder / "val_mean.tsv").write_text("timestamp\tstep\tval_mean\n"
                                                     + "".join(f"0\t{i}\t{v}\n" for i, v in enumerate(curve)))
                (folder / "train_loss.tsv").write_text("timestamp\tstep\ttrain_loss\n"
                                                       + "".join(f"0\t{i}\t{1 - v}\n" for i, v in enumerate(curve)))
                (run / "metrics.json").write_text(json.dumps({
                    "dataset": conf, "model": model, "seed": seed, "test": test, "val": test, "best_epoch": 4,
                    "epochs": 6, "max_epochs": 100, "stopped_early": True, "train_seconds": 2.0,
                    "samples_per_second": 1000.0, "n_rows": {"train": 700, "val": 150, "test": 150},
                    "device": "cpu"}))


MODELS = ["stl_mlp", "mmoe", "ple", "stem", "multitab_net"]


def test_figure_number_follows_the_groups_figure_6_first():
    assert [figure_number(c) for c in CONFIGS.values()] == ["5", "6"]
    assert figure_number(SyntheticConfig("both", ("count", "nonuniform"), 0.6, (3, 5))) == "6"
    assert figure_number(SyntheticConfig("x", ("other",), None, None)) == ""


def test_delta_m_and_claim_per_configuration(tmp_path):
    _write_runs(tmp_path / "runs")
    metrics, curves = collect(tmp_path / "runs", CONFIGS, MODELS)
    assert len(metrics) == 2 * 5 * 3 * 3 and len(curves) == 2 * 5 * 3 * 6
    dm = delta_m_runs(metrics)
    stl = metrics[(metrics.model == "stl_mlp") & (metrics.config == "p02_pd3_t3")]
    base = stl.groupby("task")["test_ev"].mean()
    one = metrics[(metrics.model == "mmoe") & (metrics.config == "p02_pd3_t3") & (metrics.seed == 1)]
    expected = float(np.mean([100 * (v - base[t]) / base[t] for t, v in zip(one.task, one.test_ev)]))
    got = dm[(dm.model == "mmoe") & (dm.config == "p02_pd3_t3") & (dm.seed == 1)].delta_m.item()
    assert got == pytest.approx(expected, rel=1e-12)
    summary = summarise(dm)
    assert (summary.n_seeds == 3).all() and summary["std"].notna().all()
    table = claims(dm, list(CONFIGS), StudySettings())
    verdict = table.drop_duplicates("config").set_index("config").verdict
    assert verdict["p02_pd3_t3"] == "holds"
    assert verdict["p06_pd234_t3"] == "does not hold"
    row = table[(table.config == "p06_pd234_t3") & (table.rival == "mmoe")].iloc[0]
    assert row.status == "below (significant)" and row.difference < 0 and row.p_value > 0.5 and row.p_below < 0.05


def _dm(samples: dict[str, list[float]], conf: str = "c") -> pd.DataFrame:
    return pd.DataFrame([{"config": conf, "model": m, "seed": i, "delta_m": v}
                         for m, values in samples.items() for i, v in enumerate(values)])


def test_verdict_is_three_valued_at_alpha_on_constructed_delta_m():
    """holds: significantly above every rival; does not hold: significantly below one after the Holm
    correction; inconclusive: overlapping samples, whichever way the means point."""
    rivals = {"mmoe": [0.0, 0.1, -0.1], "ple": [0.2, 0.3, 0.1], "stem": [-0.2, -0.1, -0.3]}

    def verdict(ours: list[float]) -> tuple[str, dict[str, str]]:
        table = claims(_dm({"multitab_net": ours, **rivals}), ["c"], StudySettings())
        return table.verdict.iloc[0], dict(zip(table.rival, table.status))

    assert verdict([2.0, 2.1, 1.9]) == ("holds", dict.fromkeys(rivals, "above (significant)"))
    got, status = verdict([-1.0, -1.1, -0.9])
    assert got == "does not hold" and set(status.values()) == {"below (significant)"}
    # significantly below PLE after the Holm correction, not the others: one significant loss decides
    got, status = verdict([-0.25, -0.2, -0.3])
    assert got == "does not hold" and status == {"mmoe": "not significant", "ple": "below (significant)",
                                                  "stem": "not significant"}
    # MMoE's own sample: below PLE at one-sided p 0.033 alone (2 degrees of freedom), 0.1 after Holm over three;
    # above STEM at p 0.067 (Welch's own degrees of freedom made that 0.035)
    got, status = verdict([0.0, 0.1, -0.1])
    assert got == "inconclusive" and set(status.values()) == {"not significant"}
    got, status = verdict([0.5, -0.5, 0.1])  # overlapping every rival
    assert got == "inconclusive" and set(status.values()) == {"not significant"}
    # the 40-epoch record's p06_pd4_t3 shape: a mean far below the rivals' with a wide spread decides nothing
    got, status = verdict([-15.9, -1.9, -3.2])
    assert got == "inconclusive" and set(status.values()) == {"not significant"}
    # the means above every rival, one of them not significantly: inconclusive, not `holds`
    got, status = verdict([0.6, 0.2, 0.4])
    assert got == "inconclusive" and status["stem"] == "above (significant)" and status["ple"] == "not significant"
    table = claims(_dm({"multitab_net": [0.6, 0.2, 0.4], **rivals}), ["c"], StudySettings(alpha=0.5))
    assert table.verdict.iloc[0] == "holds"  # the stated alpha decides


def test_convergence_flags_runs_improving_at_the_end_and_validation_far_below_their_siblings():
    runs = [  # (model, seed, best_epoch, epochs, stopped_early, validation EV per task)
        ("mmoe", 0, 35, 40, True, 0.95), ("mmoe", 1, 36, 40, False, 0.95), ("mmoe", 2, 40, 40, False, 0.96),
        # the 3-seed record's PLE on p06_pd3_t5: seed 1 stopped at epoch 8, 3.3 % below its siblings' median
        ("ple", 0, 11, 16, True, 0.984), ("ple", 1, 3, 8, True, 0.951), ("ple", 2, 12, 17, True, 0.983),
        # the A6 seed the training-loss rule flagged (loss 3.5x its sibling's) at its siblings' validation EV
        ("multitab_net", 0, 30, 35, True, 0.990), ("multitab_net", 1, 17, 22, True, 0.991),
        ("multitab_net", 2, 18, 23, True, 0.989)]
    metrics = pd.DataFrame([{"config": "c", "model": m, "seed": s, "task": t, "best_epoch": b, "epochs": e,
                             "stopped_early": st, "train_seconds": 1.0, "val_ev": v + d}
                            for m, s, b, e, st, v in runs for t, d in (("y1", 0.002), ("y2", -0.002))])
    conv = convergence(metrics, StudySettings(patience=5)).set_index("model")
    # mmoe seed 1 (best 4 epochs before the cap) and seed 2 (best at the cap); seed 0 stopped early
    flags = ["best_at_cap", "improving_at_end", "val_outliers", "not_converged"]
    assert conv.loc["mmoe", flags].tolist() == [1, 2, 0, 2]
    assert conv.loc["ple", ["improving_at_end", "val_outliers", "not_converged"]].tolist() == [0, 1, 1]
    assert conv.loc["multitab_net", ["val_outliers", "not_converged"]].tolist() == [0, 0]
    assert val_outliers(metrics, 3.0) == {("c", "ple", 1): pytest.approx(100 * (0.9835 - 0.951) / 0.9835)}
    # the threshold is the setting's: at 4 % PLE's seed 1 is not flagged; two seeds give no siblings' median
    assert convergence(metrics, StudySettings(patience=3, val_drop=4.0))["not_converged"].tolist() == [1, 0, 0]
    assert convergence(metrics[metrics.seed < 2], StudySettings())["val_outliers"].tolist() == [0, 0, 0]


def test_claim_with_one_seed_is_untested_and_a_missing_rival_is_missing(tmp_path):
    _write_runs(tmp_path / "runs", seeds=(0,))
    shutil.rmtree(tmp_path / "runs" / "p06_pd234_t3" / "stem")
    metrics, _ = collect(tmp_path / "runs", CONFIGS, MODELS)
    table = claims(delta_m_runs(metrics), list(CONFIGS), StudySettings())
    verdict = table.drop_duplicates("config").set_index("config").verdict
    assert verdict["p02_pd3_t3"] == "inconclusive"
    assert set(table[table.config == "p02_pd3_t3"].status) == {"untested: one seed"}
    assert verdict["p06_pd234_t3"] == "missing"
    assert math.isnan(summarise(delta_m_runs(metrics))["std"].iloc[0])


def test_section_warns_when_compared_runs_were_still_improving_at_their_cap(tmp_path):
    _write_runs(tmp_path / "runs")
    metrics, _ = collect(tmp_path / "runs", CONFIGS, MODELS)
    assert "NOT CONVERGED" not in section_only(metrics, StudySettings(), MODELS)
    # MultiTab-Net's runs on p06_pd234_t3 end at the cap with their best epoch last: not converged
    capped = (metrics.model == "multitab_net") & (metrics.config == "p06_pd234_t3")
    metrics.loc[capped, "best_epoch"] = metrics.loc[capped, "epochs"]
    metrics.loc[capped, "stopped_early"] = False
    text = section_only(metrics, StudySettings(), MODELS)
    warning = text[text.index("NOT CONVERGED"):].split("\n")[0]
    assert "3 run(s)" in warning and "p02_pd3_t3" not in warning
    assert "the verdict on p06_pd234_t3 compares under-trained models" in warning
    assert "the other configurations' verdicts stand" in warning
    assert text.index("NOT CONVERGED") < text.index("| Configuration | Verdict")


def test_record_regenerates_its_figures_and_tables_from_its_metrics_csv(tmp_path):
    _write_runs(tmp_path / "runs")
    metrics, curves = collect(tmp_path / "runs", CONFIGS, MODELS)
    report = tmp_path / "study_report"
    report.mkdir()
    metrics.to_csv(report / "metrics.csv", index=False, float_format="%.6g")
    curves.to_csv(report / "curves.csv", index=False, float_format="%.6g")
    record = tmp_path / "record"
    assert bench_study_main(["record", "--from", str(report), "--to", str(record),
                             "--note", "Small test record."]) == 0
    header = (record / "header.md").read_text()
    assert "Small test record." in header and "stl_mlp: 12 s in 6 runs (2 s per run, median 6 epochs)" in header
    paths = regenerate(record)
    names = {p.relative_to(record).as_posix() for p in paths}
    assert {"delta_m.csv", "delta_m.md", "claims.csv", "claims.md", "section.md", "convergence.csv",
            "figures/figure5_delta_m.svg", "figures/figure6_delta_m.png", "figures/learning_curves.svg"} <= names
    first = {n: (record / n).read_bytes() for n in names}
    # the same record regenerated from a copy of its CSVs alone gives byte-identical outputs
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("metrics.csv", "curves.csv", "header.md"):
        shutil.copy(record / name, copy / name)
    assert bench_study_main(["regenerate", str(copy)]) == 0
    assert {n: (copy / n).read_bytes() for n in names} == first
    section = (record / "section.md").read_text()
    assert section.startswith("## MultiTab-Bench") and "Small test record." in section
    assert "| p02_pd3_t3 | **holds** |" in section and "| p06_pd234_t3 | **does not hold** |" in section
    # the table agrees with the numbers recomputed from the CSV
    table = pd.read_csv(record / "delta_m.csv")
    again = summarise(delta_m_runs(read_metrics_csv(record / "metrics.csv")))
    pd.testing.assert_frame_equal(table, again, check_exact=False, rtol=1e-5)


def test_bad_metrics_csv_names_the_file(tmp_path):
    with pytest.raises(StudyError, match="not found"):
        read_metrics_csv(tmp_path / "nope.csv")
    (tmp_path / "m.csv").write_text("config,model\nx,y\n")
    with pytest.raises(StudyError, match=r"m\.csv: columns .*'seed'"):
        read_metrics_csv(tmp_path / "m.csv")


def test_write_study_with_no_runs_says_missing(tmp_path):
    metrics, curves = collect(tmp_path / "none", CONFIGS, MODELS)
    _, section = write_study(metrics, curves, tmp_path / "out")
    assert "Runs: 0" in section


def test_groups_and_the_study_profile_lay_their_sections_over_train_and_bench_data():
    from multitab.config import parse_params, read_yaml
    from multitab.runs.profiles import group_train

    raw = read_yaml(Path(__file__).resolve().parents[1] / "params.yaml")
    raw["train"].update(max_epochs=2, max_train_rows=2048)
    raw["bench"]["data"]["n_samples"] = 20000
    raw["runs"]["bench"]["train"] = {"max_epochs": 10, "max_train_rows": None}
    raw["runs"]["study"].update(seeds=[0, 1], train={"max_epochs": None})
    raw["study"]["data"] = {"n_samples": 100000}
    params = parse_params(raw)
    assert profiled(params, "default") == params
    bench = group_train(params, "bench")
    assert (bench.max_epochs, bench.max_train_rows) == (10, None)
    assert group_train(params, "real") == params.train  # a group without `train` runs with `train` as it is
    study = profiled(params, "study")
    assert study.bench.data.n_samples == 100000 and params.bench.data.n_samples == 20000  # a copy, untouched
    assert group_train(params, "study").max_epochs is None and group_train(params, "study").max_train_rows == 2048
    assert params.train.max_epochs == 2 and params.group("study").seeds == (0, 1)
    with pytest.raises(ConfigError, match="unknown profile"):
        profiled(params, "nope")
    with pytest.raises(ConfigError, match=r"params.yaml: no run group `runs.nope`"):
        group_train(params, "nope")
    with pytest.raises(ConfigError, match=r"params.yaml: study\.configs: \['b'\] are not keys"):
        parse_params({**raw, "study": {**raw["study"], "configs": ["b"]}})
    with pytest.raises(ConfigError, match=r"params.yaml: runs.study.train.max_epoch: unknown key; known: \["):
        parse_params({**raw, "runs": {**raw["runs"], "study": {**raw["runs"]["study"], "train": {"max_epoch": 3}}}})
    bad = parse_params({**raw, "runs": {**raw["runs"], "bench": {**raw["runs"]["bench"], "train": {"max_epochs": 0}}}})
    with pytest.raises(ConfigError, match=r"params.yaml: runs.bench.train: train.max_epochs=0 must be >= 1"):
        group_train(bad, "bench")


def test_opt_in_groups_are_in_runs_yaml_only_when_asked_for():
    from multitab.config import load_params
    from multitab.runs.document import document
    from multitab.runs.expand import active_groups

    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    assert active_groups(params) == ["real", "ablation", "bench"]
    default = document(params)
    assert default["opt_in_groups"] == [] and default["group_reports"] == {}
    assert list(default["synthetic_data"]) == list(params.bench.configs)  # MultiTab-Bench's folders alone
    assert default["sweep_selections"] == [] and {r["group"] for r in default["train_runs"].values()} == {
        "real", "ablation", "bench"}
    study = document(params, ["study"])
    assert study["opt_in_groups"] == ["study"] and list(study["synthetic_data"]) == [
        *params.bench.configs, *(f"study-{c}" for c in params.study.configs)]
    assert list(study["group_reports"]) == ["study"]
    assert len(study["train_runs"]) == len(default["train_runs"]) + 9 * 5 * 3
    assert active_groups(params, ["sweep_*"]) == ["real", "ablation", "bench", "sweep_mlp", "sweep_inter_sample"]
    with pytest.raises(ConfigError, match="no run group matches 'stduy'"):
        active_groups(params, ["stduy"])
    # a default run that trains with the sweep's selection reads it as `make sweep` wrote it: the sweep groups stay out
    swept = params.replace(train=dataclasses.replace(params.train, hparams="swept"))
    assert active_groups(swept) == ["real", "ablation", "bench"]


def test_repo_params_have_a_study_profile_that_leaves_the_default_unchanged():
    from multitab.config import load_params

    root = Path(__file__).resolve().parents[1]
    params = load_params(root / "params.yaml")
    study = params.study
    assert len(study.configs) == 9 and set(study.configs) == set(params.bench.configs)
    from multitab.runs.expand import expand
    from multitab.runs.profiles import group_train

    assert group_train(params, study.group).max_train_rows is None
    assert profiled(params, "study").bench.data.n_samples > params.bench.data.n_samples
    runs = expand(params)
    assert {r.opt_in for r in runs.values() if r.group == study.group} == {True}
    assert {r.opt_in for r in runs.values() if r.group in ("real", "ablation", "bench")} == {False}
    import yaml

    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    iterates = {"synthesize": "${synthetic_data}", "validate_synthetic": "${synthetic_data}",
                "group_report": "${group_reports}", "sweep_select": "${sweep_selections}", "train": "${train_runs}"}
    for stage, lists in iterates.items():  # runs.yaml's lists: empty unless it holds the opt-in groups
        assert stages[stage]["foreach"] == lists, stage


def test_explained_variance_and_mse_equal_sklearn_exactly():
    from sklearn.metrics import explained_variance_score, mean_squared_error

    from multitab.metrics import explained_variance, mse

    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 3000, 20001):
        y = rng.normal(size=n).astype(np.float32)
        p = (y + rng.normal(scale=0.3, size=n)).astype(np.float32)
        assert explained_variance(y, p) == float(explained_variance_score(y.astype(np.float64), p.astype(np.float64)))
        assert mse(y, p) == float(mean_squared_error(y.astype(np.float64), p.astype(np.float64)))
    const = np.ones(5)
    for pred in (const, const + 1, const + np.arange(5)):  # constant target: 1.0 when y - ŷ is constant, else 0.0
        assert explained_variance(const, pred) == float(explained_variance_score(const, pred))
    assert explained_variance(const, const + np.arange(5)) == 0.0
    with pytest.raises(ValueError, match="3 labels but 2 predictions"):
        explained_variance(np.ones(3), np.ones(2))


def _study_params(tmp_path: Path) -> tuple[dict, Path]:
    """The repo's params.yaml with a two-configuration study (one of Figure 5, one of Figure 6), written to
    tmp_path: (the params, their path)."""
    import yaml

    root = Path(__file__).resolve().parents[1]
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["bench"]["configs"] = {
        "p02_pd3_t3": {"groups": ["correlation"], "correlation": 0.2, "degrees": [3, 3, 3], "seed": 0},
        "p06_pd234_t3": {"groups": ["nonuniform"], "correlation": 0.6, "degrees": [2, 3, 4], "seed": 0}}
    params["study"]["configs"] = params["attribution"]["configs"] = ["p02_pd3_t3", "p06_pd234_t3"]
    for group in ("sweep_mlp", "sweep_inter_sample", "study_bf16"):  # they name the repo's configurations
        del params["runs"][group]
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))
    return params, path


def test_aggregate_study_stage_writes_the_report_from_the_runs(tmp_path):
    import yaml

    from stages import aggregate_study

    params, path = _study_params(tmp_path)
    _write_runs(tmp_path / "runs")
    out = tmp_path / "report"
    assert aggregate_study.main(["--params", str(path), "--runs", str(tmp_path / "runs"), "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert report.startswith("# MultiTab-Bench study report\n\n## MultiTab-Bench: Figures 5 and 6")
    assert "| p02_pd3_t3 | **holds** |" in report and "Scale: 100,000 samples" in report
    assert len(pd.read_csv(out / "metrics.csv")) == 90
    params["study"]["configs"] = ["nope"]
    path.write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))
    argv = ["--params", str(path), "--runs", str(tmp_path / "runs"), "--out", str(out)]
    assert aggregate_study.main(argv) == BAD_INPUT  # a config error: not retried


def test_interim_report_over_a_study_still_training(tmp_path):
    """`make study-interim`: the stage's script over the runs finished so far. A configuration whose runs are
    not all there reads `missing` (never a number); before any run finished it fails clearly, writing nothing."""
    import shutil

    from stages import aggregate_study

    _, path = _study_params(tmp_path)
    runs, out = tmp_path / "runs", tmp_path / "interim"
    args = ["--params", str(path), "--runs", str(runs), "--out", str(out)]
    runs.mkdir()
    assert aggregate_study.main(args) == BAD_INPUT and not out.exists()
    _write_runs(runs)
    shutil.rmtree(runs / "p06_pd234_t3" / "multitab_net")  # still training: no metrics.json yet
    (runs / "p06_pd234_t3" / "multitab_net" / "seed0").mkdir(parents=True)
    assert aggregate_study.main(args) == 0
    claims = (out / "claims.md").read_text()
    assert "| p02_pd3_t3 | **holds** |" in claims and "| p06_pd234_t3 | **missing** |" in claims
    assert set(pd.read_csv(out / "metrics.csv").query("config == 'p06_pd234_t3'").model) == {
        "stl_mlp", "mmoe", "ple", "stem"}


def _regenerates_byte_for_byte(record: Path, inputs: tuple[str, ...], regenerate_fn) -> list[str]:
    """Copy a committed record's `inputs` into a temporary folder, regenerate it there, and assert that every
    file written equals the committed one; return the written files' paths relative to the copy."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / record.name
        copy.mkdir()
        for name in inputs:
            shutil.copy(record / name, copy / name)
        if (record / "claim.json").is_file():  # the claim it tested, when not the paper's (bench/claim.py)
            shutil.copy(record / "claim.json", copy / "claim.json")
        written = [path.relative_to(copy) for path in regenerate_fn(copy)]
        assert written, record.name
        for rel in written:
            assert (record / rel).read_bytes() == (copy / rel).read_bytes(), f"{record.name}/{rel}"
    return [rel.as_posix() for rel in written]


def _committed_records(marker: str, what: str) -> list[Path]:
    """The record folders under results/study/ that hold `marker`; skip, saying so, when there is none (never
    pass on nothing)."""
    records = sorted(p.parent for p in ROOT_STUDY.glob(f"*/{marker}"))
    if not records:
        pytest.skip(f"no {what} committed under results/study/ yet")
    return records


def test_committed_records_regenerate_from_their_own_metrics():
    """Every record under results/study/ is what the aggregate code makes of its own metrics.csv and
    curves.csv (and header.md): regenerated in a temporary copy, every committed output is byte-identical."""
    root = ROOT_STUDY
    # attribution records (arms.csv) and paired-precision records (pair.csv) have tests of their own below
    records = sorted(p.parent for p in root.glob("*/metrics.csv")
                     if not (p.parent / "arms.csv").is_file() and not (p.parent / "pair.csv").is_file())
    assert records, "no committed study record under results/study/"
    for record in records:
        _regenerates_byte_for_byte(record, ("metrics.csv", "curves.csv", "header.md"), regenerate)
        # the record states the claim for each of its configurations
        section = (record / "section.md").read_text()
        assert "**Claim per configuration:" in section
        for conf in read_metrics_csv(record / "metrics.csv")["config"].unique():
            assert f"| {conf} | **" in section, conf


def test_committed_attribution_records_regenerate_from_their_own_csvs():
    """Every attribution record under results/study/ (a folder with arms.csv) is what the aggregate code makes
    of its own metrics.csv, curves.csv and arms.csv (and header.md), byte for byte, and states a verdict per
    arm and configuration."""
    from multitab.evaluation.bench.attribution import regenerate as regenerate_attribution

    # without one, the aggregate code's own test is test_attribution.py
    for record in _committed_records("arms.csv", "attribution record (`make attribution`, docs/study.md)"):
        _regenerates_byte_for_byte(record, ("metrics.csv", "curves.csv", "arms.csv", "header.md"),
                                   regenerate_attribution)
        assert "missing" not in pd.read_csv(record / "ladder.csv")["verdict"].tolist(), record.name


def test_committed_precision_records_regenerate_from_their_own_metrics():
    """Every paired fp32/bf16 record under results/study/ (a folder with pair.csv; `bench.precision record`) is
    what the pair code makes of its own metrics.csv and header.md, byte for byte, and its section states
    whether bf16 passes."""
    from multitab.evaluation.bench.precision import regenerate as regenerate_precision

    # without one, the pair code's own test is test_precision_pair.py
    for record in _committed_records("pair.csv", "paired-precision record (`make precision-pair`)"):
        written = _regenerates_byte_for_byte(record, ("metrics.csv", "header.md"), regenerate_precision)
        assert set(written) == {"pair.csv", "verdicts.csv", "section.md"}, record.name
        section = (record / "section.md").read_text()
        assert "**bf16 passes**" in section or "**bf16 does not pass**" in section, record.name
