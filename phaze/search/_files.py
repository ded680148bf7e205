"""Result files of a search: rows written chunk by chunk, resumable, several formats.

Layout for ``--out PATH``:

* the rows: ``PATH`` itself for ``.csv`` / ``.csv.gz`` (gzip: one member per chunk,
  which gzip readers concatenate), else ``PATH.rows.csv.gz`` next to a ``.json``
  or ``.parquet`` summary written at the end;
* ``PATH.meta.json``: a hash of the inputs, the chunks already written (with the
  small per-chunk facts the baselines need) and, once the sweep ends, the run's
  metadata, best point and baselines. It is replaced atomically after each
  chunk's rows are flushed, so a file cut off by Ctrl-C or a killed process is
  always readable and ``--resume`` keeps exactly the chunks it lists;
* ``PATH.lock``: held with an advisory ``flock`` for the whole run, so a second
  search writing to the same ``PATH`` is refused (see :class:`OutLock`).

Integrity: each chunk's entry in the journal holds its row count (``evaluated``).
``--resume`` counts the rows of every listed chunk in the rows file and computes a
chunk again when its rows are missing, cut off or duplicated (saying so on stderr);
reading a result file checks the same counts, and a damaged file (cut-off gzip
stream or line, a row with the wrong number of fields, unparsable values) is an
error naming what is wrong, never a silently shorter table. When the sweep ends the
rows file is rewritten sorted by point, so it does not depend on which chunk
finished first (the same search writes byte-identical rows files whatever the
number of workers).
"""
from __future__ import annotations

import csv
import errno
import gzip
import hashlib
import io
import json
import math
import os
import sys
import zlib
from pathlib import Path

import numpy as np

from .._validate import OutputError
from . import _spill
from ._spill import ROWS_HEADER, chunk_digest  # noqa: F401  (the journal's; re-exported)
from ._table import (COLUMN_DTYPES, COLUMN_NAMES, LATE_COLUMNS, TABLE_COLUMNS, empty_table,
                     json_safe, recompute_mode, take)

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


class DamagedFile(ValueError):
    """A result file that cannot be read completely (what is wrong is in the message)."""


def _damaged(path, what) -> DamagedFile:
    return DamagedFile(f"{path} is damaged: {what}")


def _read_text(path: Path) -> tuple[str, str]:
    """(text, problem) of a rows file. A ``.gz`` is read member by member, each member's
    CRC checked, and only whole verified members are kept: a member that is cut off (a
    killed writer) or fails its CRC (damage) ends the text, and ``problem`` says which
    ("" when none). Bytes that are not UTF-8 are a problem too."""
    data = path.read_bytes()
    problem = ""
    if str(path).lower().endswith(".gz"):
        parts, pos = [], 0
        while pos < len(data):
            d = zlib.decompressobj(wbits=31)
            try:
                out = d.decompress(data[pos:]) + d.flush()
            except zlib.error as exc:
                problem = f"its gzip data is corrupt ({exc})"
                break
            if not d.eof:
                problem = "its gzip stream is cut off"
                break
            parts.append(out)
            pos = len(data) - len(d.unused_data)
            while pos < len(data) and data[pos] == 0:  # zero padding between members
                pos += 1
        data = b"".join(parts)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data[:exc.start].decode("utf-8")
        text = text[:text.rfind("\n") + 1]
        problem = problem or "it holds bytes that are not UTF-8 text"
    return text, problem


def read_rows_csv(path, *, strict: bool = True, digests: dict = None) -> tuple[dict, np.ndarray]:
    """(table, chunk id per row) from a rows file.

    ``strict``: any damage (a cut-off or corrupt gzip member — its CRC is checked —, a
    cut-off last line, a row whose field count differs from the header's, a value that
    does not parse) raises :class:`DamagedFile` naming it. Not strict (``--resume``, and
    reading a file whose journal lists its chunks): only whole gzip members that pass
    their CRC are read, a cut-off tail is dropped, and so is every row that has the
    wrong number of fields or a value that does not parse; the caller then checks each
    chunk's rows (count and checksum) against the journal. ``digests``: a dict filled
    with each chunk's :func:`chunk_digest` over the rows kept.
    """
    path = Path(path)
    text, problem = _read_text(path)
    if problem and strict:
        raise _damaged(path, problem)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        if strict:
            raise _damaged(path, f"its last line (line {len(lines)}) is cut off")
        lines.pop()
    if not lines:
        return empty_table(), np.array([], dtype=np.int64)
    try:
        parsed = list(csv.reader(lines))
    except csv.Error as exc:
        raise _damaged(path, f"it is not valid CSV ({exc})") from None
    if len(parsed) != len(lines):
        raise _damaged(path, "a field spans lines (it is not a phaze rows file)")
    header = parsed[0]
    missing = [c for c in COLUMN_NAMES if c not in header and c not in LATE_COLUMNS]
    if missing:
        raise ValueError(f"{path}: not a phaze search result (missing columns {', '.join(missing)})")
    pos = {name: header.index(name) for name in header}
    if digests is not None:
        digests["header"] = lines[0]  # what the journal's "header" is compared with
    rows, raw = [], []
    for i, row in enumerate(parsed[1:], start=2):
        if len(row) == len(header):
            rows.append(row)
            raw.append(lines[i - 1])
        elif strict:
            raise _damaged(path, f"line {i} has {len(row)} fields, the header has {len(header)}")
    table = _parse_rows(path, rows, pos, strict)
    if table is None:  # not strict: rows with a value that does not parse are dropped
        keep = [k for k, row in enumerate(rows) if _parse_rows(path, [row], pos, False)]
        rows, raw = [rows[k] for k in keep], [raw[k] for k in keep]
        table = _parse_rows(path, rows, pos, True)
    try:
        chunks = (np.array([row[pos["chunk"]] for row in rows], dtype=np.int64)
                  if "chunk" in pos and rows else np.full(len(rows), -1, dtype=np.int64))
    except (ValueError, OverflowError):
        raise _damaged(path, "column 'chunk' holds a value that is not an integer") from None
    if digests is not None and "chunk" in pos:
        by_chunk: dict = {}
        for cid, line in zip(chunks.tolist(), raw):
            by_chunk.setdefault(cid, []).append(line)
        digests.update({cid: chunk_digest(ls) for cid, ls in by_chunk.items()})
    return table, chunks


def _parse_rows(path, rows, pos, strict):
    """The columns of ``rows`` (lists of fields) as a table; a value that does not parse
    is a DamagedFile when ``strict``, else the result is None."""
    columns = list(zip(*rows)) if rows else [()] * len(pos)
    table = {}
    for name in COLUMN_NAMES:
        if name not in pos:  # a column newer than the file
            table[name] = np.full(len(rows), LATE_COLUMNS[name], dtype=COLUMN_DTYPES[name])
            continue
        try:
            table[name] = _parse_column(name, columns[pos[name]])
        except (ValueError, OverflowError):
            if not strict:
                return None
            raise _damaged(path, f"column {name!r} holds a value that is not a valid "
                                 f"{np.dtype(COLUMN_DTYPES[name]).name}") from None
    return table


def check_chunk_rows(chunks: dict, chunk_of_row: np.ndarray,
                     digests: dict = None) -> tuple[list, int, int]:
    """Chunks of the journal ``chunks`` whose rows in the rows file are missing, cut
    off, duplicated or changed: (their ids, rows expected, rows found) for those chunks.

    A chunk's entry records its row count as ``evaluated`` and, since issue 30, its
    rows' checksum as ``digest`` (:func:`chunk_digest`), compared with ``digests`` (each
    chunk's checksum over the rows read); an entry without a count (or with a count that
    is not a non-negative integer) counts as bad, one without a digest (older files) is
    checked by its count alone.
    """
    ids, counts = np.unique(chunk_of_row, return_counts=True)
    found = dict(zip(ids.tolist(), counts.tolist()))
    bad, expected, got = [], 0, 0
    for cid, facts in chunks.items():
        want = _spill.expected_rows(facts)   # the one rule _spill.load_journal reads too
        have = found.get(int(cid), 0)
        digest = facts.get("digest") if isinstance(facts, dict) else None
        changed = (digests is not None and digest is not None
                   and digests.get(int(cid), chunk_digest([])) != digest)
        if want is None or want != have or changed:
            bad.append(int(cid))
            expected += want or 0
            got += have
    return sorted(bad), expected, got


def _parse_column(name, texts) -> np.ndarray:
    """CSV field strings of column ``name`` → a numpy column of its dtype."""
    dt = COLUMN_DTYPES[name]
    if not texts:
        return np.array([], dtype=dt)
    if name == "recompute":  # a mode's name, or true/false in files written before the modes
        return _recompute_column(texts)
    if dt is np.bool_:
        return np.char.lower(np.array(texts, dtype=str)) == "true"
    if dt is np.int64:
        return np.array(texts, dtype=str).astype(np.int64)
    if dt is np.float64:
        return np.array(texts, dtype=str).astype(np.float64)
    return np.array(texts, dtype=object)


def parse_rows_lines(path, lines, header=ROWS_HEADER) -> dict:
    """A table of rows-file ``lines`` (each a CSV row ending in the chunk column) under
    ``header`` (columns it lacks read as their ``LATE_COLUMNS`` value); ``path`` names the
    file in a :class:`DamagedFile`."""
    pos = {name: i for i, name in enumerate(header.rstrip("\n").split(","))}
    return _parse_rows(path, list(csv.reader(lines)), pos, True)


def _atomic_write_text(path: Path, text: str) -> None:
    _atomic_write_bytes(path, text.encode())


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write, flush to disk, then rename over ``path``: readers see the old or the new file
    (``_spill.atomic_output``)."""
    with _spill.atomic_output(path) as f:
        f.write(data)


def _os_error(exc: OSError, what: str) -> OSError:
    """``exc`` (same errno, so the same OSError subclass) with one sentence saying what failed."""
    return OSError(exc.errno, f"{what} ({exc.strerror or exc})")


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (one of another user counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


class OutLock:
    """An advisory, exclusive ``fcntl.flock`` on ``PATH.lock``, held while a search
    writes ``PATH``.

    Why a file of its own: the rows file and the journal are replaced by rename
    (atomic updates), and a lock belongs to the replaced inode, not the name, so a
    lock on either would stop protecting the new file after the first update. The
    lock file is never replaced; it is removed on release, and a process that
    opened it just before the removal notices (the name no longer leads to the
    inode it locked) and tries again. The lock dies with its process (kill -9
    included), so a crashed run never blocks the next one: the file it leaves
    behind names its pid, and the next run says that process is gone and takes
    the file over. On a file system without ``flock`` (ENOLCK, EOPNOTSUPP) the pid
    alone decides: a live one holds the file, a dead one's is taken over. Where
    ``fcntl`` does not exist (Windows) there is no lock.
    """

    def __init__(self, path):
        self.path = Path(str(path) + ".lock")
        self.fd = None

    def acquire(self) -> None:
        """Take the lock, or ValueError in one sentence when another process holds it."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no advisory locks
            return
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise _os_error(exc, f"out: cannot create the lock file {self.path}") from None
            holder = os.read(fd, 64).decode(errors="replace").strip()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                # Held (EWOULDBLOCK), or a file system without flock (NFS without lockd:
                # ENOLCK, EOPNOTSUPP), where only the pid in the file can tell.
                held = exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
                if held or (holder.isdigit() and _pid_alive(int(holder))):
                    os.close(fd)
                    who = f" (process {holder})" if holder.isdigit() else ""
                    raise ValueError(f"out: {str(self.path)[:-5]} is being written by another "
                                     f"phaze search{who}; wait for it to end or choose another "
                                     f"--out") from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)  # the holder removed the file as we opened it: lock the new one
                continue
            if holder.isdigit() and int(holder) != os.getpid() and not _pid_alive(int(holder)):
                print(f"phaze search: out: {self.path.name} was left by process {holder}, which "
                      f"is no longer running (killed?); taking it over", file=sys.stderr)
            break
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def release(self) -> None:
        """Remove the lock file, then drop the lock (idempotent)."""
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


class Journal:
    """Chunk-by-chunk writer of a search's rows with resume (see module docstring).

    ``resume``: continue the sweep the journal records. ``force``: replace an existing
    result; without either, an existing file is an error (nothing is truncated). The
    lock on the file is taken first, so neither flag lets a second writer in. Call
    :meth:`close` when done (releases the lock).
    """

    def __init__(self, path, inputs_digest: str, *, resume: bool, force: bool = False):
        # Through a symlink: write the file it points to (a rename would replace the link).
        self.path = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
        self.format = file_format(self.path)
        self.rows_path = (self.path if self.format in (".csv", ".csv.gz")
                          else self.path.with_name(self.path.name + ".rows.csv.gz"))
        self.meta_path = self.path.with_name(self.path.name + ".meta.json")
        self.digest = inputs_digest
        self.chunks: dict = {}  # chunk id → small per-chunk facts (json-able)
        self.gz = str(self.rows_path).lower().endswith(".gz")
        # the rows file's segments (start byte, end byte, holds the header), in file order,
        # and the sorted spill files of a finish under way (``_spill``)
        self.segments: list = []
        self.spill_dir = self.path.with_name(self.path.name + ".parts")
        self.spills: list = []
        self.spilled: dict = {}
        # start bytes of segments this run appended with their rows in key order
        self.sorted_starts: set = set()
        # --resume of a file of an older format: read from here, written again (``_spill``)
        self.legacy_path = None
        self.legacy_header = None
        parent = self.path.parent
        if not parent.exists():  # an OS error (exit 1), as a read-only folder is
            raise OutputError(f"out: cannot write {str(self.path)!r}: its folder "
                              f"{str(parent)!r} does not exist", errno.ENOENT)
        if not parent.is_dir():
            raise ValueError(f"out: {str(parent)!r} is not a folder")
        if self.path.is_dir():
            raise ValueError(f"out: {str(self.path)!r} is a folder; give a file name")
        self.lock = OutLock(self.path)
        self.lock.acquire()
        try:
            existing = [p for p in (self.path, self.rows_path, self.meta_path) if p.exists()]
            if resume and self.meta_path.exists():
                self._load()
            elif existing and not force:
                if resume:
                    raise ValueError(f"resume: {self.meta_path.name} is missing, so the rows in "
                                     f"{self.rows_path} cannot be checked; pass force to start "
                                     f"again (--force) or choose another out")
                raise ValueError(f"out: {existing[0]} already exists; continue it with resume "
                                 f"(--resume) or replace it with force (--force)")
            else:
                self._start()
        except BaseException:
            self.lock.release()
            raise

    def close(self) -> None:
        """Release the lock on the result file (the journal stays as written)."""
        self.lock.release()

    # -- start / resume -----------------------------------------------------
    def _start(self):
        try:
            if self.spill_dir.is_dir():  # spill files of a replaced (--force) run
                for p in self.spill_dir.iterdir():
                    p.unlink()
                self.spill_dir.rmdir()
            self._write_rows_file(empty_table(), np.array([], dtype=np.int64))
            self.segments = [(0, os.path.getsize(self.rows_path), True)]
            self._write_meta({})
        except OSError as exc:
            raise _os_error(exc, f"out: cannot write {self.rows_path}") from None

    def _load(self):
        """``--resume``: keep the chunks whose rows are whole (``_spill.load_journal``, one
        chunk's rows in memory at a time); :meth:`iter_previous` gives their rows."""
        try:
            meta = json.loads(self.meta_path.read_text())
        except (OSError, ValueError, RecursionError):
            raise ValueError(f"resume: {self.meta_path} is unreadable; start again with --force "
                             f"or choose another --out") from None
        if not isinstance(meta, dict) or meta.get("inputs_hash") != self.digest:
            raise ValueError(f"resume: {self.path} was written by a search with different inputs; "
                             f"use the same arguments or another --out")
        try:
            self.chunks = {int(k): v for k, v in (meta.get("chunks") or {}).items()}
        except (AttributeError, TypeError, ValueError, OverflowError):
            raise ValueError(f"resume: {self.meta_path} is damaged (its 'chunks' must map chunk "
                             f"numbers to their facts); start again with --force") from None
        n_listed = len(self.chunks)
        try:
            bad, expected, found, _ = _spill.load_journal(self, meta)
            if bad:
                # Never a silent partial result: these chunks are computed again.
                print(f"phaze search: resume: {len(bad):,} of the {n_listed:,} chunks listed "
                      f"in {self.meta_path.name} have {found:,} rows in {self.rows_path.name} "
                      f"instead of {expected:,} or rows that changed (missing, cut off, "
                      f"duplicated or damaged); they are computed again", file=sys.stderr)
            self._write_meta({})
        except OSError as exc:
            raise _os_error(exc, f"out: cannot write {self.rows_path}") from None

    def iter_previous(self):
        """(chunk id, table) of each chunk kept by ``--resume``, one at a time."""
        if not self.chunks:
            return iter(())
        return _spill.iter_previous(self)

    def parse_lines(self, lines, header=ROWS_HEADER) -> dict:
        """:func:`parse_rows_lines` of this journal's rows file."""
        return parse_rows_lines(self.rows_path, lines, header)

    def write_meta_spilled(self) -> None:
        """Record the spill files of a finish under way (``_spill.finish_rows``)."""
        self._write_meta({})

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
    def append(self, chunk_id: int, table: dict, facts: dict, in_order: bool = False) -> None:
        """Append one chunk's rows (flushed to disk), then record the chunk as done.

        An OSError (full disk, file gone read-only) names the chunk and says the
        chunks before it are kept: the journal does not list this one, so
        ``--resume`` drops whatever part of its rows reached the file.
        """
        text = table_csv(table, header=False, extra={"chunk": int(chunk_id)})
        facts = dict(facts, digest=chunk_digest(text.splitlines(keepends=True)))
        data = text.encode()
        if str(self.rows_path).lower().endswith(".gz"):
            data = gzip.compress(data, mtime=0)
        try:
            start = os.path.getsize(self.rows_path)
            self._append_bytes(data)
            self.segments.append((start, start + len(data), False))
            if in_order:  # rows sorted by point (the finish need not sort them again)
                self.sorted_starts.add(start)
            self.chunks[int(chunk_id)] = json_safe(facts)
            self._write_meta({})
        except OSError as exc:
            self.chunks.pop(int(chunk_id), None)
            raise _os_error(exc, f"out: cannot write chunk {chunk_id}'s rows to {self.rows_path}; "
                                 f"the {len(self.chunks):,} chunks before it are kept (continue "
                                 f"with --resume)") from None

    def _append_bytes(self, data: bytes) -> None:
        """Append ``data`` to the rows file and flush it to disk (tests replace this)."""
        with open(self.rows_path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def _write_meta(self, extra: dict) -> None:
        meta = {"inputs_hash": self.digest, "format": self.format,
                "rows_file": self.rows_path.name, "header": ROWS_HEADER,
                "chunks": {str(k): self.chunks[k] for k in sorted(self.chunks)}}
        if self.spilled:
            meta["spilled"] = {str(k): self.spilled[k] for k in sorted(self.spilled)}
        meta.update(extra)
        _atomic_write_text(self.meta_path, json.dumps(json_safe(meta), indent=1))

    def finish(self, summary: dict, model_names=None) -> None:
        """Record the run's summary (metadata, best, baselines) once every chunk is done.

        ``model_names`` (the search's models, in order): the rows file is first rewritten
        sorted by point (``_spill.finish_rows``: in place, about one chunk's size of free
        disk), so its order does not depend on which chunk finished first.
        """
        try:
            if model_names is not None:
                seg = max([e - s for s, e, _ in self.segments] + [0])
                need = 2 * seg + (1 << 20)
                free = _spill.free_bytes(self.path.parent)
                if free < need:
                    raise OSError(errno.ENOSPC, f"{free:,} bytes free, {need:,} needed")
                _spill.finish_rows(self, list(model_names))
            self._write_meta({"complete": True, "summary": summary})
        except _spill.MergeFailed as exc:
            raise _os_error(exc, f"out: cannot write the sorted rows to {self.rows_path}: the "
                                 f"final merge failed after consuming the spill files of "
                                 f"{exc.lost:,} of the {len(self.chunks):,} chunks; --resume "
                                 f"keeps the others and computes those again") from None
        except OSError as exc:
            raise _os_error(exc, f"out: cannot write the sorted rows to {self.rows_path}; every "
                                 f"one of the {len(self.chunks):,} chunks is done and kept: "
                                 f"make room for about two chunks' rows and finish with "
                                 f"--resume") from None


def save_json(path, summary: dict, top_rows: dict) -> None:
    """A .json result: the summary (metadata, best, baselines, Pareto front) and the top rows."""
    doc = dict(summary)
    doc["top_rows"] = [dict(zip(top_rows, vals)) for vals in zip(*top_rows.values())]
    _atomic_write_text(Path(path), json.dumps(json_safe(doc), indent=1))


def table_digest(table: dict) -> str:
    """BLAKE2b (16 bytes) of a table's CSV text (:func:`table_csv`, header included): the
    checksum a .parquet result keeps in its metadata (key 'phaze_digest')."""
    return hashlib.blake2b(table_csv(table, header=True).encode(), digest_size=16).hexdigest()


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError("saving .parquet needs pyarrow: pip install 'phaze[parquet]'") from None
    return pa, pq


def _arrow_table(pa, table: dict):
    arrays = {}
    for name, dt in TABLE_COLUMNS:
        col = np.asarray(table[name])
        arrays[name] = pa.array(col.tolist() if dt is object else col)
    return pa.table(arrays)


def _parquet_metadata(summary: dict, digest: str) -> dict:
    return {b"phaze": json.dumps(json_safe(summary)).encode(), b"phaze_digest": digest.encode()}


def save_parquet(path, table: dict, summary: dict) -> None:
    """A .parquet result: every row, the summary as JSON in the schema metadata (key 'phaze')."""
    pa, pq = _pyarrow()
    tab = _arrow_table(pa, table).replace_schema_metadata(
        _parquet_metadata(summary, table_digest(table)))
    tmp = Path(str(path) + ".tmp")
    pq.write_table(tab, tmp)
    os.replace(tmp, path)


#: Rows per batch (one parquet row group) when a search's sorted rows file becomes its
#: .parquet result: the memory of the conversion, whatever the sweep's size.
PARQUET_BATCH_ROWS = 1 << 14


def _rows_lines(rows_path):
    """(header, the other lines) of a search's sorted rows file (``_spill.spill_lines``:
    cut at newlines only); ``ValueError`` unless its header is today's."""
    lines = _spill.spill_lines(Path(rows_path), str(rows_path).lower().endswith(".gz"))
    header = next(lines, "")
    if header != ROWS_HEADER:
        raise ValueError(f"{rows_path}: not a rows file of this phaze (its header differs)")
    return header, lines


def _rows_digest(rows_path) -> str:
    """:func:`table_digest` of the table in a search's sorted rows file, from its lines: each
    is :func:`table_csv`'s line of the row followed by the chunk column (an integer, never
    quoted), which is cut off."""
    _, lines = _rows_lines(rows_path)
    h = hashlib.blake2b(table_csv(empty_table(), header=True).encode(), digest_size=16)
    for line in lines:
        h.update(line[:line.rindex(",")].encode() + b"\n")
    return h.hexdigest()


def _rows_batches(rows_path, batch_rows):
    """The tables of a search's sorted rows file, ``batch_rows`` rows at a time
    (:func:`parse_rows_lines`); one empty table when it holds no row."""
    header, lines = _rows_lines(rows_path)
    batch, any_rows = [], False
    for line in lines:
        batch.append(line)
        if len(batch) == batch_rows:
            yield parse_rows_lines(rows_path, batch, header)
            batch, any_rows = [], True
    if batch or not any_rows:
        yield parse_rows_lines(rows_path, batch, header) if batch else empty_table()


def save_parquet_rows(path, rows_path, summary: dict, *,
                      batch_rows: int = PARQUET_BATCH_ROWS) -> None:
    """:func:`save_parquet` of the table in a search's sorted rows file without holding
    it: one pass for the digest (the same :func:`table_digest` of the whole table, from the
    file's lines: :func:`_rows_digest`), one writing a row group per ``batch_rows`` rows."""
    pa, pq = _pyarrow()
    meta = _parquet_metadata(summary, _rows_digest(rows_path))
    tmp = Path(str(path) + ".tmp")
    writer = schema = None
    try:
        for tab in _rows_batches(rows_path, batch_rows):
            t = _arrow_table(pa, tab)
            if writer is None:
                schema = t.schema.with_metadata(meta)
                writer = pq.ParquetWriter(tmp, schema)
            writer.write_table(t.replace_schema_metadata(meta).cast(schema))
    finally:
        if writer is not None:
            writer.close()
    os.replace(tmp, path)


def save_csv(path, table: dict, summary: dict = None) -> None:
    """A .csv / .csv.gz result: every row, with a header (no chunk column); ``summary``
    (metadata, best, baselines, Pareto front) goes to ``PATH.meta.json`` next to it, as a
    search's own result file has it, so :func:`load_table` gives both back."""
    data = table_csv(table, header=True).encode()
    if str(path).lower().endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    _atomic_write_bytes(Path(path), data)
    if summary is not None:
        meta_path = Path(path).with_name(Path(path).name + ".meta.json")
        # No 'chunks': this is a finished table, not a journal a search could resume.
        meta = {"format": file_format(path), "complete": True, "summary": summary}
        _atomic_write_text(meta_path, json.dumps(json_safe(meta), indent=1))


def load_table(path) -> tuple[dict, dict]:
    """(table, summary) from a result file of any supported format (summary may be empty).

    A damaged file is a :class:`DamagedFile` naming what is wrong. A ``.csv``/``.csv.gz``
    with a journal next to it (a search's own rows file) holds exactly the rows of the
    chunks the journal lists: rows of a chunk cut off by an interrupted run are left
    out, and any listed chunk with missing or extra rows makes the file damaged.
    """
    path = Path(path)
    fmt = file_format(path)
    if not path.exists():
        raise FileNotFoundError(f"result file {str(path)!r} does not exist")
    if path.is_dir():
        raise ValueError(f"{str(path)!r} is a folder, not a result file")
    meta_path = path.with_name(path.name + ".meta.json")
    meta = {}
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
        except (ValueError, RecursionError):
            raise _damaged(meta_path, "it is not valid JSON") from None
        if not isinstance(meta, dict):
            raise _damaged(meta_path, "it must hold a JSON object")
    summary = meta.get("summary") or {}
    if fmt in (".csv", ".csv.gz"):
        chunks = meta.get("chunks")
        if "chunks" in meta and not isinstance(chunks, dict):
            raise _damaged(meta_path, "its 'chunks' must map chunk numbers to facts")
        # The journal next to the file is its own whatever the names (renaming the pair
        # keeps the check): its chunks' counts and checksums bind it to the rows' content.
        if isinstance(chunks, dict) and meta.get("format", fmt) in (".csv", ".csv.gz"):
            digests: dict = {}
            table, chunk_of_row = read_rows_csv(path, strict=False, digests=digests)
            try:
                listed = {int(k): v for k, v in chunks.items()}
            except (TypeError, ValueError, OverflowError):
                raise _damaged(meta_path, "its 'chunks' must map chunk numbers to facts") from None
            if meta.get("header") not in (None, digests.get("header", meta.get("header"))):
                raise _damaged(path, f"its header differs from the one its {meta_path.name} "
                                     f"records (continue the search with --resume to compute "
                                     f"its chunks again, or start again with --force)")
            bad, expected, found = check_chunk_rows(listed, chunk_of_row, digests)
            if bad:
                raise _damaged(path, f"{len(bad):,} of the chunks its {meta_path.name} lists have "
                                     f"{found:,} rows instead of {expected:,} or rows that "
                                     f"changed (continue the search with --resume to compute "
                                     f"them again, or start again with --force)")
            keep = np.isin(chunk_of_row, np.array(sorted(listed), dtype=np.int64))
            return take(table, keep), summary
        table, _ = read_rows_csv(path)
        return table, summary
    if fmt == ".json":
        try:
            doc = json.loads(path.read_text())
        except (ValueError, RecursionError):
            raise ValueError(f"{path}: not valid JSON") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("top_rows", []), list):
            raise _damaged(path, "it must hold a JSON object with a list 'top_rows'")
        rows = doc.pop("top_rows", [])
        try:
            # A column newer than the file (absent) or not recorded (null) reads as its
            # LATE_COLUMNS value; elsewhere null is an infinite float (json_safe wrote it).
            table = {name: np.array([LATE_COLUMNS[name]
                                     if name in LATE_COLUMNS and r.get(name) is None
                                     else _none_inf(r.get(name), dt) for r in rows], dtype=dt)
                     for name, dt in TABLE_COLUMNS}
            table["recompute"] = _recompute_column(table["recompute"])
        except (AttributeError, TypeError, ValueError, OverflowError):
            raise _damaged(path, "its 'top_rows' hold values of the wrong type") from None
        return table, doc
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError("reading .parquet needs pyarrow: pip install 'phaze[parquet]'") from None
    try:
        tab = pq.read_table(path)
        table = {name: (np.array(tab.column(name).to_pylist(), dtype=dt)
                        if name in tab.column_names or name not in LATE_COLUMNS
                        else np.full(tab.num_rows, LATE_COLUMNS[name], dtype=dt))
                 for name, dt in TABLE_COLUMNS}
        table["recompute"] = _recompute_column(table["recompute"])
        meta = tab.schema.metadata or {}
        if b"phaze" in meta:
            summary = json.loads(meta[b"phaze"])
    except (KeyError, TypeError, ValueError, OverflowError, RecursionError, UnicodeDecodeError,
            OSError, NotImplementedError, _arrow_error()) as exc:
        # pyarrow's ArrowInvalid is a ValueError; a missing column is a KeyError.
        raise _damaged(path, f"it is not a readable phaze parquet result ({exc})") from None
    want = meta.get(b"phaze_digest")
    if want is not None and table_digest(table).encode() != want:
        raise _damaged(path, "its rows do not match the checksum in its metadata (values "
                             "changed)")
    return table, summary


def _arrow_error() -> type:
    """pyarrow's base exception (a damaged file can raise any of its kinds)."""
    import pyarrow as pa

    return getattr(pa, "ArrowException", ValueError)


def _recompute_column(values) -> np.ndarray:
    """A recompute column as mode names (``_table.recompute_mode``: booleans of older
    files become "full"/"none"); ValueError on anything else."""
    return np.array([recompute_mode(v) for v in np.asarray(values, dtype=object).tolist()],
                    dtype=object)


def _none_inf(v, dt):
    """JSON null back to inf in a float column (json_safe wrote inf as null)."""
    if v is None and dt is np.float64:
        return math.inf
    return v
