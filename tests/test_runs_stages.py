"""runs.yaml's synthetic data folders and study reports (multitab.runs.stages), which dvc.yaml's `synthesize`,
`validate_synthetic` and `group_report` iterate: the command DVC writes for each folder, one stage per key, every
folder a run reads produced by one of them, and each report over its run group's runs."""

from __future__ import annotations

from pathlib import Path

from dvc.parsing.interpolate import to_str  # how DVC writes a dict in a `cmd`: `--<key> <value> ...`

from multitab.config import parse_params, read_yaml
from multitab.runs.expand import expand
from multitab.runs.stages import group_reports, synthetic_data

ROOT = Path(__file__).resolve().parents[1]


def _raw(protocol: str = "paper") -> dict:
    raw = read_yaml(ROOT / "params.yaml")
    raw["protocol"] = protocol
    raw["study"]["configs"] = raw["attribution"]["configs"] = ["p06_pd3_t3"]
    raw["attribution"]["run_arms"] = None  # every arm (params.yaml runs the two layers alone)
    raw["runs"]["study"]["seeds"] = raw["runs"]["attribution"]["seeds"] = [0]
    return raw


def test_each_folder_is_one_stage_whose_command_passes_its_options() -> None:
    params = parse_params(_raw())
    folders = synthetic_data(params, ["study", "attribution"])
    commands = {key: f"{to_str(f['options'])} --out {f['out']}" for key, f in folders.items()}
    assert commands["p06_pd3_t3"] == "--config p06_pd3_t3 --out data/synthetic/p06_pd3_t3"
    assert commands["study-p06_pd3_t3"] == "--config p06_pd3_t3 --profile study --out data/study/p06_pd3_t3"
    assert commands["attribution-p06_pd3_t3_tr_raw_s0"] == (
        "--config p06_pd3_t3 --profile attribution --evaluation training_rows --targets raw --data-seed 0 "
        "--out data/attribution/p06_pd3_t3_tr_raw_s0")
    assert commands["attribution-p06_pd3_t3_ho_std_fixed"].endswith(
        "--evaluation held_out --targets standard --data-seed -1 --out data/attribution/p06_pd3_t3_ho_std_fixed")
    assert {f["profile_data"] for k, f in folders.items() if k.startswith("attribution-")} == {"attribution.data"}
    # every folder and verdict a study's run reads is a stage's output
    runs = [r for r in expand(params, ["study", "attribution"]).values() if r.group in ("study", "attribution")]
    assert {(r.data, r.verdict) for r in runs} <= {(f["out"], f["verdict"]) for f in folders.values()}
    # without their groups, MultiTab-Bench's folders alone
    assert list(synthetic_data(params, [])) == list(params.bench.configs)


def test_the_authors_study_has_a_folder_per_seed_and_its_own_report_key() -> None:
    raw = _raw("authors_code")
    raw["runs"]["study"]["seeds"] = [0, 1]
    params = parse_params(raw)
    folders = {k: f for k, f in synthetic_data(params, ["study"]).items() if k.startswith("study-")}
    assert {k: to_str(f["options"]) for k, f in folders.items()} == {
        f"study-p06_pd3_t3_tr_raw_s{s}":
            f"--config p06_pd3_t3 --profile study --evaluation training_rows --targets raw --data-seed {s}"
        for s in (0, 1)}
    assert group_reports(params, ["study"]) == {"study-authors_code": {
        "script": "aggregate_study", "section": "study", "group": "study", "runs": "results/study_runs",
        "out": "results/study_report"}}


def test_a_report_reads_its_run_groups_runs() -> None:
    raw = _raw()
    raw["runs"]["attribution"]["out"] = "results/arms"
    params = parse_params(raw)
    assert group_reports(params, []) == {}
    assert group_reports(params, ["study", "attribution"]) == {
        "study": {"script": "aggregate_study", "section": "study", "group": "study", "runs": "results/study_runs",
                  "out": "results/study_report"},
        "attribution": {"script": "aggregate_attribution", "section": "attribution", "group": "attribution",
                        "runs": "results/arms", "out": "results/attribution_report"}}
