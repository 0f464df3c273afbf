"""What dvc.yaml's data and report stages iterate, written into runs.yaml with the runs (multitab.runs.document).

`synthetic_data`: every synthetic data folder, key -> what stage `synthesize@<key>` writes and where
`validate_synthetic@<key>` puts its verdict. The MultiTab-Bench configurations are always there (key: the
configuration, data/synthetic/<config>); the study's folders (key `study-<name>`, data/study/<name>) and the
attribution study's (`attribution-<name>`, data/attribution/<name>) only while runs.yaml holds their run group.
The study has one folder per `study.configs` entry, or under `protocol: authors_code` one per configuration x the
authors' data options x run seed (multitab.config.attribution.study_data); the attribution study one per data
folder its arms need (multitab.config.attribution.data_entries). An entry holds the options of its command
(`options`, which DVC writes as `--<key> <value>`: the configuration, the profile unless the default, and an arm's
data options; the others are stages.synthesize's defaults), its folders and the section its profile lays over
bench.data (`profile_data`: bench.data itself for MultiTab-Bench's folders), so that the stage reads, of the
configurations, only its own: a change to `bench.configs.<c>` re-runs <c>'s folders alone.

`schema_datasets` / `declared_datasets`: the `datasets:` entries with a schema in the registry, and those declared in
params.yaml only (with `tasks:`), key -> `{local: {path}}` (acquire@D depends on the path). dvc.yaml's data stages
iterate `datasets:`; acquire, validate_raw and preprocess iterate these two, because they track per-dataset params
keys that only a dataset of the registry has (`standin`, `remote`, `preprocess`, `validation.policy.<D>`): a
declared dataset's stages (`acquire_declared@D` ...) track its whole entry, and `validation.policy`.

`group_reports`: the report of each study runs.yaml holds, key -> the stage script that writes it, the section and
run group it reads, the runs' folder and its own: `study` (`study-authors_code` under `protocol: authors_code`: its
own dvc.lock entry, the same folder, the other protocol's runs) and `attribution`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from multitab.config import Params
from multitab.config.attribution import data_entries, study_data, study_settings
from multitab.config.runs import DATA_KINDS

# a study's params section -> the stage script that writes its report, and the report's folder
REPORTS = {"study": ("aggregate_study", "results/study_report"),
            "attribution": ("aggregate_attribution", "results/attribution_report")}


def data_folder(kind: str, name: str, config: str, factors: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The `synthetic_data` entry of folder `name` of data kind `kind` (bench, study, attribution: DATA_KINDS),
    generated from configuration `config`; `factors`: an arm's data options (evaluation, targets, data_seed)."""
    out, verdict = (pattern.format(name) for pattern in DATA_KINDS[kind])
    options: dict[str, Any] = {"config": config}
    if kind != "bench":
        options["profile"] = kind  # multitab.runs.profiles: study.data / attribution.data over bench.data
    if factors is not None:
        options.update(evaluation=factors["evaluation"], targets=factors["targets"],
                       **{"data-seed": factors["data_seed"]})
    return {"options": options, "out": out, "verdict": verdict,
            "profile_data": "bench.data" if kind == "bench" else f"{kind}.data"}


def synthetic_data(params: Params, active: Collection[str]) -> dict[str, dict[str, Any]]:
    """runs.yaml's `synthetic_data` with the run groups `active`: MultiTab-Bench's folders, then the study's, then
    the attribution study's (no configuration's name holds the `-` of the others' keys: multitab.config.names)."""
    out: dict[str, dict[str, Any]] = {}
    if "bench" in params.sections:
        out.update((config, data_folder("bench", config, config)) for config in params.bench.configs)
    if "study" in params.sections and params.study.group in active:
        if study_settings(params) is None:
            out.update((f"study-{c}", data_folder("study", c, c)) for c in params.study.configs)
        else:
            out.update((f"study-{e['name']}", data_folder("study", e["name"], e["config"], e))
                       for e in study_data(params))
    if "attribution" in params.sections and params.attribution.group in active:
        out.update((f"attribution-{e['name']}", data_folder("attribution", e["name"], e["config"], e))
                   for e in data_entries(params))
    return out


def data_stages(params: Params) -> dict[str, dict[str, dict[str, Any]]]:
    """runs.yaml's `schema_datasets` and `declared_datasets` (module docstring)."""
    datasets = params.datasets if "datasets" in params.sections else {}
    out: dict[str, dict[str, dict[str, Any]]] = {"schema_datasets": {}, "declared_datasets": {}}
    for name, cfg in datasets.items():
        out["declared_datasets" if cfg.declared else "schema_datasets"][name] = {"local": {"path": cfg.local.path}}
    return out


def group_reports(params: Params, active: Collection[str]) -> dict[str, dict[str, Any]]:
    """runs.yaml's `group_reports` with the run groups `active`."""
    reports: list[tuple[str, str, str]] = []  # key, section, run group
    if "study" in params.sections and params.study.group in active:
        key = "study" if study_settings(params) is None else "study-authors_code"
        reports.append((key, "study", params.study.group))
    if "attribution" in params.sections and params.attribution.group in active:
        reports.append(("attribution", "attribution", params.attribution.group))
    out: dict[str, dict[str, Any]] = {}
    for key, section, group in reports:
        script, folder = REPORTS[section]
        out[key] = {"script": script, "section": section, "group": group, "runs": params.runs[group].out,
                    "out": folder}
    return out
