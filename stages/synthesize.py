"""synthesize@<config>: one MultiTab-Bench dataset (params: bench.data, bench.configs.<config>) written to
data/synthetic/<config>/{train,val,test}.parquet + meta.json, in the processed format of the real datasets."""

from __future__ import annotations

import logging
from pathlib import Path

from multitab.config import load_params
from multitab.datasets.bench import synthesize_config, write_dataset
from multitab.profiles import profiled
from stages._common import parser, run

log = logging.getLogger("stages.synthesize")


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--config", required=True, help="a key of bench.configs in the params file")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--profile", choices=("default", "study"), default="default",
                   help="study: `study.data` replaces keys of `bench.data` (the study's sample count)")
    a = p.parse_args(argv)

    def body() -> None:
        frames, meta = synthesize_config(a.config, profiled(load_params(a.params), a.profile).bench)
        write_dataset(a.out, frames, meta)
        log.info("%s: %s rows -> %s", a.config, meta["n_rows"], a.out)

    return run(f"synthesize@{a.config}", body, outputs=[a.out])


if __name__ == "__main__":
    raise SystemExit(main())
