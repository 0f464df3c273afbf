"""Parquet by columns (multitab.datasets.columnar): a file written from its columns a row group at a time is
the file `DataFrame.to_parquet(index=False)` writes with the project's options (bytes), and columns read back
are pandas' columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from multitab.datasets import columnar
from multitab.datasets.columnar import (
    ColumnStore,
    ParquetColumns,
    parquet_options,
    to_parquet,
    write_parquet_columns,
)


def options(df: pd.DataFrame) -> dict[str, Any]:
    return parquet_options(pa.Schema.from_pandas(df, preserve_index=False))


def _frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    df = pd.DataFrame({
        "x": rng.standard_normal(n).astype(np.float32),
        "code": rng.integers(0, 7, n),
        "y": rng.standard_normal(n).astype(np.float32),
        "label": rng.integers(0, 2, n),
    })
    if n > 3:
        df.loc[[1, n - 1], "x"] = np.nan  # NaN becomes a Parquet null, as to_parquet writes it
    return df


@pytest.mark.parametrize("n", [0, 5, 2500])
def test_written_from_columns_is_what_to_parquet_writes(tmp_path: Path, monkeypatch, n: int) -> None:
    monkeypatch.setattr(columnar, "ROW_GROUP_ROWS", 1000)  # several row groups, the last one short
    df = _frame(n)
    df.to_parquet(tmp_path / "whole.parquet", index=False, row_group_size=1000, **options(df))
    write_parquet_columns(tmp_path / "columns.parquet", dict(df.dtypes), n,
                          lambda name, start, stop: df[name].to_numpy()[start:stop])
    assert (tmp_path / "columns.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()
    back = ParquetColumns(tmp_path / "columns.parquet")
    assert back.columns == list(df.columns) and back.n_rows == n
    pd.testing.assert_frame_equal(back.frame(["y", "x"]), df[["y", "x"]])
    assert back.nbytes("x") == 4 * n and back.nbytes("code") == 8 * n


def test_the_default_row_groups_are_those_to_parquet_writes(tmp_path: Path) -> None:
    """At the stages' own sizes (ROW_GROUP_ROWS unpatched) a file of one row more than a row group is the
    file `to_parquet(index=False)` writes with pyarrow's default row-group length."""
    df = pd.DataFrame({"b": np.arange(columnar.ROW_GROUP_ROWS + 1, dtype=np.int64) % 3})
    to_parquet(df, tmp_path / "whole.parquet")
    write_parquet_columns(tmp_path / "columns.parquet", dict(df.dtypes), len(df),
                          lambda name, start, stop: df[name].to_numpy()[start:stop])
    assert (tmp_path / "columns.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()
    assert pq.ParquetFile(tmp_path / "columns.parquet").metadata.num_row_groups == 2


def test_parked_columns_come_back_in_row_ranges(tmp_path: Path) -> None:
    store = ColumnStore(tmp_path)
    a = np.arange(10, dtype=np.int64)
    store.append("a", a[:4])
    store.append("a", a[4:])
    store.put("b", a.astype(np.float32) / 3)
    assert store.rows("a") == 10 and store.dtype("b") == np.float32
    np.testing.assert_array_equal(store.get("a", 3, 7), a[3:7])
    np.testing.assert_array_equal(store.get("b", 8), (a.astype(np.float32) / 3)[8:])
    assert len(store.get("a", 10, 20)) == 0
    store.put("a", a[:2])  # replaced, not appended
    np.testing.assert_array_equal(store.get("a"), a[:2])
    with pytest.raises(TypeError, match="parked as int64"):
        store.append("a", a.astype(np.float64))


def test_standin_chunks_go_to_parquet_without_a_dataframe(tmp_path: Path, monkeypatch) -> None:
    """The stand-in writer turns each chunk's arrays into Arrow directly (a pandas frame of a chunk cost two
    copies of it) and writes the file that a frame of each chunk gives."""
    import types

    import pyarrow as pa

    from multitab.datasets import standin
    from multitab.datasets.schema import get_schema

    schema = get_schema("higgs")
    monkeypatch.setattr(standin, "CHUNK_ROWS", 1000)
    monkeypatch.setattr(standin, "pd", types.SimpleNamespace(DataFrame=None), raising=False)  # no frame
    standin.write_standin(schema, {"data": 2500}, 5, tmp_path)
    monkeypatch.setattr(standin, "pd", pd, raising=False)
    writer = None
    for chunk in standin._chunks(schema, standin._draw_params(schema, 5), 2500, 5, 0):
        table = pa.Table.from_pandas(pd.DataFrame(chunk), preserve_index=False)
        writer = writer or pq.ParquetWriter(tmp_path / "reference.parquet", table.schema,
                                            **parquet_options(table.schema))
        writer.write_table(table)
    assert writer is not None
    writer.close()
    assert (tmp_path / "data.parquet").read_bytes() == (tmp_path / "reference.parquet").read_bytes()


def test_float_columns_are_written_without_dictionaries_and_read_back_the_same(tmp_path: Path) -> None:
    """The project's Parquet options: no dictionary for floating columns (pyarrow's default builds one per
    column chunk and throws it away at 1 MB), dictionaries for the integer ones; the values are those of a
    file written with pyarrow's defaults."""
    df = _frame(3000)
    to_parquet(df, tmp_path / "ours.parquet")
    df.to_parquet(tmp_path / "default.parquet", index=False)
    meta = pq.ParquetFile(tmp_path / "ours.parquet").metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert not any("DICTIONARY" in e for c in ("x", "y") for e in encodings[c]), encodings
    assert all(any("DICTIONARY" in e for e in encodings[c]) for c in ("code", "label")), encodings
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "ours.parquet"),
                                  pd.read_parquet(tmp_path / "default.parquet"))
    assert (tmp_path / "ours.parquet").read_bytes() != (tmp_path / "default.parquet").read_bytes()


def test_a_store_pickles_while_another_thread_adopts_columns_into_it(tmp_path: Path) -> None:
    """preprocess_files hands its noise store to the pool's jobs; the pool pickles them on its feeder thread
    while the main thread adopts the finished task columns into that same store. The pickle is a copy taken
    under the store's lock (CI once got "dictionary changed size during iteration"). Here one thread adopts
    20,000 new columns, one at a time, while this one pickles the store, with thread switches 50 times as
    frequent as Python's default."""
    import pickle
    import sys
    import threading

    store = ColumnStore(tmp_path)
    for i in range(2_000):
        store.append(f"noise/{i}", np.zeros(1, np.float32))
    started = threading.Event()

    def adopt() -> None:
        started.set()
        for i in range(20_000):
            other = ColumnStore(tmp_path)
            other._files[f"k{i}"], other._dtypes[f"k{i}"], other._rows[f"k{i}"] = tmp_path / "x", np.dtype("f4"), 1
            store.adopt(other)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    thread = threading.Thread(target=adopt)
    thread.start()
    copies = []
    try:
        started.wait()
        while thread.is_alive():
            copies.append(pickle.loads(pickle.dumps(store)))
    finally:
        thread.join()
        sys.setswitchinterval(interval)
    assert copies and all(set(c._files) == set(c._dtypes) == set(c._rows) for c in copies)
    assert len(pickle.loads(pickle.dumps(store))._files) == 22_000
