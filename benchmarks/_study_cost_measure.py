"""What benchmarks/study_cost.py measures on this machine: the study's models trained for a few epochs on a
synthesised configuration (`measure`, through the train stages' own code), their forward FLOPs per sample,
and the best rate of matrix products of the models' own shapes (`matmul_peak`, the compute floor's rate).
A module beside the script, not a script: study_cost.py imports it and re-exports its names
(step_profile.py, projection_check.py and the tests read them there).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from _study_cost_model import split_startup
from multitab.config import Params
from multitab.config.train import TrainConfig
from multitab.datasets.bench import synthesize_config, write_dataset
from multitab.datasets.schema import DatasetSchema, schema_from_meta
from multitab.evaluation.paper.complexity import complexity
from multitab.hparams import BENCH, for_run, load, selection_file
from multitab.models import build_model
from multitab.runs.resolve import settings_for
from multitab.training.compute_mode import tf32
from multitab.training.run import RunSpec, run_training
from multitab.training.stacked import StackRefused, run_training_stacked

ROOT = Path(__file__).resolve().parents[1]


# (rows, inner, columns) of matrix products the study's models run at batch 2048: an MLP layer, a batched
# expert layer's single product, MultiTab-Net's inter-sample q/k/v projection (t = 7) and its token FFN.
PEAK_SHAPES: tuple[tuple[int, int, int], ...] = ((2048, 512, 512), (2048, 256, 128), (2048, 624, 1872),
                                                 (79872, 16, 256))


def matmul_peak(precision: str, threads: int, repeats: int = 5, device: str = "cpu") -> dict[str, float]:
    """FLOP/s of torch.mm per shape of PEAK_SHAPES in `precision` on `device` (median of `repeats` timings;
    on CUDA synchronised, so a timing is the kernels' own; tf32: TF32 products on CUDA, fp32 on a CPU), and the
    best."""
    torch.set_num_threads(max(threads, 1))
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    with tf32(torch.device(device), precision):
        rates = {f"{m}x{k}x{n}": _mm_rate(m, k, n, dtype, device, repeats) for m, k, n in PEAK_SHAPES}
    return {**rates, "best": max(rates.values())}


def _mm_rate(m: int, k: int, n: int, dtype: torch.dtype, device: str, repeats: int) -> float:
    cuda = device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    a, b = torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device)
    for _ in range(3):
        a @ b
    inner = 50 if cuda else 5  # a CUDA product of these shapes takes microseconds: time a longer loop
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            a @ b
        sync()
        times.append((time.perf_counter() - t0) / inner)
    return 2.0 * m * k * n / statistics.median(times)


def forward_flops(schema: DatasetSchema, model: str, protocol: str, batch_size: int) -> float:
    """Forward FLOPs per sample of `model` as the study builds it (at its batch: inter-sample attention
    grows with the batch)."""
    built = build_model(model, schema, load(BENCH, model, protocol=protocol, root=ROOT).model)
    return float(complexity(built, schema, batch_size=batch_size)["flops"])


def measure(params: Params, config: TrainConfig, name: str, models: list[str], epochs: int,
            folder: Path, stack: int = 1, data_names: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Per model: seconds per epoch and start-up of one run, or, with `stack` > 1, of one member of a stacked
    run of `stack` seeds (the stacked epoch and start-up shared out over its members), each seed on every
    configuration of `data_names` where given (`name` among them: one stack of len(data_names) x `stack`
    members); a model that cannot stack is measured alone on `name` and says why (`stack_refused`)."""
    for n in dict.fromkeys([name, *(data_names or [])]):
        frames, meta = synthesize_config(n, params.bench)
        write_dataset(folder / n, frames, meta)
        if n == name:
            schema = schema_from_meta(meta)
    out = {}
    for model in models:
        cfg = replace(config, max_epochs=epochs, progress=False)
        t0 = time.perf_counter()
        hp = for_run(ROOT, selection_file("authors", BENCH, model), model=model, dataset=name, point=None, config=cfg)
        members, refused = 1, None
        if stack > 1:
            specs = [RunSpec(n, model, s, folder / n, folder / "ckpt" / n / model / str(s))
                     for n in (data_names or [name]) for s in range(stack)]
            try:
                runs = run_training_stacked(specs, settings_for(cfg, hp, model=model, dataset=name))
                members = len(specs)
            except StackRefused as e:
                refused = str(e)
        if members == 1:
            runs = [run_training(RunSpec(name, model, 0, folder / name, folder / "ckpt" / name / model),
                                 settings_for(cfg, hp, model=model, dataset=name))]
        record, history = runs[0]
        wall = time.perf_counter() - t0
        # steady state: the epochs after the first (which pays one-off warm-up), validation and checkpoints
        # included; a stacked epoch is the sum of its members' shares (each member's row holds its share)
        per_epoch_all = [sum(float(h[e]["epoch_seconds"]) for _, h in runs) / members for e in range(len(history))]
        split = split_startup(wall, per_epoch_all, members)
        per_epoch = split["seconds_per_epoch"]
        out[model] = {"wall": wall, "epochs": record["epochs"], **split,
                      "stack_members": members, **({"stack_refused": refused} if refused else {}),
                      "samples_per_second": record["samples_per_second"],
                      **({"cuda_graph": record["cuda_graph"]} if "cuda_graph" in record else {}),
                      **{k: record[k] for k in ("deterministic", "nondeterministic_ops", "precision_effective")
                         if k in record},
                      "n_train": record["n_rows"]["train"], "n_val": record["n_rows"]["val"],
                      "n_test": record["n_rows"]["test"],
                      "forward_flops_per_sample": forward_flops(schema, model, params.protocol, config.batch_size)}
        print(f"  {name} {model}: {per_epoch:.1f} s/epoch ({record['samples_per_second']:.0f} samples/s), "
              f"warm-up {split['warmup']:.1f} s, start-up + test evaluation {split['startup_per_row']:.1f} s"
              + (f" (per member of a stack of {members})" if members > 1 else "")
              + (f"; not stacked: {refused}" if refused else ""), flush=True)
    return out
