"""Result files of a search: rows written chunk by chunk, resumable, several formats.

Layout for ``--out PATH``:

* the rows: ``PATH`` itself for ``.csv`` / ``.csv.gz`` (gzip: one member per chunk,
  which gzip readers concatenate), else ``PATH.rows.csv.gz`` next to a ``.json``
  or ``.parquet`` summary written at the end;
* ``PATH.meta.json``: a hash of the inputs, the chunks already written (with the
  small per-chunk facts the baselines need) and, once the sweep ends, the run's
  metadata, best point and baselines. It is replaced atomically after each
  chunk's rows are flushed, so a file cut off by Ctrl-C or a killed process is
  always readable and ``--resume`` keeps exactly the chunks it lists.
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
import os
import zlib
from pathlib import Path

import numpy as np

from ._table import COLUMN_DTYPES, COLUMN_NAMES, TABLE_COLUMNS, empty_table, json_safe, take

FORMATS = (".csv", ".csv.gz", ".json", ".parquet")


def file_format(path) -> str:
    """The format chosen by the file name's extension (ValueError if unsupported)."""
    name = str(path).lower()
    for ext in (".csv.gz", ".csv", ".json", ".parquet"):
        if name.endswith(ext):
            return ext
    raise ValueError(f"out must end with one of {', '.join(FORMATS)}; got {str(path)!r}")


def inputs_hash(inputs: dict) -> str:
    """Stable digest of a search's inputs (what must match for --resume)."""
    text = json.dumps(inputs, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _fmt(value) -> str:
    """One value as CSV text (booleans true/false, floats shortest round-trip, inf, nan)."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (float, np.floating)):
        return repr(float(value)) if math.isfinite(value) else ("inf" if value > 0 else "nan")
    return str(value)


def _column_text(col) -> list:
    """A column as CSV field strings (column-wise: much faster than per-value dispatch)."""
    col = np.asarray(col)
    if col.dtype == np.bool_:
        return ["true" if v else "false" for v in col.tolist()]
    if col.dtype.kind == "f":
        return [repr(v) for v in col.tolist()]  # shortest round-trip text; inf/nan as such
    return [str(v) for v in col.tolist()]


def table_csv(table: dict, *, header: bool, extra: dict = None) -> str:
    """CSV text of ``table`` (optionally with constant ``extra`` columns appended)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    names = list(COLUMN_NAMES) + list(extra or {})
    if header:
        w.writerow(names)
    n = len(table["arch_id"])
    cols = [_column_text(table[name]) for name in COLUMN_NAMES]
    cols += [[_fmt(v)] * n for v in (extra or {}).values()]
    w.writerows(zip(*cols))
    return buf.getvalue()


def read_rows_csv(path) -> tuple[dict, np.ndarray]:
    """(table, chunk id per row) from a rows file; a cut-off last line or gzip member is dropped."""
    path = Path(path)
    opener = gzip.open if str(path).lower().endswith(".gz") else open
    lines = []
    try:
        with opener(path, "rt", newline="") as f:
            for line in f:
                lines.append(line)
    except (EOFError, gzip.BadGzipFile, OSError, zlib.error):
        pass  # a member cut off by a killed process: keep the complete lines before it
    if lines and not lines[-1].endswith("\n"):
        lines.pop()
    if not lines:
        return empty_table(), np.array([], dtype=np.int64)
    reader = csv.reader(lines)
    header = next(reader)
    missing = [c for c in COLUMN_NAMES if c not in header]
    if missing:
        raise ValueError(f"{path}: not a phaze search result (missing columns {', '.join(missing)})")
    pos = {name: header.index(name) for name in header}
    rows = [row for row in reader if len(row) == len(header)]
    columns = list(zip(*rows)) if rows else [()] * len(header)
    table = {name: _parse_column(name, columns[pos[name]]) for name in COLUMN_NAMES}
    chunks = (np.array(columns[pos["chunk"]], dtype=np.int64) if "chunk" in pos and rows
              else np.full(len(rows), -1, dtype=np.int64))
    return table, chunks


def _parse_column(name, texts) -> np.ndarray:
    """CSV field strings of column ``name`` → a numpy column of its dtype."""
    dt = COLUMN_DTYPES[name]
    if not texts:
        return np.array([], dtype=dt)
    if dt is np.bool_:
        return np.char.lower(np.array(texts, dtype=str)) == "true"
    if dt is np.int64:
        return np.array(texts, dtype=str).astype(np.int64)
    if dt is np.float64:
        return np.array(texts, dtype=str).astype(np.float64)
    return np.array(texts, dtype=object)


def _atomic_write_text(path: Path, text: str) -> None:
    _atomic_write_bytes(path, text.encode())


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write, flush to disk, then rename over ``path``: readers see the old or the new file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Journal:
    """Chunk-by-chunk writer of a search's rows with resume (see module docstring)."""

    def __init__(self, path, inputs_digest: str, *, resume: bool):
        self.path = Path(path)
        self.format = file_format(self.path)
        self.rows_path = (self.path if self.format in (".csv", ".csv.gz")
                          else self.path.with_name(self.path.name + ".rows.csv.gz"))
        self.meta_path = self.path.with_name(self.path.name + ".meta.json")
        self.digest = inputs_digest
        self.chunks: dict = {}  # chunk id → small per-chunk facts (json-able)
        self.previous = empty_table()
        if self.path.parent and not self.path.parent.exists():
            raise ValueError(f"out: folder {str(self.path.parent)!r} does not exist")
        if resume and self.meta_path.exists():
            self._load()
        else:
            self._start()

    # -- start / resume -----------------------------------------------------
    def _start(self):
        self._write_rows_file(empty_table(), np.array([], dtype=np.int64))
        self._write_meta({})

    def _load(self):
        try:
            meta = json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            raise ValueError(f"resume: {self.meta_path} is unreadable; start again without --resume") \
                from None
        if meta.get("inputs_hash") != self.digest:
            raise ValueError(f"resume: {self.path} was written by a search with different inputs; "
                             f"use the same arguments or another --out")
        self.chunks = {int(k): v for k, v in (meta.get("chunks") or {}).items()}
        table, chunk_of_row = (read_rows_csv(self.rows_path) if self.rows_path.exists()
                               else (empty_table(), np.array([], dtype=np.int64)))
        keep = np.isin(chunk_of_row, np.array(sorted(self.chunks), dtype=np.int64))
        self.previous = take(table, keep)
        # Rewrite without rows of chunks the meta file does not list (cut off mid-way).
        self._write_rows_file(self.previous, chunk_of_row[keep])

    def _write_rows_file(self, table, chunk_ids):
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(list(COLUMN_NAMES) + ["chunk"])
        cols = [_column_text(table[name]) for name in COLUMN_NAMES]
        cols.append([str(int(c)) for c in chunk_ids])
        w.writerows(zip(*cols))
        data = buf.getvalue().encode()
        if str(self.rows_path).lower().endswith(".gz"):
            data = gzip.compress(data, mtime=0)
        _atomic_write_bytes(self.rows_path, data)

    # -- per chunk ----------------------------------------------------------
    def append(self, chunk_id: int, table: dict, facts: dict) -> None:
        """Append one chunk's rows (flushed to disk), then record the chunk as done."""
        data = table_csv(table, header=False, extra={"chunk": int(chunk_id)}).encode()
        if str(self.rows_path).lower().endswith(".gz"):
            data = gzip.compress(data, mtime=0)
        with open(self.rows_path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        self.chunks[int(chunk_id)] = json_safe(facts)
        self._write_meta({})

    def _write_meta(self, extra: dict) -> None:
        meta = {"inputs_hash": self.digest, "format": self.format,
                "rows_file": self.rows_path.name, "chunks": self.chunks}
        meta.update(extra)
        _atomic_write_text(self.meta_path, json.dumps(json_safe(meta), indent=1))

    def finish(self, summary: dict) -> None:
        """Record the run's summary (metadata, best, baselines) once every chunk is done."""
        self._write_meta({"complete": True, "summary": summary})


def save_json(path, summary: dict, top_rows: dict) -> None:
    """A .json result: the summary (metadata, best, baselines, Pareto front) and the top rows."""
    doc = dict(summary)
    doc["top_rows"] = [dict(zip(top_rows, vals)) for vals in zip(*top_rows.values())]
    _atomic_write_text(Path(path), json.dumps(json_safe(doc), indent=1))


def save_parquet(path, table: dict, summary: dict) -> None:
    """A .parquet result: every row, the summary as JSON in the schema metadata (key 'phaze')."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError("saving .parquet needs pyarrow: pip install 'phaze[parquet]'") from None
    arrays = {}
    for name, dt in TABLE_COLUMNS:
        col = np.asarray(table[name])
        arrays[name] = pa.array(col.tolist() if dt is object else col)
    tab = pa.table(arrays)
    tab = tab.replace_schema_metadata({b"phaze": json.dumps(json_safe(summary)).encode()})
    tmp = Path(str(path) + ".tmp")
    pq.write_table(tab, tmp)
    os.replace(tmp, path)


def save_csv(path, table: dict) -> None:
    """A .csv / .csv.gz result: every row, with a header (no chunk column)."""
    data = table_csv(table, header=True).encode()
    if str(path).lower().endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    _atomic_write_bytes(Path(path), data)


def load_table(path) -> tuple[dict, dict]:
    """(table, summary) from a result file of any supported format (summary may be empty)."""
    path = Path(path)
    fmt = file_format(path)
    if not path.exists():
        raise FileNotFoundError(f"result file {str(path)!r} does not exist")
    meta_path = path.with_name(path.name + ".meta.json")
    summary = {}
    if meta_path.exists():
        try:
            summary = json.loads(meta_path.read_text()).get("summary") or {}
        except ValueError:
            summary = {}
    if fmt in (".csv", ".csv.gz"):
        table, _ = read_rows_csv(path)
        return table, summary
    if fmt == ".json":
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            raise ValueError(f"{path}: not valid JSON") from None
        rows = doc.pop("top_rows", [])
        table = {name: np.array([(_none_inf(r.get(name), dt)) for r in rows], dtype=dt)
                 for name, dt in TABLE_COLUMNS}
        return table, doc
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError("reading .parquet needs pyarrow: pip install 'phaze[parquet]'") from None
    tab = pq.read_table(path)
    table = {name: np.array(tab.column(name).to_pylist(), dtype=dt) for name, dt in TABLE_COLUMNS}
    meta = tab.schema.metadata or {}
    if b"phaze" in meta:
        summary = json.loads(meta[b"phaze"])
    return table, summary


def _none_inf(v, dt):
    """JSON null back to inf in a float column (json_safe wrote inf as null)."""
    if v is None and dt is np.float64:
        return math.inf
    return v
