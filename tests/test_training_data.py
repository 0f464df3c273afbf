"""The training data path at full size: processed Parquet read straight into preallocated tensors.

- the reader gives the tensors the previous loader gave (whole Arrow table -> numpy columns -> stacked
  arrays, `split_from_frame_arrays`), bit for bit, over row groups and with a row limit;
- loading holds the split about once (peak RSS of a child process), where the previous loader held it
  two to three times;
- bad files still name the file, column and row.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from _training_tiny import TASKS, write_tiny_processed
from multitab.datasets.schema import schema_from_meta
from multitab.training.data import DataError, TensorSplit, load_processed, split_from_frame_arrays

ROOT = Path(__file__).resolve().parents[1]

# every feature kind and every task kind, several row groups per file
FEATURES = [
    {"name": "n1", "kind": "numerical", "cardinality": None},
    {"name": "c1", "kind": "categorical", "cardinality": 5},
    {"name": "n2", "kind": "numerical", "cardinality": None},
    {"name": "c2", "kind": "categorical", "cardinality": 3},
    {"name": "n3", "kind": "numerical", "cardinality": None},
]


def _previous_loader(path: Path, split: str) -> TensorSplit:
    """How splits were read before the reader: the whole table through Arrow, numpy columns, stacked."""
    meta = json.loads((path / "meta.json").read_text())
    schema = schema_from_meta(meta)
    table = pq.read_table(path / f"{split}.parquet", columns=schema.canonical_columns)
    columns = {name: table.column(name).to_numpy() for name in table.column_names}
    return split_from_frame_arrays(schema, columns, where=split)


def _rewrite(path: Path, row_group_size: int) -> None:
    for file in path.glob("*.parquet"):
        pq.write_table(pq.read_table(file), file, row_group_size=row_group_size)


def _same(a: TensorSplit, b: TensorSplit) -> None:
    for name in ("x_num", "x_cat", "y_float", "y_long"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert torch.equal(x, y), name
    assert (a.float_tasks, a.long_tasks) == (b.float_tasks, b.long_tasks)


def test_the_reader_gives_the_previous_loaders_tensors_bit_for_bit(tmp_path: Path) -> None:
    path = tmp_path / "tiny"
    write_tiny_processed(path, n={"train": 1000, "val": 250, "test": 130}, features=FEATURES, tasks=TASKS)
    _rewrite(path, row_group_size=97)  # rows cross row groups and column groups
    assert pq.ParquetFile(path / "train.parquet").num_row_groups == 11
    data = load_processed(path)
    for split in ("train", "val", "test"):
        _same(data.splits[split], _previous_loader(path, split))
    # a row limit inside a row group reads the same first rows (the previous loader cut the whole split)
    head = load_processed(path, max_rows={"train": 300}).splits["train"]
    _same(head, _previous_loader(path, "train").head(300))
    assert load_processed(path, max_rows={"train": 10**6}).splits["train"].x_num.shape[0] == 1000
    # the tensors are numpy-backed host tensors, contiguous, no copy hidden behind a view
    assert all(t.is_contiguous() for t in (head.x_num, head.x_cat, head.y_float, head.y_long))


def test_binary_targets_stored_as_bool_or_int32_and_float64_features_read_as_before(tmp_path: Path) -> None:
    path = tmp_path / "tiny"
    write_tiny_processed(path, n={"train": 300, "val": 50, "test": 50}, features=FEATURES, tasks=TASKS)
    file = path / "train.parquet"
    table = pq.read_table(file)
    table = table.set_column(table.schema.get_field_index("click"), "click", table["click"].cast(pa.bool_()))
    table = table.set_column(table.schema.get_field_index("c1"), "c1", table["c1"].cast(pa.int32()))
    n1 = table["n1"].to_numpy().astype(np.float64) + 1e-9  # float64 that rounds on the way to float32
    table = table.set_column(table.schema.get_field_index("n1"), "n1", pa.array(n1))
    pq.write_table(table, file, row_group_size=64)
    _same(load_processed(path).splits["train"], _previous_loader(path, "train"))


def test_bad_files_name_the_file_column_and_row(tmp_path: Path) -> None:
    path = tmp_path / "bad"
    write_tiny_processed(path, n={"train": 300, "val": 200, "test": 50}, features=FEATURES, tasks=TASKS)
    val = pq.read_table(path / "val.parquet")
    n2 = val["n2"].to_numpy().copy()
    n2[150] = np.inf
    pq.write_table(val.set_column(val.schema.get_field_index("n2"), "n2", pa.array(n2)), path / "val.parquet",
                   row_group_size=64)
    with pytest.raises(DataError, match=r"val.parquet: column 'n2' row 150: non-finite value"):
        load_processed(path)
    masked = pa.array(val["c1"].to_numpy(), mask=np.arange(len(val)) == 130)
    pq.write_table(val.set_column(val.schema.get_field_index("c1"), "c1", masked), path / "val.parquet",
                   row_group_size=64)
    with pytest.raises(DataError, match=r"val.parquet: column 'c1' row 130: missing value"):
        load_processed(path)
    pq.write_table(val.drop_columns(["m_jj"]), path / "val.parquet")
    with pytest.raises(DataError, match=r"val.parquet: column 'm_jj' missing"):
        load_processed(path)
    pq.write_table(val.set_column(val.schema.get_field_index("c2"), "c2", val["c2"].cast(pa.float64())),
                   path / "val.parquet")
    with pytest.raises(DataError, match=r"val.parquet: categorical column 'c2' has dtype double, expected integer"):
        load_processed(path)


# A child process: import and warm up on a tiny folder, reset the peak (VmHWM), load, report the peak's
# growth and the tensors' bytes. The reader's decode buffers are bounded by _GROUP_BYTES (64 MiB: two reads
# of up to 64 MiB in flight); how much of them the allocator still holds at the peak depends on the threads'
# timing, and at 64 MiB that noise is as large as the tensors' growth here (the slope read 1.1 to 1.5 on one
# machine). At 4 MiB a read is one column of the row group, and what is measured is the growth with rows.
_PEAK_CHILD = textwrap.dedent(
    """
    import json, sys
    from multitab.training.data import load_processed
    def status(key):
        for line in open('/proc/self/status'):
            if line.startswith(key + ':'):
                return int(line.split()[1]) * 1024
    import multitab.training.reader as reader
    reader._GROUP_BYTES = 4 << 20
    load_processed(sys.argv[1])  # libraries' first use
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')  # the peak so far is forgotten: what follows is the load's alone
    before = status('VmRSS')
    data = load_processed(sys.argv[2])
    print(json.dumps({"peak": status('VmHWM') - before,
                      "tensors": sum(s.nbytes() for s in data.splits.values())}))
    """
)


def _load_peak(tiny: Path, path: Path) -> dict[str, int]:
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", _PEAK_CHILD, str(tiny), str(path)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def _write_wide(path: Path, n: int) -> None:
    """A processed folder of 32 numerical and 8 categorical features, a binary, a regression and a
    multiclass task; `n` training rows (values do not matter here)."""
    rng = np.random.default_rng(0)
    features = [{"name": f"n{j}", "kind": "numerical", "cardinality": None} for j in range(32)]
    features += [{"name": f"c{j}", "kind": "categorical", "cardinality": 50} for j in range(8)]
    tasks = [{"name": "click", "type": "binary", "n_classes": 2},
             {"name": "m_jj", "type": "regression", "n_classes": None},
             {"name": "marital", "type": "multiclass", "n_classes": 3}]
    path.mkdir(parents=True)
    for split, rows in {"train": n, "val": 100, "test": 100}.items():
        cols = {f["name"]: rng.random(rows, dtype=np.float32) if f["kind"] == "numerical"
                else rng.integers(0, 50, rows) for f in features}
        cols |= {"click": rng.integers(0, 2, rows), "m_jj": rng.random(rows, dtype=np.float32),
                 "marital": rng.integers(0, 3, rows)}
        pq.write_table(pa.table(cols), path / f"{split}.parquet")
    (path / "meta.json").write_text(json.dumps({"features": features, "tasks": tasks}))


def test_loading_memory_grows_with_rows_as_the_tensors_do(tmp_path: Path) -> None:
    """Peak memory of loading 300,000 and 900,000 rows (42 columns): what the larger load holds more is
    its larger tensors (about 1x their growth), not the split again in Arrow and numpy (the previous
    loader: about 3x). The reader's own buffers are bounded (a few columns of one row group)."""
    _write_wide(tmp_path / "tiny", 10)
    peaks = []
    for n in (300_000, 900_000):
        _write_wide(tmp_path / f"n{n}", n)
        peaks.append(_load_peak(tmp_path / "tiny", tmp_path / f"n{n}"))
    slope = (peaks[1]["peak"] - peaks[0]["peak"]) / (peaks[1]["tensors"] - peaks[0]["tensors"])
    print(f"load peaks {[p['peak'] // 2**20 for p in peaks]} MiB for {[p['tensors'] // 2**20 for p in peaks]} MiB "
          f"of tensors: {slope:.2f} bytes held per byte of tensors")
    assert slope < 1.5, f"loading holds {slope:.2f}x the growth of its tensors"


@pytest.mark.gpu
def test_on_cuda_the_splits_are_read_onto_the_gpu_or_into_pinned_memory(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The same tensors as on the CPU, on the GPU when they fit, else pinned host memory."""
    from multitab.training import reader

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    path = tmp_path / "tiny"
    write_tiny_processed(path, n={"train": 1000, "val": 250, "test": 130}, features=FEATURES, tasks=TASKS)
    _rewrite(path, row_group_size=97)
    cpu = load_processed(path)
    cuda = torch.device("cuda")
    on_gpu = load_processed(path, device=cuda)
    monkeypatch.setattr(reader, "gpu_has_room", lambda *a, **k: False)
    pinned = load_processed(path, device=cuda)
    for split in ("train", "val", "test"):
        assert on_gpu.splits[split].device.type == "cuda"
        assert pinned.splits[split].device.type == "cpu" and pinned.splits[split].x_num.is_pinned()
        _same(on_gpu.splits[split].to("cpu"), cpu.splits[split])
        _same(pinned.splits[split], cpu.splits[split])


def test_the_data_files_are_hashed_once_per_process_in_the_background(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The run fingerprint's sha256 of the processed files: what `sha256_file` says, each file hashed once
    (stacked seeds ask for the folder once per member), again when it changes."""
    from multitab.files.io import sha256_file
    from multitab.training import data_hashes as dh

    path = tmp_path / "tiny"
    write_tiny_processed(path, n={"train": 50, "val": 20, "test": 20})
    calls: list[str] = []
    monkeypatch.setattr(dh, "sha256_file", lambda p: calls.append(Path(p).name) or sha256_file(p))
    dh.hash_in_background(path)
    first = dh.data_hashes(path)
    assert first == {p.name: sha256_file(p) for p in sorted(path.iterdir())}
    assert dh.data_hashes(path) == first and sorted(calls) == sorted(first)
    write_tiny_processed(path, n={"train": 50, "val": 20, "test": 21})  # rewritten, test.parquet differs
    changed = dh.data_hashes(path)
    assert changed["test.parquet"] != first["test.parquet"] and changed["train.parquet"] == first["train.parquet"]


# A child process (training's allocator setting is process-wide): predictions for 300 batches of a model whose
# activations take 1 MB a batch; the peak's growth during predict.
_PREDICT_CHILD = textwrap.dedent(
    """
    import torch
    from multitab.datasets.schema import Task
    from multitab.runtime.cpu import tune_cpu_runtime
    from multitab.training.data import TensorSplit
    from multitab.training.evaluate import predict
    torch.set_num_threads(1)
    def status(key):
        for line in open('/proc/self/status'):
            if line.startswith(key + ':'):
                return int(line.split()[1]) * 1024
    class Wide(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 1024), torch.nn.Linear(1024, 2)
        def forward(self, x_num, x_cat):
            h = self.b(torch.relu(self.a(x_num)))
            return {"y": h[:, 0], "z": h[:, 1]}
    n = 300 * 256
    split = TensorSplit(torch.randn(n, 8), torch.zeros(n, 0, dtype=torch.long), torch.zeros(n, 2),
                        torch.zeros(n, 0, dtype=torch.long), ("y", "z"), ())
    tasks = (Task("y", "regression", "y"), Task("z", "regression", "z"))
    model, cpu = Wide().eval(), torch.device("cpu")
    tune_cpu_runtime()  # as training does: glibc keeps freed memory and serves everything from its heap
    predict(model, split.head(512), tasks, batch_size=256, device=cpu)
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')
    before = status('VmRSS')
    predict(model, split, tasks, batch_size=256, device=cpu)
    print(status('VmHWM') - before)
    """
)


def test_evaluation_memory_does_not_grow_with_its_batches() -> None:
    """Predictions of 300 batches (600 KB of them): kept as a list of per-batch outputs joined at the end,
    each small output left in the heap where the next batch's activations would have gone, and the heap
    grew by about a batch's activations per batch (300 MB here; at the paper's size, GBs for the
    AliExpress test split). Written into one preallocated array, the peak hardly moves."""
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", _PREDICT_CHILD], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    grew = int(out.stdout.split()[-1])
    assert grew < 50e6, f"predict's peak grew by {grew / 1e6:.0f} MB"
