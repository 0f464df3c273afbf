"""Runs reader, missing values and the stand-in mark in every rendering, and the tables built from runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _aggregate_fakes import published_runs, write_run
from multitab.config import load_params, parse_params
from multitab.config.aggregate import AggregateConfig, synthetic_configs
from multitab.evaluation.paper.paper_tables import table3, table8, table9
from multitab.evaluation.paper.published import load_published
from multitab.evaluation.paper.results import PaperResults
from multitab.evaluation.paper.runs import RunError, RunSet, load_runs, split_model
from multitab.evaluation.tables import STANDIN_MARK, Cell, Table

ROOT = Path(__file__).resolve().parents[1]
TYPES = {"click": "binary", "conversion": "binary"}


def config() -> AggregateConfig:
    return load_params(ROOT / "params.yaml").aggregate


def _table(standin: list[str]) -> Table:
    return Table("t", "Table X", ["Model", "a", "b"],
                 [["STL", Cell(72.07, 2, paper=72.07), Cell(None, 2, paper=85.67)],
                  ["MTL", Cell(None, 4, missing="missing (3/5 seeds)"), Cell(0.1129, 4)]], standin)


def test_missing_renders_as_missing_in_every_format() -> None:
    t = _table([])
    md, csv, tex = t.to_markdown(), t.to_csv(), t.to_latex()
    for text in (md, csv, tex):
        assert "missing" in text and "missing (3/5 seeds)" in text
    assert "| STL | 72.07 | missing |" in md
    assert "STL,72.070000,missing" in csv
    cmp = t.to_markdown(compare=True)
    assert "72.07 (paper 72.07; Δ +0.00)" in cmp and "missing (paper 85.67)" in cmp
    assert STANDIN_MARK not in md + csv + tex.lower()


def test_standin_mark_in_every_format() -> None:
    t = _table(["higgs"])
    assert f"[{STANDIN_MARK}]" in t.to_markdown() and "STAND-IN DATA" in t.to_markdown()
    assert t.to_csv().startswith(f"# {STANDIN_MARK}: higgs\n")
    assert r"\textbf{[STAND-IN DATA: higgs]}" in t.to_latex()


def test_runs_reader_errors_name_the_file(tmp_path: Path) -> None:
    path = write_run(tmp_path, "aliexpress", "mmoe", 0, {"click": 0.7, "conversion": 0.8}, TYPES)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "seed": 1}))
    with pytest.raises(RunError, match=r"seed0/metrics.json.*folder says"):
        load_runs(tmp_path)
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "task_types"}))
    with pytest.raises(RunError, match=r"metrics.json: missing field\(s\) \['task_types'\]"):
        load_runs(tmp_path)
    path.write_text(json.dumps({**data, "test": {"click": "high", "conversion": 0.8}}))
    with pytest.raises(RunError, match=r"test.click"):
        load_runs(tmp_path)
    path.write_text("{not json")
    with pytest.raises(RunError, match="not valid JSON"):
        load_runs(tmp_path)


def test_variant_names() -> None:
    assert split_model("multitab_net@single_none") == ("multitab_net", "single_none")
    assert split_model("mmoe") == ("mmoe", None)
    with pytest.raises(ValueError):
        split_model("MultiTab Net")
    assert config().label("multitab_net@single_f_not_t") == "MultiTab-Net@single_f_not_t"


def test_partial_seeds_and_undefined_values_are_missing(tmp_path: Path) -> None:
    for seed in (0, 1, 2):
        write_run(tmp_path, "aliexpress", "stl_mlp", seed, {"click": 0.72, "conversion": 0.85}, TYPES)
    for seed in (0, 1):
        write_run(tmp_path, "aliexpress", "mmoe", seed, {"click": 0.73, "conversion": 0.86}, TYPES)
    write_run(tmp_path, "aliexpress", "ple", 0, {"click": 0.73, "conversion": None}, TYPES)
    write_run(tmp_path, "aliexpress", "ple", 1, {"click": 0.73, "conversion": 0.86}, TYPES)
    write_run(tmp_path, "aliexpress", "ple", 2, {"click": 0.73, "conversion": 0.86}, TYPES)
    runs = RunSet(load_runs(tmp_path))
    assert runs.seeds("aliexpress") == (0, 1, 2)
    assert runs.matrix("aliexpress", "stl_mlp") is not None
    assert runs.matrix("aliexpress", "mmoe") is None  # seed 2 missing
    assert runs.matrix("aliexpress", "ple") is None  # an undefined AUC (null)
    results = PaperResults(runs, config(), load_published())
    t = table3(results)
    row = {r[0]: r for r in t.rows}
    text = t.to_markdown()
    assert "| MMoE | missing (2/3 seeds) | missing (2/3 seeds) | missing (2/3 seeds) |" in text
    assert row["STL"][1].value == pytest.approx(72.0)  # type: ignore[union-attr]
    assert all(c.value is None for c in row["PLE"][1:4])  # type: ignore[union-attr]
    # With the expected seeds fixed in params, a seed nobody ran is missing too.
    strict = RunSet(load_runs(tmp_path), seeds=(0, 1, 2, 3))
    assert strict.matrix("aliexpress", "stl_mlp") is None


def test_table3_from_runs_equal_to_published_means(tmp_path: Path) -> None:
    """Every seed at the published mean: our Table 3 prints the published numbers, Δm to four decimals."""
    published_runs(tmp_path, seeds=(0, 1), noise=0.0, standin=False)
    results = PaperResults(RunSet(load_runs(tmp_path)), config(), load_published())
    t = table3(results)
    checked = 0
    for _, col, cell in t.cells():
        if cell.paper is not None:
            assert cell.text() == f"{cell.paper:.{cell.decimals}f}", col
            checked += 1
    assert checked == 10 * 15
    assert not t.standin and "MAYA" in t.to_markdown()


def test_significance_tables_from_runs(tmp_path: Path) -> None:
    from scipy import stats

    published_runs(tmp_path, seeds=(0, 1, 2, 3, 4), noise=0.003)
    results = PaperResults(RunSet(load_runs(tmp_path)), config(), load_published())
    t8, t9 = table8(results), table9(results)
    assert [r[0] for r in t9.rows] == ["aliexpress", "acs_income", "higgs", "global"]
    a = results.delta_m_per_seed("higgs", "multitab_net")
    b = results.delta_m_per_seed("higgs", "mmoe")
    assert a is not None and b is not None
    cell = {r[0]: r for r in t8.rows}["higgs"][t8.header.index("MMoE")]
    assert cell.value == pytest.approx(stats.ttest_ind(a, b, alternative="greater").pvalue)  # type: ignore[union-attr]
    ga, gb = results.task_gains_per_seed("higgs", "multitab_net"), results.task_gains_per_seed("higgs", "mmoe")
    assert ga is not None and gb is not None and ga.size == 40
    cell = {r[0]: r for r in t9.rows}["higgs"][t9.header.index("MMoE")]
    ref = stats.wilcoxon(ga.to_numpy().ravel(), gb.to_numpy().ravel(), alternative="greater").pvalue
    assert cell.value == pytest.approx(ref)  # type: ignore[union-attr]
    assert t8.standin == ["aliexpress", "acs_income", "higgs"]


def test_bench_configs_view() -> None:
    from multitab.config import ConfigError, read_yaml

    raw = read_yaml(ROOT / "params.yaml")
    raw["bench"]["configs"] = {
        "p06_pd3_t3": {"groups": ["correlation", "complexity", "count"], "correlation": 0.6, "degrees": [3, 3, 3],
                       "seed": 0},
        "mix": {"groups": ["nonuniform"], "correlation": 0.4, "degrees": [1, 3, 2], "seed": 0}}
    raw["study"]["configs"] = raw["attribution"]["configs"] = ["mix"]
    raw["runs"]["study_bf16"]["data"] = {"study": ["mix"]}  # it names study configurations too
    got = synthetic_configs(parse_params(raw).bench.configs)
    assert got["p06_pd3_t3"].level("count") == "t=3" and got["p06_pd3_t3"].level("correlation") == "p=0.6"
    assert got["mix"].groups == ("nonuniform",) and got["mix"].level("nonuniform") == "t=3, PD=[1, 3, 2], p=0.4"
    assert synthetic_configs({}) == {}
    # one strict reader: the old tolerant `group` key fails like any unknown key, naming its path
    raw["bench"]["configs"]["bad"] = {"group": "nonuniform", "correlation": 0.4, "degrees": [1], "seed": 0}
    with pytest.raises(ConfigError, match=r"bench.configs.bad.group: unknown key"):
        parse_params(raw)
    # The project's params.yaml loads strictly.
    assert config().baseline == "stl_mlp"


def test_delta_m_on_mse_flips_the_sign(tmp_path: Path) -> None:
    """`regression_metric: mse`: Higgs Δm uses test_mse for the regression tasks, lower being better."""
    import dataclasses

    import numpy as np

    from multitab.evaluation.delta_m import delta_m

    published_runs(tmp_path, seeds=(0, 1), noise=0.002)
    runs = RunSet(load_runs(tmp_path))
    results = PaperResults(runs, dataclasses.replace(config(), regression_metric="mse"), load_published())

    def means(model: str) -> dict[str, float]:
        rs = runs.runs("higgs", model)
        out = {"target": float(np.mean([r.test["target"] for r in rs.values()]))}
        for t in ("m_jj", "m_jjj", "m_lv", "m_jlv", "m_bb", "m_wbb", "m_wwbb"):
            out[t] = float(np.mean([r.test_mse[t] for r in rs.values()]))
        return out

    m, b = means("multitab_net"), means("stl_mlp")
    expected = (100 * (m["target"] - b["target"]) / b["target"]
                - sum(100 * (m[t] - b[t]) / b[t] for t in m if t != "target")) / 8
    assert results.delta_m("higgs", "multitab_net") == pytest.approx(expected)
    lower = {t for t in m if t != "target"}
    assert results.delta_m("higgs", "multitab_net") == pytest.approx(delta_m(m, b, lower_is_better=lower))


def test_zero_baseline_gives_n_a_not_a_crash(tmp_path: Path) -> None:
    types = {"target": "binary", "m_jj": "regression"}
    for model, ev in (("stl_mlp", 0.0), ("multitab_net", 0.2), ("mmoe", 0.1)):
        for seed in (0, 1):
            write_run(tmp_path, "higgs", model, seed, {"target": 0.8 + seed / 100, "m_jj": ev}, types)
    results = PaperResults(RunSet(load_runs(tmp_path)), config(), load_published())
    assert results.delta_m("higgs", "multitab_net") != results.delta_m("higgs", "multitab_net")  # NaN
    row = {r[0]: r for r in table3(results).rows}["MultiTab-Net"]
    assert [c.text() for c in row if isinstance(c, Cell)][-1] == "n/a"
    assert {r[0]: r for r in table8(results).rows}["higgs"][3].text() == "n/a"  # type: ignore[union-attr]


def test_saved_figures_are_byte_reproducible(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from multitab.evaluation.figures import save_figure

    blobs = []
    for run in ("a", "b"):
        fig, ax = plt.subplots()
        ax.bar([0, 1], [1.0, 2.0])
        paths = save_figure(fig, tmp_path / run, "fig", dpi=50)
        blobs.append([p.read_bytes() for p in paths])
    assert blobs[0] == blobs[1]
