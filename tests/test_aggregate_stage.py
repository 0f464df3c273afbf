"""stages/aggregate.py end to end on a temporary folder of synthetic metrics.json files, and under dvc."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from _aggregate_fakes import published_runs, stamp_params, write_run
from multitab.evaluation.delta_m import delta_m
from multitab.runtime.exit_codes import BAD_INPUT
from stages import aggregate

ROOT = Path(__file__).resolve().parents[1]
BENCH = {
    "p02_pd3_t3": {"groups": ["correlation"], "correlation": 0.2, "degrees": [3, 3, 3], "seed": 0},
    "p06_pd3_t3": {"groups": ["correlation", "complexity", "count"], "correlation": 0.6, "degrees": [3, 3, 3],
                   "seed": 0},
    "p06_pd4_t3": {"groups": ["complexity"], "correlation": 0.6, "degrees": [4, 4, 4], "seed": 0},
    "p06_pd3_t5": {"groups": ["count"], "correlation": 0.6, "degrees": [3, 3, 3, 3, 3], "seed": 0},
    "p04_pdmix_t4": {"groups": ["nonuniform"], "correlation": 0.4, "degrees": [1, 3, 2, 4], "seed": 0},
}
BENCH_MODELS = {"stl_mlp": 0.0, "mmoe": 0.01, "ple": 0.015, "stem": 0.005, "multitab_net": 0.03}


def make_inputs(root: Path) -> Path:
    """runs (stand-in) for the public datasets and the bench configs, an ablation variant, a missing run,
    a complexity table and a params file with a bench section; returns the params path."""
    published_runs(root / "runs", seeds=(0, 1, 2), skip=(("higgs", "saint", 2),),
                   variants={"multitab_net@single_none": "PLE", "multitab_net@rope_off": "STEM"})
    rng = np.random.default_rng(1)
    for name, conf in BENCH.items():
        tasks = [f"task_{i}" for i in range(len(conf["degrees"]))]
        for model, gain in BENCH_MODELS.items():
            if name == "p06_pd3_t5" and model == "stem":
                continue  # a missing run set
            for seed in (0, 1, 2):
                test = {t: 0.6 * (1 + gain) + float(rng.normal(0, 0.002)) for t in tasks}
                write_run(root / "runs", name, model, seed, test, dict.fromkeys(tasks, "regression"),
                          test_mse={t: 1 - v for t, v in test.items()})
    (root / "complexity.csv").write_text("dataset,model,params,flops\nhiggs,multitab_net,698872,1897000\n"
                                         "higgs,mmoe,1049384,2110000\n")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["bench"]["configs"] = BENCH
    params["study"]["configs"] = list(BENCH)  # study.configs must be keys of bench.configs
    params["attribution"]["configs"] = list(BENCH)  # and so must attribution.configs
    params["runs"]["study_bf16"]["data"] = {"study": ["p04_pdmix_t4"]}  # and the bf16 pair's
    # the run matrix of the fakes: three seeds, and a variant that no table shows
    for group in ("real", "ablation", "bench"):
        params["runs"][group]["seeds"] = [0, 1, 2]
    params["train"]["variants"]["rope_off"] = {"model": "multitab_net", "overrides": {"rope": False}}
    params["runs"]["ablation"]["models"] = [*params["runs"]["ablation"]["models"], "multitab_net@rope_off"]
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))
    stamp_params(root / "runs", path)
    return path


def dvc_outs() -> list[str]:
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["aggregate"]
    outs = [next(iter(o)) if isinstance(o, dict) else o for o in stage["outs"] + stage.get("metrics", [])]
    return outs


def run_stage(root: Path, params: Path) -> int:
    out = root / "results"
    return aggregate.main([
        "--params", str(params), "--runs", str(root / "runs"), "--complexity", str(root / "complexity.csv"),
        "--tables", str(out / "tables"), "--figures", str(out / "figures"), "--plots", str(out / "plots"),
        "--metrics", str(out / "metrics.json"), "--report", str(out / "report.md"), "--html", str(out / "report.html"),
        "--index", str(out / "index.html"), "--study", str(out / "study"), "--study-html", str(out / "study_html"),
    ])


def _verdicts(root: Path) -> None:
    """Validation verdicts where the validation stages write them (DVC outputs)."""
    (root / "data" / "validated" / "synthetic").mkdir(parents=True, exist_ok=True)
    (root / "data" / "validated" / "higgs.json").write_text('{"success": true}')
    (root / "data" / "validated" / "synthetic" / "p06_pd3_t3.json").write_text('{"success": true}')


def test_entry_page_says_when_the_validation_pages_are_absent_but_the_verdicts_are(tmp_path: Path) -> None:
    """A checkout whose validation stages were restored from the DVC cache has the verdicts and not the
    Great Expectations pages (no DVC output): the page links the verdicts and says why the pages are not there,
    instead of dropping the section."""
    params = make_inputs(tmp_path)
    _verdicts(tmp_path)
    assert run_stage(tmp_path, params) == 0
    text = (tmp_path / "results" / "index.html").read_text()
    section = text[text.index("<h2>Data validation</h2>"):]
    assert "reports/validation/) are not in this workspace" in section
    assert 'href="../data/validated/higgs.json"' in section and "reports/validation/index.html" not in text


def test_entry_page_links_every_output_offline_with_the_provenance_block(tmp_path: Path) -> None:
    """results/index.html: the provenance block, then links; no address outside the checkout, no script,
    and every link resolves to a file."""
    import hashlib
    from html.parser import HTMLParser

    params = make_inputs(tmp_path)
    (tmp_path / "reports" / "validation").mkdir(parents=True)
    (tmp_path / "reports" / "validation" / "index.html").write_text("<html></html>")
    _verdicts(tmp_path)
    assert run_stage(tmp_path, params) == 0
    page = tmp_path / "results" / "index.html"
    text = page.read_text()

    class Links(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.hrefs: list[str] = []
            self.tags: set[str] = set()

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.tags.add(tag)
            self.hrefs += [v for k, v in attrs if k in ("href", "src") and v is not None]

    parser = Links()
    parser.feed(text)
    assert "http:" not in text and "https:" not in text and "//" not in "".join(parser.hrefs)
    assert not parser.tags & {"script", "link", "iframe"}
    assert parser.hrefs and all((page.parent / h).is_file() for h in parser.hrefs), parser.hrefs
    for expected in ("report.md", "tables/table3_test_results.md", "figures/figure5_delta_m.png",
                     "../reports/validation/index.html", "../data/validated/higgs.json",
                     "../data/validated/synthetic/p06_pd3_t3.json"):
        assert expected in parser.hrefs, expected
    assert "not in this workspace" not in text
    digest = hashlib.sha256(params.read_bytes()).hexdigest()
    head = text[: text.index("<h2>What ran")]
    assert "Commit <code>" in head and digest in head and "Protocol <code>paper</code>" in head
    assert "run group bench: " in text


def test_stage_end_to_end(tmp_path: Path) -> None:
    params = make_inputs(tmp_path)
    assert run_stage(tmp_path, params) == 0
    # Every output dvc.yaml declares exists, in each format.
    for out in dvc_outs():
        assert (tmp_path / out).exists(), out
    for stem in ("figure5_delta_m", "figure6_delta_m"):
        assert (tmp_path / f"results/figures/{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        svg = (tmp_path / f"results/figures/{stem}.svg").read_text()
        assert "STAND-IN DATA" in svg
    assert "missing" in (tmp_path / "results/figures/figure5_delta_m.svg").read_text()  # STEM at t=5

    report = (tmp_path / "results/report.md").read_text()
    order = ["## Table 2", "## Table 3", "## Figure 5", "## Figure 6", "## Table 4", "## Table 5", "## Table 6",
             "## Table 7", "## Table 8", "## Table 9", "## Table 10"]
    positions = [report.index(h) for h in order]
    assert positions == sorted(positions)
    assert report.count("STAND-IN DATA") >= 10
    assert "![Figure 5" in report and "(figures/figure5_delta_m.png)" in report
    # The report leads with MultiTab-Bench: the claim checked per configuration (STEM missing at t=5).
    assert report.index("## MultiTab-Bench: Figures 5 and 6") < report.index("## Table 2")
    assert "| p06_pd3_t3 | **holds** |" in report and "| p06_pd3_t5 | **missing** |" in report
    assert "Run sets in no table" in report and "higgs/multitab_net@rope_off" in report
    # Stand-in inputs: no paper value beside ours in the report (the CSV keeps the comparison).
    assert "(paper 0.5512" not in report and "The paper's values are left out of this table (stand-in data" in report
    assert "0.5512" in (tmp_path / "results/tables/comparison_with_paper.csv").read_text()
    # the learning curves' rows say stand-in data, and the plot's title then says so (.dvc/plots/learning_curves.json)
    assert set(pd.read_csv(tmp_path / "results/plots/learning_curves_val_mean.csv").data) == {"stand-in data"}
    # The same runs as real data (a local file) under the paper's training: the report compares.
    _with(params, max_epochs=None, max_train_rows=None)
    stamp_params(tmp_path / "runs", params)
    for path in (tmp_path / "runs").glob("*/*/seed*/metrics.json"):
        record = json.loads(path.read_text())
        if record["dataset"] in ("aliexpress", "acs_income", "higgs"):
            record.update(standin=False, source="local")
            path.write_text(json.dumps(record))
    assert run_stage(tmp_path, params) == 0
    report = (tmp_path / "results/report.md").read_text()
    # The missing SAINT seed on Higgs: missing, with the published value beside it, never a number.
    saint = next(line for line in report.splitlines() if line.startswith("| SAINT |") and "85.54" in line)
    assert "missing (2/3 seeds) (paper 85.54)" in saint

    # Headline Δm of MultiTab-Net on AliExpress, recomputed from the files.
    def seed_mean(model: str) -> dict[str, float]:
        files = [json.loads((tmp_path / f"runs/aliexpress/{model}/seed{s}/metrics.json").read_text()) for s in range(3)]
        return {t: float(np.mean([f["test"][t] for f in files])) for t in ("click", "conversion")}

    expected = delta_m(seed_mean("multitab_net"), seed_mean("stl_mlp"))
    assert f"{expected:.4f} (paper 0.5512; Δ {expected - 0.5512:+.4f})" in report
    metrics = json.loads((tmp_path / "results/metrics.json").read_text())
    assert metrics["delta_m"]["aliexpress"]["MultiTab-Net"] == pytest.approx(expected, abs=1e-6)
    assert metrics["delta_m"]["higgs"]["SAINT"] == "missing" and metrics["standin"]["higgs"] is False
    # Table 2: the variant row computed, the others missing.
    t2 = (tmp_path / "results/tables/table2_ablation.csv").read_text().splitlines()
    assert not t2[0].startswith("# stand-in data")  # real now
    assert "missing" in t2[2] and "missing" not in t2[1]
    # Table 4 from the complexity CSV: 0.70 M parameters for MultiTab-Net on Higgs.
    assert "0.70 (paper 0.70; Δ +0.00)" in report
    # Figure 5 data: STEM at t=5 missing, the rest numbers.
    fig5 = (tmp_path / "results/plots/figure5_delta_m.csv").read_text().splitlines()
    stem_t5 = next(line for line in fig5 if line.startswith("count | t=5 | STEM"))
    assert ",missing,missing,0,stand-in data" in stem_t5
    mtn = next(line for line in fig5 if line.startswith("count | t=5 | MultiTab-Net")).split(",")
    assert 2.5 < float(mtn[4]) < 3.5  # the 3% gain written above
    # Learning curves: seed means over the seeds that reached each step (3, 4 and 5 epochs written), a row per
    # dataset, model and epoch (1 = the first); models without a log (MAYA here) and XGBoost (no epochs) absent.
    curves = pd.read_csv(tmp_path / "results/plots/learning_curves_val_mean.csv")
    assert list(curves.columns) == ["dataset", "model", "epoch", "value", "data"]
    assert set(curves.data) == {"real"}  # real now; stand-in above
    assert list(dict.fromkeys(curves.dataset)) == ["aliexpress", "acs_income", "higgs"]
    assert list(dict.fromkeys(curves.model)) == ["STL", "MTL", "MMoE", "PLE", "TabT", "FT-T", "SAINT", "STEM",
                                                 "MultiTab-Net"]
    mmoe = curves[(curves.dataset == "aliexpress") & (curves.model == "MMoE")].set_index("epoch")["value"]
    assert list(mmoe.index) == [1, 2, 3, 4, 5]
    logs = [pd.read_csv(tmp_path / f"runs/aliexpress/mmoe/seed{s}/dvclive/plots/metrics/val_mean.tsv", sep="\t")
            for s in range(3)]
    assert mmoe[1] == pytest.approx(np.mean([f.val_mean[0] for f in logs]), abs=1e-6)
    assert mmoe[5] == pytest.approx(logs[2].val_mean[4], abs=1e-6)
    assert set(pd.read_csv(tmp_path / "results/plots/learning_curves_train_loss.csv").model) == set(curves.model)
    assert (tmp_path / "results/figures/learning_curves.svg").exists() and "## Learning curves" in report


def test_stage_without_any_run_renders_everything_missing(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    assert run_stage(tmp_path, params) == 0
    report = (tmp_path / "results/report.md").read_text()
    assert "STAND-IN DATA" not in report
    t3 = (tmp_path / "results/tables/table3_test_results.csv").read_text().splitlines()
    assert all(cell == "missing" for line in t3[1:] for cell in line.split(",")[1:])


def test_stage_bad_run_fails_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = make_inputs(tmp_path)
    bad = tmp_path / "runs/higgs/mmoe/seed1/metrics.json"
    bad.write_text(json.dumps({**json.loads(bad.read_text()), "standin": "yes"}))
    assert run_stage(tmp_path, params) == BAD_INPUT
    err = capsys.readouterr().err
    assert "higgs/mmoe/seed1/metrics.json" in err and "standin" in err


def test_dvc_yaml_stage_declares_what_it_reads() -> None:
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["aggregate"]
    assert {"aggregate", "bench.configs"} <= set(stage["params"])
    for path in ("results/runs", "results/complexity/complexity.csv", "src/multitab/evaluation", "stages/aggregate.py",
                 "results/label_correlations"):  # index.html links Figures 3-4: they exist before it is written
        assert path in stage["deps"]
    assert {"runs", "train", "protocol"} <= set(stage["params"])  # the run matrix and what its runs must match
    for path in ("--runs results/runs", "--complexity results/complexity/complexity.csv", "--report results/report.md",
                 "--metrics results/metrics.json", "--figures results/figures", "--plots results/plots"):
        assert path in stage["cmd"]


def test_dvc_repro_metrics_and_plots(tmp_path: Path) -> None:
    """The real `dvc repro aggregate`, then `dvc metrics show` and `dvc plots show`, in a scratch repo."""
    dvc = Path(sys.executable).with_name("dvc")
    if not dvc.exists():
        pytest.skip("dvc not installed beside this python")
    repo = tmp_path / "repo"
    repo.mkdir()
    for item in ("stages", "src"):
        shutil.copytree(ROOT / item, repo / item, ignore=shutil.ignore_patterns("__pycache__"))
    dvcyaml = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    dvcyaml["stages"] = {"aggregate": dvcyaml["stages"]["aggregate"]}
    del dvcyaml["vars"]  # runs.yaml: the training stage's
    (repo / "dvc.yaml").write_text(yaml.safe_dump(dvcyaml, sort_keys=False, allow_unicode=True))
    # Keep only the plots drawn from the aggregate stage's own outputs (results/dvc.yaml: paths relative to results/).
    plots = yaml.safe_load((ROOT / "results" / "dvc.yaml").read_text())["plots"]
    (repo / "results").mkdir()
    kept = {"plots": [p for p in plots if "label_correlations" not in json.dumps(p)]}
    (repo / "results" / "dvc.yaml").write_text(yaml.safe_dump(kept, sort_keys=False, allow_unicode=True))
    # the committed study records the entry page answers from (their progress store is not read)
    shutil.copytree(ROOT / "results" / "study", repo / "results" / "study", ignore=shutil.ignore_patterns("progress"))
    shutil.copy(make_inputs(tmp_path), repo / "params.yaml")
    shutil.copytree(tmp_path / "runs", repo / "results/runs")
    (repo / "results/complexity").mkdir(parents=True)
    shutil.copy(tmp_path / "complexity.csv", repo / "results/complexity/complexity.csv")
    (repo / "results/icl").mkdir(parents=True)  # the icl stage's records: none here
    (repo / "results/icl/summary.md").write_text("no records\n")
    (repo / "results/label_correlations").mkdir(parents=True)  # Figures 3-4: none here
    (repo / "results/label_correlations/fig3_label_correlations.csv").write_text("p,rho\n")
    env = {**os.environ, "PYTHONPATH": f"{repo / 'src'}{os.pathsep}{repo}",
           "PATH": f"{dvc.parent}{os.pathsep}{os.environ['PATH']}"}

    def sh(*args: str) -> str:
        res = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout

    sh("git", "init", "-q")
    sh(str(dvc), "init", "-q")
    # the project's plot templates and page (.dvc/plots, .dvc/config's plots.html_template)
    shutil.copytree(ROOT / ".dvc" / "plots", repo / ".dvc" / "plots")
    with (repo / ".dvc" / "config").open("a") as f:
        f.write("[plots]" + (ROOT / ".dvc" / "config").read_text().split("[plots]", 1)[1])
    sh(str(dvc), "repro", "aggregate")
    assert (repo / "results/report.md").exists()
    shown = json.loads(sh(str(dvc), "metrics", "show", "--json"))
    assert "results/metrics.json" in json.dumps(shown) and "MultiTab-Net" in json.dumps(shown)
    sh(str(dvc), "plots", "show", "-o", "plots_html")
    html = (repo / "plots_html/index.html").read_text(encoding="utf-8")
    assert "figure5_delta_m.png" in html and "delta_m" in html
    # the project's page: a charset, the vendored Vega (no CDN script), a plot per top-level entry
    assert '<meta charset="utf-8">' in html and "cdn.jsdelivr" not in html
    assert all(src.startswith("../.cache/datadocs/") for src in re.findall(r'<script src="([^"]+)"', html))
    assert html.count("vegaEmbed('#") + html.count("<img src=") <= 60
    shown_plots = sh(str(dvc), "plots", "show", "--json")
    shown = json.loads(shown_plots)
    assert "errors" not in shown and "MultiTab-Net" in shown_plots
    curves = shown["data"]["results/plots/learning_curves_val_mean.csv"][0]["content"]
    assert curves["title"]["text"].startswith("Learning curves: validation mean metric")
    assert curves["spec"]["encoding"]["color"]["field"] == "model"  # a colour per model, a panel per dataset
    assert {d["dataset"] for d in curves["data"]["values"]} == {"aliexpress", "acs_income", "higgs"}
    assert curves["spec"]["encoding"]["y"]["title"] == "validation mean metric (AUC / EV)"
    assert "up to date" in sh(str(dvc), "status", "aggregate") or "unchanged" in sh(str(dvc), "repro", "aggregate")


def test_reduced_training_is_marked_in_the_report(tmp_path: Path) -> None:
    """Runs trained under capped epochs or rows carry the REDUCED TRAINING banner with each run group's
    caps; runs under the paper's training (no caps) carry none."""
    params = make_inputs(tmp_path)
    _with(params, max_epochs=None, max_train_rows=None)
    raw = yaml.safe_load(params.read_text())
    raw["runs"]["bench"]["train"] = {}
    params.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
    stamp_params(tmp_path / "runs", params)
    assert run_stage(tmp_path, params) == 0
    assert "REDUCED TRAINING" not in (tmp_path / "results/report.md").read_text()
    # The default caps: 2 epochs and 2,048 rows for the real groups, 6 epochs for bench's.
    _with(params, max_epochs=2, max_train_rows=2048)
    raw = yaml.safe_load(params.read_text())
    raw["runs"]["bench"]["train"] = {"max_epochs": 6, "max_train_rows": None}
    params.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
    stamp_params(tmp_path / "runs", params)
    assert run_stage(tmp_path, params) == 0
    report = (tmp_path / "results/report.md").read_text()
    banner = next(line for line in report.splitlines() if line.startswith("> **REDUCED TRAINING**"))
    assert "run group real, stand-in data (aliexpress, acs_income, higgs): at most 2 epochs" in banner
    assert "run group ablation" in banner and "at most 6 epochs" not in banner  # bench at its study budget here


def test_first_screen_says_what_ran_and_gives_no_verdict_below_the_study_budget(tmp_path: Path) -> None:
    """The default run's shape: MultiTab-Bench runs of 14,000 training rows (the study's default budget is
    70,000: study.data.n_samples 100,000 split 70/15/15), MultiTab-Net's Δm below MMoE's on one
    configuration. The report's first 40 lines hold the provenance block, and no verdict reads `does not
    hold`; with the study's budget lowered to these runs' size, the same runs do give that verdict."""
    import hashlib

    params = make_inputs(tmp_path)
    for path in sorted((tmp_path / "runs").glob("p*/*/seed*/metrics.json")):
        record = json.loads(path.read_text())
        record["n_rows"] = {"train": 14_000, "val": 3_000, "test": 3_000}
        if record["dataset"] == "p02_pd3_t3" and record["model"] == "multitab_net":
            record["test"] = dict.fromkeys(record["test"], 0.6)  # no gain over STL: below MMoE's
        path.write_text(json.dumps(record))
    assert run_stage(tmp_path, params) == 0
    report = (tmp_path / "results/report.md").read_text()
    head = "\n".join(report.splitlines()[:40])
    assert "## What ran" in head and "Commit `" in head
    assert f"params.yaml sha256 `{hashlib.sha256(params.read_bytes()).hexdigest()[:16]}`" in head
    assert "| p02_pd3_t3 |" in head and "| 14,000 |" in head and "| higgs |" in head
    assert "not tested at this" in head  # what the MultiTab-Bench runs can show, on the first screen
    assert "**does not hold**" not in report  # no verdict below the budget
    assert "| p02_pd3_t3 | **not tested at this budget** |" in report

    raw = yaml.safe_load(params.read_text())
    raw["study"]["data"] = {"n_samples": 20_000}  # 14,000 training rows: these runs are at the budget
    params.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
    assert run_stage(tmp_path, params) == 0
    report = (tmp_path / "results/report.md").read_text()
    assert "| p02_pd3_t3 | **does not hold** |" in report and "not tested at this budget" not in report


def test_study_budget_counts_every_row_under_the_authors_setup(tmp_path: Path) -> None:
    """The budget's training rows: 70 % of study.data.n_samples under `paper` (the held-out split), all of them
    under `protocol: authors_code`, whose arm (A0_authors, evaluation training_rows) trains on every row."""
    from multitab.config import load_params

    params = make_inputs(tmp_path)
    n = yaml.safe_load(params.read_text())["study"]["data"]["n_samples"]
    budget = aggregate.provenance(params, load_params(params)).budget
    assert budget is not None and budget.n_train == int(0.7 * n)
    raw = yaml.safe_load(params.read_text())
    raw["protocol"] = "authors_code"
    params.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
    budget = aggregate.provenance(params, load_params(params)).budget
    assert budget is not None and budget.n_train == n and budget.n_seeds == len(raw["runs"]["study"]["seeds"])


def test_single_seed_prints_t_test_as_undefined(tmp_path: Path) -> None:
    """The default `make repro` trains one seed: Table 8's t-tests have no spread and read n/a."""
    params = make_inputs(tmp_path)
    for path in (tmp_path / "runs").rglob("seed[12]"):
        shutil.rmtree(path)
    assert run_stage(tmp_path, params) == 0
    table8 = (tmp_path / "results/tables/table8_t_test.csv").read_text()
    assert "n/a" in table8


def _with(params: Path, seeds: list[int] | None = None, **train: object) -> None:
    raw = yaml.safe_load(params.read_text())
    raw["train"].update(train)
    if seeds is not None:
        for group in ("real", "ablation", "bench"):
            raw["runs"][group]["seeds"] = seeds
    params.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))


def test_stage_reads_exactly_the_declared_runs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """After the groups' seeds shrink from [0, 1, 2] to [0], the folders of seeds 1 and 2 stay on disk (DVC
    leaves them) but enter no table: Table 3 is seed 0's numbers alone, and a warning lists the others."""
    params = make_inputs(tmp_path)
    _with(params, seeds=[0])
    stamp_params(tmp_path / "runs", params)  # seed 0 trained under the new params (1 and 2 stay on disk)
    assert run_stage(tmp_path, params) == 0
    metrics = json.loads((tmp_path / "results/metrics.json").read_text())
    stl, mtn = (json.loads((tmp_path / f"runs/aliexpress/{m}/seed0/metrics.json").read_text())["test"]
                for m in ("stl_mlp", "multitab_net"))
    assert metrics["delta_m"]["aliexpress"]["MultiTab-Net"] == pytest.approx(delta_m(mtn, stl), abs=1e-6)
    assert "not in the run matrix" in caplog.text and "seed1/metrics.json" in caplog.text


def test_stage_refuses_a_run_trained_under_other_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = make_inputs(tmp_path)
    _with(params, batch_size=512)  # params changed, the runs were not re-trained
    assert run_stage(tmp_path, params) == BAD_INPUT
    err = capsys.readouterr().err
    assert "trained under other settings" in err and "train.batch_size: 2048 -> 512" in err
    assert "metrics.json" in err and "Traceback" not in err
    assert not (tmp_path / "results/report.md").exists()
    # a record from before runs recorded their settings is refused too
    stamp_params(tmp_path / "runs", params)
    path = next((tmp_path / "runs").glob("higgs/mmoe/seed0/metrics.json"))
    record = json.loads(path.read_text())
    del record["params"]
    path.write_text(json.dumps(record))
    assert run_stage(tmp_path, params) == BAD_INPUT
    assert "records no `params`" in capsys.readouterr().err


def test_pretrained_in_context_models_stand_beside_the_bench_runs(tmp_path: Path) -> None:
    """A MultiTab-Bench configuration the icl stage evaluated: the bench section gains a table with each
    multitask model's and each pretrained model's test EV (task mean, seed mean); Orion-MSP's regression
    cells keep the record's words, a configuration without a record reads missing."""
    params = make_inputs(tmp_path)
    tasks = [f"task_{i}" for i in range(3)]
    icl = tmp_path / "results_icl"
    for model, test, status in (("tabicl", {t: 0.5 + 0.01 * i for i, t in enumerate(tasks)}, "ok"),
                                ("orion_msp", {}, "not applicable")):
        folder = icl / "p06_pd3_t3" / model / "seed0"
        folder.mkdir(parents=True)
        record = {"dataset": "p06_pd3_t3", "model": model, "seed": 0, "status": dict.fromkeys(tasks, status),
                  "test": test, "val": test, "checkpoints": {}}
        (folder / "metrics.json").write_text(json.dumps(record))
    out = tmp_path / "results"
    assert aggregate.main([
        "--params", str(params), "--runs", str(tmp_path / "runs"), "--complexity", str(tmp_path / "complexity.csv"),
        "--tables", str(out / "tables"), "--figures", str(out / "figures"), "--plots", str(out / "plots"),
        "--metrics", str(out / "metrics.json"), "--report", str(out / "report.md"), "--index", str(out / "index.html"),
        "--icl", str(icl),
    ]) == 0
    report = (out / "report.md").read_text()
    section = report[report.index("### Pretrained in-context models on the same data"): report.index("## Table 2")]
    header = next(line for line in section.splitlines() if line.startswith("| Configuration"))
    assert header.endswith("| Orion-MSP (pretrained) | TabICL (pretrained) |") and "MultiTab-Net" in header
    row = next(line for line in section.splitlines() if line.startswith("| p06_pd3_t3 |")).split(" | ")
    means = []
    for seed in (0, 1, 2):
        record = json.loads((tmp_path / f"runs/p06_pd3_t3/multitab_net/seed{seed}/metrics.json").read_text())
        means.append(100 * sum(record["test"].values()) / len(record["test"]))
    assert row[header.split(" | ").index("MultiTab-Net")] == f"{sum(means) / 3:.2f}"
    assert row[-2] == "not applicable" and row[-1] == "51.00 |"
    assert next(line for line in section.splitlines() if line.startswith("| p02_pd3_t3 |")).endswith(
        "| missing | missing |")
