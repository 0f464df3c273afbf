"""What the committed study records say about themselves: the generator their data came from, what the held-out
arm changes, and the answer first in results/study/README.md."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from multitab.evaluation.bench.attribution import all_changes
from multitab.evaluation.bench.generator import V2_SINCE, header_line, version_of

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "results" / "study"


def test_generator_version_follows_the_commit_and_an_old_one_says_what_does_not_reproduce():
    assert version_of("abc", lambda commit, ancestor: ancestor == V2_SINCE and commit == "new") == "v1"
    assert version_of("new", lambda commit, ancestor: ancestor == V2_SINCE and commit == "new") == "v2"
    assert version_of("gone", lambda commit, ancestor: None) is None
    assert "would not reproduce this record's per-run numbers" in header_line("v1")
    assert "today's" in header_line("v2") and "would not" not in header_line("v2")
    assert "version unknown" in header_line(None)


def test_committed_records_name_their_generator():
    headers = sorted(STUDY.glob("*/header.md"))
    assert headers
    for path in headers:
        text = path.read_text()
        lines = [line for line in text.splitlines() if line.startswith("- Generator: MultiTab-Bench ")]
        assert len(lines) == 1, path
        commit = re.search(r"- Commit: `([0-9a-f]+)`", text)
        assert commit, path
        named = re.match(r"- Generator: MultiTab-Bench (v\d)", lines[0])
        assert named and lines[0] == header_line(named.group(1)), path
        version = version_of(commit.group(1))  # None in a clone without that history: the name stands
        assert version in (None, named.group(1)), path


def test_held_out_arm_states_its_training_rows_and_early_stopping_rows():
    metrics = pd.DataFrame({"arm": ["A0", "A0", "A1", "A2"], "n_train": [100000, 100000, 70000, 70000]})
    arms = pd.DataFrame({"arm": ["A0", "A1", "A2"], "source": ["authors_code", "paper", "ours"],
                         "changed": ["evaluation=training_rows, targets=raw", "evaluation=held_out",
                                     "data_seed=fixed"]})
    changes = all_changes(metrics, arms)
    assert changes["A0"] == "evaluation=training_rows, targets=raw"
    assert changes["A1"].startswith("evaluation=held_out (training rows per run 100,000 → 70,000; early stopping "
                                    "on held-out validation rows")
    assert changes["A2"] == "data_seed=fixed"
    ladder = (STUDY / "attribution_n100k_3seeds" / "ladder.md").read_text()
    assert "| A1_held_out | the paper's text | evaluation=held_out (training rows per run 100,000 → 70,000; " in ladder


def test_study_readme_opens_with_the_answer_per_figure_and_layer():
    head = (STUDY / "README.md").read_text().splitlines()[:15]
    text = "\n".join(head)
    assert not any(line.startswith("|") for line in head), "tables come after the answer"
    assert max(len(line) for line in head) <= 120
    for needed in ("Figure 5", "Figure 6", "per-sample mixing", "A6", "A7", "100,000", "1,000,000", "not run"):
        assert needed in text, needed


def test_the_records_name_every_commit_their_runs_came_from_and_the_readme_what_data_was_compared():
    """p06_pd5_t3's runs of the layers records came from two commits (flows.progress's index: 14 saved at 9d9ac7d,
    4 at 5fd4623): the record that trained it and every record that reuses it say both; and results/study/README.md
    does not say that no records were compared on their data while its table says two were."""
    import json

    index = json.loads((STUDY / "progress" / "index.json").read_text())
    saved = sorted(v["commit"][:7] for k, v in index.items() if "-p06_pd5_t3_" in k and k.rsplit("-", 1)[1] in "012")
    assert saved == ["5fd4623"] * 4 + ["9d9ac7d"] * 14
    # its seeds 3 and 4 (the five-seed study) were saved at one commit, which the record that trained them names
    later = sorted(v["commit"][:7] for k, v in index.items() if "-p06_pd5_t3_" in k and k.rsplit("-", 1)[1] in "34")
    assert later == ["ccf8aa7"] * 12
    assert "p06_pd5_t3: 12 at ccf8aa7 (AMD EPYC)" in (STUDY / "layers_n100k_5seeds_4of9" / "header.md").read_text()
    # p02_pd3_t3's and p06_pd3_t3's likewise, at 0c57e8d (ea2cf0e's code): the records that hold them name it
    for config, records in (("p02_pd3_t3", ("5of9", "6of9", "8of9", "9of9")), ("p06_pd3_t3", ("6of9", "8of9", "9of9")),
                            ("p10_pd3_t3", ("8of9", "9of9")), ("p06_pd4_t3", ("8of9", "9of9")),
                            ("p06_pd3_t7", ("9of9",))):
        later = sorted(v["commit"][:7] for k, v in index.items() if f"-{config}_" in k and k.rsplit("-", 1)[1] in "34")
        assert later == ["0c57e8d"] * 12, config
        for name in records:
            header = (STUDY / f"layers_n100k_5seeds_{name}" / "header.md").read_text()
            assert f"{config}: 12 at 0c57e8d (AMD EPYC)" in header and "p06_pd5_t3: 12 at ccf8aa7 (AMD EPYC)" in header
    for name in ("layers_n100k_3seeds_7of9", "layers_n100k_3seeds_8of9", "layers_n100k_3seeds_9of9"):
        header = (STUDY / name / "header.md").read_text()
        assert "p06_pd5_t3: 14 at 9d9ac7d (AMD EPYC), 4 at 5fd4623 (AMD EPYC)" in header, name
    readme = (STUDY / "README.md").read_text()
    assert "same data by SHA-256" in readme and "No two records here were compared" not in readme
    assert "One pair of\nrecords was compared on its data" in readme


def test_the_first_epoch_checks_say_which_seed_0_runs_this_machine_repeats():
    """first_epoch_seed0_native / _avx2 (stages/first_epoch_check.py): their section.md comes from their files, and
    what the README says of them is what their results.csv holds."""
    import pandas as pd

    from stages.first_epoch_check import render

    counts = {}
    for name in ("first_epoch_seed0_native", "first_epoch_seed0_avx2"):
        folder = STUDY / name
        assert (folder / "section.md").read_text() == render(folder)
        table = pd.read_csv(folder / "results.csv")
        counts[name] = table.groupby("config")["same"].agg(["sum", "count"])
    native, avx2 = counts["first_epoch_seed0_native"], counts["first_epoch_seed0_avx2"]
    assert (int(native["sum"].sum()), int(native["count"].sum())) == (38, 48)
    assert sorted(native.index[native["sum"] < native["count"]]) == ["p02_pd3_t3", "p06_pd234_t3"]
    assert (int(avx2["sum"].sum()), int(avx2["count"].sum())) == (12, 12)
    readme = (STUDY / "README.md").read_text()
    assert "**38 of 48** repeat it" in readme and "**12 of 12** repeat" in readme
    t7 = STUDY / "first_epoch_seed0_p06_pd3_t7_native"  # the ninth configuration, checked later
    assert (t7 / "section.md").read_text() == render(t7)
    table = pd.read_csv(t7 / "results.csv")
    assert set(table["config"]) == {"p06_pd3_t7"} and bool(table["same"].all()) and len(table) == 6
    assert "**6 of 6** repeat" in readme and "44 of the 54 seed-0 runs" in readme


def test_the_five_seed_record_holds_every_configuration_model_and_layer_at_five_seeds():
    """layers_n100k_5seeds_9of9 (issue 63): 9 configurations x 6 model/layer rows (STL, MMoE, PLE, STEM, and
    MultiTab-Net under A6 and under A7) x seeds 0-4, generator v2; the rivals' runs are shared by both arms."""
    metrics = pd.read_csv(STUDY / "layers_n100k_5seeds_9of9" / "metrics.csv")
    runs = metrics.drop_duplicates(["arm", "run"])
    assert set(runs["arm"]) == {"A6_mask_t_t", "A7_inter_sample"}
    assert runs["config"].nunique() == 9
    for (config, arm), part in runs.groupby(["config", "arm"]):
        seeds = part.groupby("model")["seed"].apply(lambda s: sorted(s.astype(int)))
        assert seeds.to_dict() == {m: [0, 1, 2, 3, 4] for m in ("mmoe", "multitab_net", "ple", "stem", "stl_mlp")}, \
            (config, arm)
    distinct = metrics.drop_duplicates("run")
    assert len(distinct) == 9 * 6 * 5  # the rivals' runs count once; MultiTab-Net's differ by layer
    assert "- Generator: MultiTab-Bench v2 " in (STUDY / "layers_n100k_5seeds_9of9" / "header.md").read_text()


def test_the_five_seed_record_has_no_run_at_a_cap_and_names_what_replaced_each_capped_run():
    """layers_n100k_5seeds (issue 63): the same 9 x 6 x 5 runs, none ended at a cap; each run the 9-of-9 record
    holds at its cap is named in the header with what took its place (continued, or trained again on other
    kernels), and the record's row of it is that run's: its epochs and best epoch as continuation.json says."""
    import json

    from multitab.evaluation.bench.continued import at_cap
    from multitab.evaluation.bench.numbers import read_metrics_csv

    record = STUDY / "layers_n100k_5seeds"
    metrics = read_metrics_csv(record / "metrics.csv")
    assert len(metrics.drop_duplicates("run")) == 9 * 6 * 5 and at_cap(metrics) == []
    capped = at_cap(read_metrics_csv(STUDY / "layers_n100k_3seeds_9of9" / "metrics.csv"))
    assert len(capped) == 5
    header = (record / "header.md").read_text()
    assert "(6 run(s), 3 of them trained again from scratch on other kernels rather than continued;" in header
    for run in capped:
        info = json.loads((STUDY / "continued" / run / "continuation.json").read_text())
        line = next(line for line in header.splitlines() if line.startswith(f"  - {run} ("))
        assert ("NOT the capped run continued" in line) == (not info["first_epochs"]["identical"]), run
        rows = metrics[metrics["run"] == run]
        assert set(rows["epochs"].astype(int)) == {info["result"]["epochs"]} and info["result"]["stopped_early"]
        assert set(rows["best_epoch"].astype(int)) == {info["result"]["best_epoch"]}
    assert "; machine: AMD EPYC, 2 CPUs, Linux (given; this record written on Intel(R) Xeon(R) Processor" in header
    assert "0 of 270." in (record / "section.md").read_text()
