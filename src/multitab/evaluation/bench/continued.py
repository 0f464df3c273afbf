"""A record's runs that reached their epoch cap still improving, taken from their continuations
(`python -m stages.continue_runs run`, which trains them on until early stopping ends them; docs/study.md, "Five
seeds"): `python -m multitab.evaluation.bench.attribution record ... --continued results/study/continued`.

Each continuation lies in <continued>/<its run folder> (the record's `run`): metrics.json, its dvclive log and
continuation.json (what the capped run did, the safety cap, where the continuation started, whether its first
epochs repeat the capped run's curves, the commit and CPU). `continued_rows` replaces every row of such a run
(under each arm that reads it) by the continuation's, after checking that the continuation continues that very
run: same epochs and best epoch as the row records, and first epochs that repeat its curves (a run whose first
epochs differ is another run, not a continuation, and is refused). With `retrained` (the record's --retrained)
such a run is taken all the same when it trained from scratch: the run trained again under the stopping rule on
other floating-point kernels (another CPU: the first epochs part in the last bits and the trajectories follow),
the same configuration, model, layer and seed, and its header line says so, with the epoch where they part
(docs/study.md, "Five seeds"). `at_cap` counts what the record then still holds at a cap: the runs not ended by
early stopping (zero is the goal).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from multitab.evaluation.bench.numbers import StudyError, configs_from_metrics, run_rows

CONTINUATION = "continuation.json"
# how continuation.json's `start` begins for a run trained again from scratch (stages/continue_runs.py writes it)
FROM_SCRATCH = "trained from scratch"


def _continuation(path: Path) -> dict[str, Any]:
    try:
        info = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise StudyError(f"{path}: not readable ({e}); continue the run again (python -m stages.continue_runs)"
                         ) from None
    if not isinstance(info, dict) or not {"original", "first_epochs", "result"} <= set(info):
        raise StudyError(f"{path}: not what stages.continue_runs writes (original, first_epochs, result)")
    return info


def continued_rows(metrics: pd.DataFrame, curves: pd.DataFrame, folder: Path, retrained: bool = False
                   ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(metrics, curves) with every run that has a continuation in `folder` replaced by it, and the header lines
    naming each; StudyError when a continuation is not of the run the record holds (with `retrained`, a run
    trained again from scratch whose first epochs differ is taken as such: module docstring)."""
    configs = configs_from_metrics(metrics)
    lines: list[str] = []
    n_again = 0
    for run, part in metrics.groupby("run", sort=False):
        path = folder / str(run) / CONTINUATION
        if not path.is_file():
            continue
        info = _continuation(path)
        row = part.iloc[0]
        original, first, result = info["original"], info["first_epochs"], info["result"]
        if (int(original["epochs"]), int(original["best_epoch"])) != (int(row["epochs"]), int(row["best_epoch"])):
            raise StudyError(f"{path}: continues a run of {original['epochs']} epochs (best {original['best_epoch']}), "
                             f"but the record's {run} ran {row['epochs']} (best {row['best_epoch']})")
        again = not first.get("identical")
        if again and not (retrained and str(info.get("start")).startswith(FROM_SCRATCH)):
            raise StudyError(f"{path}: its first {first.get('epochs')} epochs differ from the capped run's "
                             f"({first.get('first_difference')}): another run, not its continuation; train the "
                             "configuration's runs again at this commit, or (trained from scratch) take it as the "
                             "run trained again with --retrained (docs/study.md, \"Five seeds\")")
        config, model, seed = str(row["config"]), str(row["model"]), int(row["seed"])
        rows = run_rows(folder / str(run), configs[config], config, model, seed)
        if rows is None:
            raise StudyError(f"{folder / str(run)}: continuation.json without its metrics.json")
        arms = list(dict.fromkeys(part["arm"]))
        kernels = f" ({info['kernels']})" if info.get("kernels") else ""
        metrics = pd.concat([metrics[metrics["run"] != run],
                             pd.DataFrame([{"arm": arm, "run": run, **r} for arm in arms for r in rows[0]])],
                            ignore_index=True)[metrics.columns]
        who = (curves["config"] == config) & (curves["model"] == model) & (curves["seed"] == seed) & \
            curves["arm"].isin(arms)
        curves = pd.concat([curves[~who], pd.DataFrame([{"arm": arm, **r} for arm in arms for r in rows[1]])],
                           ignore_index=True)[curves.columns]
        verb = "trained again" if again else "continued"
        lines.append(f"  - {run} ({', '.join(arms)}): {original['epochs']} of {original['max_epochs']} epochs, best "
                     f"{original['best_epoch']}, not ended by early stopping; {verb} at `{info.get('commit')}` on "
                     f"{info.get('cpu')}{kernels} under a safety cap of {info.get('safety_cap')} epochs, "
                     f"{info.get('start')}; " + (_parted(first, original) if again else
                     f"its first {first['epochs']} epochs repeat the capped run's curves ({first['precision']}; "
                     f"{original['source']})") + f"; {'' if result['stopped_early'] else 'NOT '}ended by early "
                     f"stopping after {result['epochs']} epochs, best {result['best_epoch']}.")
        n_again += again
    retrained_note = (f", {n_again} of them trained again from scratch on other kernels rather than continued"
                      if n_again else "")
    head = ([f"- Continued past their epoch cap, until early stopping or the safety cap ended them ({len(lines)} "
             f"run(s){retrained_note}; {folder.as_posix()}, `python -m stages.continue_runs`):"] if lines else [])
    return metrics, curves, head + lines


def _parted(first: dict[str, Any], original: dict[str, Any]) -> str:
    """The header's words for a run trained again whose first epochs are not the capped run's."""
    d = first.get("first_difference") or {}
    return (f"NOT the capped run continued: its first {first['epochs']} epochs do not repeat the capped run's curves "
            f"({first['precision']}; {original['source']}), parting at epoch {d.get('epoch')} ({d.get('curve')} "
            f"{d.get('capped')} there, {d.get('continued')} here), so it is the same configuration, model, layer "
            "and seed trained again on other floating-point kernels, taken in its place (--retrained)")


def at_cap(metrics: pd.DataFrame) -> list[str]:
    """The distinct runs (`run`, else config/model/seed) not ended by early stopping: at their epoch cap."""
    key = ["run"] if "run" in metrics.columns else ["config", "model", "seed"]
    runs = metrics.drop_duplicates(key)
    capped = runs[runs["stopped_early"].astype(str).str.lower() != "true"]
    return ["/".join(str(v) for v in r) for r in capped[key].itertuples(index=False)]
