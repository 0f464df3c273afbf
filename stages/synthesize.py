"""synthesize@<key>: one synthetic dataset (runs.yaml's synthetic_data: a MultiTab-Bench configuration's,
data/synthetic/<config>, or a folder of the study's or the attribution study's; params: bench.data,
bench.configs.<config>, the profile's section) written as {train,val,test}.parquet + meta.json, in the processed
format of the real datasets."""

from __future__ import annotations

import logging
from pathlib import Path

from multitab.config import load_params
from multitab.datasets.bench import synthesize_config, write_dataset
from multitab.runs.profiles import profiled
from stages._common import parser, run

# imported only once the stage runs (its quantile maps: scikit-learn, SciPy): a warm process of the flow's stage
# server has them already (multitab.runtime.stage_server)
WARM_IMPORTS = ("multitab.datasets.preprocess", "pyarrow.parquet")

log = logging.getLogger("stages.synthesize")


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--config", required=True, help="a key of bench.configs in the params file")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--profile", choices=("default", "study", "attribution"), default="default",
                   help="study / attribution: `study.data` / `attribution.data` replaces keys of `bench.data`")
    # the attribution study's data factors (multitab.config.attribution; defaults: bench.data's behaviour)
    p.add_argument("--evaluation", choices=("held_out", "training_rows"), default="held_out",
                   help="training_rows: validation and test are the training rows (the authors' loader)")
    p.add_argument("--data-seed", type=int, default=-1,
                   help="the generator's seed (a run seed: that run's own dataset); -1: the configuration's")
    p.add_argument("--targets", choices=("raw", "standard"), default=None, help="default: bench.data.targets")
    a = p.parse_args(argv)

    def body() -> None:
        frames, meta = synthesize_config(a.config, profiled(load_params(a.params), a.profile).bench,
                                         evaluation=a.evaluation, seed=None if a.data_seed < 0 else a.data_seed,
                                         targets=a.targets)
        write_dataset(a.out, frames, meta)
        log.info("%s: %s rows -> %s", a.config, meta["n_rows"], a.out)

    return run(f"synthesize@{a.config}", body, outputs=[a.out])


if __name__ == "__main__":
    raise SystemExit(main())
