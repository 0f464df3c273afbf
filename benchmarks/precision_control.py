"""Is a precision option's effect on Δm within what a one-ulp nudge of fp32 already does? The statistics of the
precision control, a pure function.

Per seed s there are three runs on the same data and split: fp32 (the reference), fp32 with its initial weights
nudged by one ulp (the CONTROL: a change that should not matter, so its effect is the run-to-run spread of
fp32 itself on these kernels), and the OPTION (bf16, TF32, compile, ...). Paired differences per seed:

    c_s = Δm(nudged)_s − Δm(fp32)_s        o_s = Δm(option)_s − Δm(fp32)_s

and e_s = |o_s| − |c_s|: how much further from fp32 the option lands than the nudge does, on the same seed.

The rule: the option is ACCEPTABLE unless a one-sided exact sign-flip permutation test of mean(e) > 0 rejects at
level α: p = the share of the 2^n sign patterns ±|e_1|, ..., ±|e_n| whose sum is ≥ the observed sum Σ e_s,
and the option is rejected when p ≤ α.

Error control. Under the hypothesis that the option is equivalent to the nudge (on each seed, given the fp32
run, the option's run and the nudged run are exchangeable: the option changes results no more than one ulp
does), e_s is symmetric about 0 and independent across seeds, so every sign pattern is equally likely and
P(reject) ≤ α exactly, whatever the distribution of the differences and for any n (with ties at the cut-off,
≤). Not a proof of equivalence: with n seeds the smallest attainable p is 2^-n, so n ≥ 5 is needed to reject
at α = 0.05 (at n = 3 nothing can be rejected: `decide` refuses rather than call every option acceptable), and
a small harm is accepted with high probability at n = 5. `spread` reports max |c_s|, the control's reach, for
the reader: an option with max |o_s| ≤ spread is within the nudge's range on every seed.

The driver trains those runs and writes the verdicts (docs/benchmarks.md, "The precision control"):

    python benchmarks/precision_control.py --config p06_pd3_t3 --samples 100000 --seeds 5 --options tf32,bf16 \
        [--model multitab_net] [--epochs 20] [--device cuda] [--out results/benchmarks/gpu/precision_control.json]
    python benchmarks/precision_control.py --dry-run --out /tmp/pc.json   # tiny: 600 rows, 5 seeds, 1 epoch

Per seed it trains `--model` and the STL baseline on the configuration's data at `--samples` rows (the runs'
training code: build, seed, train, test as `multitab.training.run` does), in fp32, in fp32 with every initial
weight nudged by one ulp (`nudge`), and in each option; Δm of each arm against its own STL seed mean, as the
study computes it. An option that cannot act on the device (tf32 or a CUDA-only switch on CPU) is not
trained and is recorded as "no effect on cpu", not as a passed control.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]

MAX_SEEDS = 20  # 2^20 sign patterns: the exact test stays cheap up to here


class Decision(NamedTuple):
    acceptable: bool
    p_value: float  # one-sided exact permutation p of mean(|option| - |control|) > 0
    alpha: float
    spread: float  # max |control difference|: the nudge's reach
    option_max: float  # max |option difference|


def decide(control: list[float] | np.ndarray, option: list[float] | np.ndarray, alpha: float = 0.05) -> Decision:
    """The precision control's verdict from per-seed paired differences (same seed order in both): `control`
    = Δm(fp32 nudged one ulp) − Δm(fp32), `option` = Δm(option) − Δm(fp32). See the module's docstring."""
    c, o = np.abs(np.asarray(control, dtype=float)), np.abs(np.asarray(option, dtype=float))
    if c.shape != o.shape or c.ndim != 1:
        raise ValueError(f"control and option need one difference per seed each, in the same order; got {c.shape} "
                         f"and {o.shape}")
    if not np.isfinite(c).all() or not np.isfinite(o).all():
        raise ValueError("a difference is not finite (NaN or inf): a run failed; rerun it before deciding")
    n = c.size
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if n > MAX_SEEDS:
        raise ValueError(f"{n} seeds: the exact test enumerates 2^n sign patterns; give at most {MAX_SEEDS}")
    if 2.0 ** -n > alpha:
        raise ValueError(f"{n} seeds cannot reject anything at alpha {alpha} (the smallest p is 2^-{n} = "
                         f"{2.0 ** -n:.3g}): give at least {int(np.ceil(-np.log2(alpha)))} seeds")
    e = o - c
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    sums = signs @ np.abs(e)
    observed = e.sum()
    # a relative tolerance so that the observed pattern counts itself despite rounding in the sums
    p = float(np.mean(sums >= observed - 1e-12 * max(1.0, float(np.abs(e).sum()))))
    return Decision(acceptable=p > alpha, p_value=p, alpha=alpha, spread=float(c.max()), option_max=float(o.max()))


# ------------------------------------------------------------------------------------------------- the driver
# Options that only change anything on CUDA: there, the loop compiles or captures; elsewhere it ignores them.
CUDA_ONLY_SWITCHES = ("compile", "cuda_graph")


def nudge(model: torch.nn.Module) -> None:
    """Every floating parameter one ulp up (torch.nextafter towards +inf), in place: the control's change that
    should not matter."""
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.copy_(torch.nextafter(p, torch.full_like(p, float("inf"))))


def known_options() -> tuple[str, ...]:
    """The options this code can train: the precisions but fp32, and the CUDA-only switches TrainConfig has."""
    from multitab.config.train import TrainConfig
    from multitab.training.compute_mode import PRECISIONS

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    return (*(p for p in PRECISIONS if p != "fp32"), *(s for s in CUDA_ONLY_SWITCHES if s in fields))


def parse_options(text: str) -> list[str]:
    options = [o.strip() for o in text.split(",") if o.strip()]
    unknown = [o for o in options if o not in known_options()]
    if unknown or not options:
        raise ValueError(f"--options {text!r}: {unknown or 'none given'}; this code knows {', '.join(known_options())}")
    return list(dict.fromkeys(options))


def acts_on(option: str, device: torch.device) -> bool:
    from multitab.training.compute_mode import effective_precision

    if option in CUDA_ONLY_SWITCHES:
        return device.type == "cuda"
    return effective_precision(device, option) == option


def train_arm(data_path: Path, dataset: str, model: str, seed: int, config: Any, *, nudged: bool,
              work: Path) -> dict[str, Any]:
    """One run, as `multitab.training.run.run_training` trains it (seed, build, train, test), with the initial
    weights nudged when asked: its metrics record (with how it computed: compute_mode)."""
    from multitab.hparams import load
    from multitab.runs.resolve import settings_for
    from multitab.training.compute_mode import computing
    from multitab.training.device import resolve_device, seed_everything
    from multitab.training.loop import train
    from multitab.training.run import RunSpec, build_run_model, load_run_data, torch_record, torch_run

    run = settings_for(config, load("multitab_bench", model, protocol=config.protocol, root=ROOT), model=model,
                       dataset=dataset)
    spec = RunSpec(dataset, model, seed, data_path, work / f"{model}-{seed}")
    device = resolve_device(config.device)
    data = load_run_data(spec, run.train, device)
    seed_everything(seed, config.deterministic)
    net = build_run_model(model, data.meta, spec, run)
    if nudged:
        nudge(net)
    one = torch_run(spec, run, data, net)
    with computing(device, config.precision, config.deterministic) as mode:
        result = train(net, data, one.settings, checkpoint_dir=spec.checkpoint_dir, run_fingerprint=one.fingerprint,
                       run_settings=one.run_settings)
    return torch_record(spec, run, data, net, one, result) | mode.record()


def arm_delta_m(records: list[dict[str, Any]], model: str, baseline: str) -> dict[int, float]:
    """Δm (%) per seed of `model`'s runs against the seed mean of `baseline`'s (the study's pairing)."""
    import pandas as pd

    from multitab.evaluation.delta_m import delta_m_per_seed

    def frame(name: str) -> pd.DataFrame:
        return pd.DataFrame({r["seed"]: r["test"] for r in records if r["model"] == name}).T.sort_index()

    return {int(s): float(v) for s, v in delta_m_per_seed(frame(model), frame(baseline), pairing="mean").items()}


def control(args: argparse.Namespace) -> dict[str, Any]:
    """Train every arm and decide every option: the JSON record."""
    from multitab.config import load_params
    from multitab.datasets.bench import synthesize_config, write_dataset
    from multitab.runtime.provenance import cpu_model, git_commit
    from multitab.training.device import resolve_device

    params = load_params(ROOT / "params.yaml")
    bench = dataclasses.replace(params.bench, data=dataclasses.replace(params.bench.data, n_samples=args.samples))
    device = resolve_device(args.device)
    base = dataclasses.replace(params.train, device=args.device, precision="fp32", compile=False, progress=False,
                               max_epochs=args.epochs, stack_seeds=False)
    options = parse_options(args.options)
    if not 0 < args.alpha < 1 or 2.0 ** -args.seeds > args.alpha:  # before hours of training, not after
        raise ValueError(f"--seeds {args.seeds} at --alpha {args.alpha}: decide can reject nothing (its smallest p "
                         f"is 2^-seeds); give at least {int(np.ceil(-np.log2(args.alpha)))} seeds and 0 < alpha < 1")
    acting = [o for o in options if acts_on(o, device)]
    arms: dict[str, tuple[Any, bool]] = {"fp32": (base, False), "nudged": (base, True)}
    for o in acting:
        arms[o] = (dataclasses.replace(base, **({o: True} if o in CUDA_ONLY_SWITCHES else {"precision": o})), False)
    seeds = list(range(args.seeds))
    records: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory(prefix="precision-control-") as tmp:
        data_path = Path(tmp) / args.config
        write_dataset(data_path, *synthesize_config(args.config, bench))
        for seed in seeds:
            for arm, (config, nudged) in arms.items():
                for model in (args.baseline, args.model):
                    records[arm].append(train_arm(data_path, args.config, model, seed, config, nudged=nudged,
                                                  work=Path(tmp) / arm))
    dm = {arm: arm_delta_m(rs, args.model, args.baseline) for arm, rs in records.items()}
    diff = {arm: [dm[arm][s] - dm["fp32"][s] for s in seeds] for arm in arms if arm != "fp32"}
    verdicts: dict[str, Any] = {}
    for o in options:
        if o not in acting:
            verdicts[o] = {"effect": f"no effect on {device.type}", "acceptable": None, "p": None, "spread": None}
            continue
        d = decide(diff["nudged"], diff[o], args.alpha)
        verdicts[o] = {"effect": "trained", "acceptable": d.acceptable, "p": d.p_value, "spread": d.spread,
                       "option_max": d.option_max, "differences": diff[o],
                       "precision_effective": sorted({r["precision_effective"] for r in records[o]})}
    ran = [r for rs in records.values() for r in rs]
    return {
        "benchmark": "precision_control", "config": args.config, "model": args.model, "baseline": args.baseline,
        "samples": args.samples, "seeds": seeds, "epochs": args.epochs, "alpha": args.alpha,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model() or "cpu",
        "torch": torch.__version__, "commit": git_commit(ROOT), "precision": "fp32",
        "deterministic": {"requested": base.deterministic, "as_ran": all(r["deterministic"] for r in ran),
                          "nondeterministic_ops": sorted({op for r in ran for op in r["nondeterministic_ops"]})},
        "delta_m": {arm: [dm[arm][s] for s in seeds] for arm in arms},
        "control_differences": diff["nudged"], "options": verdicts,
    }


def main(argv: Sequence[str] | None = None) -> int:
    from multitab.files.io import write_json
    from multitab.runtime.exit_codes import BAD_INPUT

    p = argparse.ArgumentParser(description="The precision control: is an option's effect on Δm within a one-ulp "
                                            "nudge's? (module docstring)")
    p.add_argument("--config", default="p06_pd3_t3", help="a MultiTab-Bench configuration (params.yaml bench.configs)")
    p.add_argument("--samples", type=int, default=100_000, help="rows generated (bench.data.n_samples)")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--options", default="tf32,bf16", help="comma-separated; known: " + ", ".join(known_options()))
    p.add_argument("--model", default="multitab_net")
    p.add_argument("--baseline", default="stl_mlp")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--dry-run", action="store_true", help="600 rows, 5 seeds, 1 epoch: checks the machinery")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "benchmarks" / "precision_control.json")
    args = p.parse_args(argv)
    if args.dry_run:
        args.samples, args.seeds, args.epochs = 600, 5, 1
    try:
        record = control(args)
    except ValueError as e:  # a bad option, configuration, size or seed count: named, not retried
        print(f"precision_control: {e}", file=sys.stderr)
        return BAD_INPUT
    write_json(args.out, record)
    print(json.dumps(record["options"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
