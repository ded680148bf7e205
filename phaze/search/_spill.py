"""The sorted rows file of a sweep, made in place from chunk spill files (issue 30).

``_files.Journal`` appends each chunk's rows to the rows file in the order chunks
finish. :func:`finish_rows` rewrites it sorted by point: the rows file's segments, last
first, become spill files sorted by point, one per chunk and model (the journal lists
them before the rows file is cut back behind them), then :func:`merge_spills` merges
them into the final file, deleting each once consumed, so finishing needs about one
chunk's size of free disk beyond the files. :func:`load_journal` checks a journal for
``--resume`` in one streaming pass, one chunk's lines held at a time.
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import heapq
import os
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path

from ._models import RECOMPUTE_MODES
from ._table import COLUMN_NAMES

#: Positions of the sort key's fields in a rows-file line: model, arch_id, microbatch,
#: hbm_gib, recompute (the order main's lexsort gives).
_KEY_POS = tuple(COLUMN_NAMES.index(n) for n in ("model", "arch_id", "microbatch",
                                                  "hbm_gib", "recompute"))
_RC_RANK = {m: i for i, m in enumerate(RECOMPUTE_MODES)}

#: The header line of a search's rows file (recorded in its journal: a changed header,
#: e.g. a renamed column, would otherwise re-map values the chunk checksums vouch for).
ROWS_HEADER = ",".join(list(COLUMN_NAMES) + ["chunk"]) + "\n"


def chunk_digest(lines) -> str:
    """A chunk's checksum: BLAKE2b (16 bytes) of its rows' CSV lines (each ending in a
    newline, the ``chunk`` column included) sorted, so it depends on the rows and not on
    their order in the file (the finished file is rewritten sorted by point)."""
    h = hashlib.blake2b(digest_size=16)
    for line in sorted(lines):
        h.update(line.encode())
    return h.hexdigest()


def line_key(line: str, model_index: dict) -> tuple:
    """The sort key of one rows-file line: (model's index, arch id, microbatch, HBM GiB,
    recomputation rank), the key the finished file is ordered by."""
    f = next(csv.reader((line,)))
    m, a, mb, h, rc = (f[i] for i in _KEY_POS)
    return (model_index.get(m, len(model_index)), int(a), int(mb), float(h),
            _RC_RANK.get(rc, len(_RC_RANK)))


def line_chunk(line: str) -> int:
    """The chunk id of a rows-file line (its last field)."""
    return int(line.rstrip("\n").rsplit(",", 1)[1])


@contextmanager
def atomic_output(path: Path):
    """A binary file written beside ``path`` (``PATH.tmp``), flushed to disk and renamed
    over ``path`` when the block ends: readers see the old or the new file; a full disk or
    Ctrl-C mid-write leaves the old one as it was and no stray ``.tmp``."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def spill_lines(path: Path, gz: bool):
    """The lines of a rows or spill file (one gzip stream or plain), each cut after a
    newline only (a field may hold other line breaks)."""
    opener = gzip.open if gz else open
    with opener(path, "rb") as f:  # binary: cut at newlines only
        for raw in f:
            yield raw.decode("utf-8")


# -- the rows file: segments, spills, merge ------------------------------------------
def _lines(text: str) -> list:
    """``text`` cut after each newline (only there: a field may hold other line breaks)."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def read_segment(path: Path, start: int, end: int, gz: bool) -> list:
    """The text lines of bytes ``start`` … ``end`` of a rows file (one gzip member when
    ``gz``), each ending in a newline."""
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    if gz:
        data = gzip.decompress(data)
    return _lines(data.decode("utf-8"))


def encode(text: str, gz: bool) -> bytes:
    """``text`` as a rows or spill file stores it: UTF-8, as one gzip member
    (``mtime=0``: the same bytes every run) when ``gz``."""
    data = text.encode()
    return gzip.compress(data, mtime=0) if gz else data


def _synced_truncate(path: Path, size: int, tail: bytes = b"") -> None:
    """Cut ``path`` to ``size`` bytes, append ``tail`` and flush it to disk."""
    with open(path, "r+b") as f:
        f.truncate(size)
        if tail:
            f.seek(size)
            f.write(tail)
        f.flush()
        os.fsync(f.fileno())


def spill_name(cid: int, model: int, seq: int, gz: bool) -> str:
    return f"c{cid:06d}.m{model:03d}.s{seq:06d}.csv" + (".gz" if gz else "")


def write_spill(folder: Path, name: str, lines: list, gz: bool) -> None:
    """One sorted spill file, flushed to disk."""
    data = encode("".join(lines), gz)
    with open(folder / name, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _model_of(line: str) -> str:
    """A rows-file line's model name (its first field)."""
    if line.startswith('"'):
        return next(csv.reader((line,)))[0]
    return line.split(",", 1)[0]


def split_lines(lines, model_index, presorted=False) -> dict:
    """Lines grouped by (chunk id, model index), each group sorted by :func:`line_key`;
    ``presorted``: the lines are in key order already (``Journal.append`` of this run),
    only grouped."""
    groups: dict = {}
    if presorted:
        for line in lines:
            mi = model_index.get(_model_of(line), len(model_index))
            groups.setdefault((line_chunk(line), mi), []).append(line)
        return groups
    for line in lines:
        key = line_key(line, model_index)
        groups.setdefault((line_chunk(line), key[0]), []).append((key, line))
    return {g: [ln for _, ln in sorted(items)] for g, items in groups.items()}


class _Sink:
    """The merged output: plain text, or one gzip stream (``gzip.compress(…, mtime=0)``'s
    bytes, written as they come)."""

    def __init__(self, path: Path, gz: bool):
        self.f = open(path, "wb")
        self.z = zlib.compressobj(9, zlib.DEFLATED, 31) if gz else None
        self.buf: list = []
        self.size = 0

    def write(self, text: str) -> None:
        self.buf.append(text)
        self.size += len(text)
        if self.size >= 1 << 20:
            self.flush()

    def flush(self) -> None:
        data = "".join(self.buf).encode()
        self.buf, self.size = [], 0
        self.f.write(self.z.compress(data) if self.z is not None else data)

    def close(self) -> None:
        self.flush()
        if self.z is not None:
            self.f.write(self.z.flush())
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()


#: Counted by :func:`merge_spills`: the most spill files open at once (tests).
MERGE_STATS = {"max_open": 0}


def merge_spills(spills, out_path: Path, header: str, gz: bool, model_index) -> None:
    """Write ``header`` then every line of the sorted ``spills`` ((first key, path) pairs,
    or (first key, path, last key)) in key order to ``out_path``, deleting each spill once
    consumed. A spill is opened only when its first key is reached, so the files open at
    once are those whose key ranges overlap (one for a sweep whose arch ids grow with the
    row number); a spill alone in the heap whose last key comes before the next spill's
    first is copied as it is, its lines not parsed."""
    pending = sorted(spills, key=lambda s: (s[0], str(s[1])))
    sink = _Sink(out_path, gz)
    heap, iters, paths, last = [], {}, {}, {}
    i, seq = 0, 0
    MERGE_STATS["max_open"] = 0
    try:
        sink.write(header)
        while heap or i < len(pending):
            while i < len(pending) and (not heap or pending[i][0] <= heap[0][0]):
                path = Path(pending[i][1])
                it = spill_lines(path, gz)
                line = next(it, None)
                if line is not None:
                    iters[seq], paths[seq] = it, path
                    last[seq] = tuple(pending[i][2]) if len(pending[i]) > 2 else None
                    heapq.heappush(heap, (line_key(line, model_index), seq, line))
                    seq += 1
                else:
                    path.unlink()
                i += 1
                MERGE_STATS["max_open"] = max(MERGE_STATS["max_open"], len(iters))
            _, s, line = heapq.heappop(heap)
            sink.write(line)
            if (not heap and last[s] is not None
                    and (i >= len(pending) or tuple(pending[i][0]) > last[s])):
                for rest in iters[s]:  # nothing else can come before its remaining lines
                    sink.write(rest)
                iters.pop(s).close()
                paths.pop(s).unlink()
                continue
            nxt = next(iters[s], None)
            if nxt is None:
                iters.pop(s).close()
                paths.pop(s).unlink()
            else:
                heapq.heappush(heap, (line_key(nxt, model_index), s, nxt))
        sink.close()
    except BaseException:
        for it in iters.values():
            it.close()
        try:
            sink.f.close()
        except OSError:
            pass
        raise


def iter_segments(path: Path, gz: bool, problems: list):
    """The rows file's segments, first to last: (start byte, end byte, lines, header?).

    A plain file's segment is a run of lines of one chunk (the header its own); a gzip
    file's is one member (a chunk's rows as ``Journal.append`` wrote them, the header's,
    or — in a file an older phaze rewrote — several chunks). Memory: one segment. A
    cut-off or corrupt tail ends the segments, and ``problems`` gets one sentence."""
    first = True
    if not gz:
        with open(path, "rb") as f:
            pos, run, run_start, run_cid = 0, [], 0, None
            while True:
                raw = f.readline()
                if not raw:
                    break
                if not raw.endswith(b"\n"):
                    problems.append("its last line is cut off")
                    break
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    problems.append("it holds bytes that are not UTF-8 text")
                    break
                if first:
                    yield 0, len(raw), [line], True
                    first, pos = False, len(raw)
                    run_start = pos
                    continue
                try:
                    cid = line_chunk(line)
                except (ValueError, IndexError):
                    cid = None
                if run and cid != run_cid:
                    yield run_start, pos, run, False
                    run, run_start = [], pos
                run_cid = cid
                run.append(line)
                pos += len(raw)
            if run:
                yield run_start, pos, run, False
        return
    with open(path, "rb") as f:
        pos, start = 0, 0          # bytes of the file consumed; start of the member
        d, parts, pending = None, [], b""
        while True:
            piece = pending or f.read(1 << 20)
            pending = b""
            if not piece:
                break
            if d is None:
                skip = len(piece) - len(piece.lstrip(b"\0"))  # zero padding between members
                pos += skip
                piece = piece[skip:]
                if not piece:
                    continue
                start, d, parts = pos, zlib.decompressobj(wbits=31), []
            try:
                parts.append(d.decompress(piece))
            except zlib.error as exc:
                problems.append(f"its gzip data is corrupt ({exc})")
                return
            used = len(piece) - len(d.unused_data)
            pos += used
            if d.eof:
                pending = d.unused_data
                try:
                    lines = _lines(b"".join(parts).decode("utf-8"))
                except UnicodeDecodeError:
                    problems.append("it holds bytes that are not UTF-8 text")
                    return
                if lines and not lines[-1].endswith("\n"):
                    problems.append("its last line is cut off")
                    return
                yield start, pos, lines, first
                first, d = False, None
        if d is not None:
            problems.append("its gzip stream is cut off")


# -- the journal's rows file (``_files.Journal`` delegates here) ------------------------
def _digest_ok(facts, lines) -> bool:
    want = facts.get("evaluated") if isinstance(facts, dict) else None
    if isinstance(want, bool) or not isinstance(want, int) or want != len(lines):
        return False
    digest = facts.get("digest")
    return digest is None or chunk_digest(lines) == digest


def expected_rows(facts):
    """A journal entry's row count (``evaluated``), None when it is not a count >= 0."""
    want = facts.get("evaluated") if isinstance(facts, dict) else None
    return want if isinstance(want, int) and not isinstance(want, bool) and want >= 0 else None


def load_journal(j, meta) -> tuple:
    """Check a journal's rows (``--resume``) in one pass over the rows file and the spill
    files of a finish that did not end, holding one chunk's lines at a time: keep the
    chunks whose rows match their count and checksum, drop the others from ``j.chunks``
    (they are computed again), cut the rows file back to its good segments (a rewrite only
    when a bad segment lies between good ones) and record the segments and spills.
    Returns (bad chunk ids, rows expected of them, rows found of them, header seen)."""
    gz = j.gz
    bad: set = set()
    expected = found = 0
    # spill files of an interrupted finish: chunk → [[name, first key], ...]
    j.spills, j.spilled = [], {}
    listed = meta.get("spilled") if isinstance(meta.get("spilled"), dict) else {}
    keep_names = set()
    for key, files in listed.items():
        try:
            cid = int(key)
            names = [(str(f[0]), tuple(f[1]), tuple(f[2]) if len(f) > 2 else None)
                     for f in files]
        except (TypeError, ValueError):
            continue
        if cid not in j.chunks:
            continue
        try:
            lines = [ln for n, _, _ in names for ln in spill_lines(j.spill_dir / n, gz)]
        except (OSError, EOFError, zlib.error, UnicodeDecodeError):
            lines = None
        if lines is not None and _digest_ok(j.chunks[cid], lines):
            j.spilled[cid] = [[n, list(k)] + ([list(e)] if e else []) for n, k, e in names]
            j.spills += [(k, j.spill_dir / n) + ((e,) if e else ()) for n, k, e in names]
            keep_names.update(n for n, _, _ in names)
        else:
            bad.add(cid)
            expected += expected_rows(j.chunks[cid]) or 0
            found += len(lines or [])
    if j.spill_dir.exists():
        for p in j.spill_dir.iterdir():
            if p.name not in keep_names:
                p.unlink()
    # the rows file: pass 1, which chunks are whole
    problems: list = []
    pending: dict = {}
    # a chunk with no rows (every point pruned) is whole from the start
    done = {c for c, f in j.chunks.items() if c not in j.spilled and expected_rows(f) == 0}
    header = None
    segs = []
    if j.rows_path.exists():
        for start, end, lines, has_header in iter_segments(j.rows_path, gz, problems):
            if has_header:
                header, lines = lines[0], lines[1:]
            cids = set()
            for line in lines:
                try:
                    cid = line_chunk(line)
                except (ValueError, IndexError):
                    cids.add(None)
                    continue
                cids.add(cid)
                if cid in j.spilled or cid not in j.chunks:
                    continue
                if cid in done:
                    bad.add(cid)  # rows after the chunk was whole: duplicated
                    continue
                pending.setdefault(cid, []).append(line)
                want = expected_rows(j.chunks[cid])
                if want is not None and len(pending[cid]) >= want:
                    lines_c = pending.pop(cid)
                    done.add(cid)
                    if not _digest_ok(j.chunks[cid], lines_c):
                        bad.add(cid)
                    found_c = len(lines_c)
                    if cid in bad:
                        found += found_c
            segs.append((start, end, cids, has_header))
    legacy = (header is not None and header != ROWS_HEADER and meta.get("header") is None
              and _legacy_header(header))
    if header is not None and header != ROWS_HEADER and not legacy:
        print(f"phaze search: resume: the header of {j.rows_path.name} differs from the one "
              f"this phaze writes; every chunk is computed again", file=sys.stderr)
        bad.update(c for c in j.chunks if c not in j.spilled)
    for cid, lines_c in pending.items():
        bad.add(cid)
        found += len(lines_c)
    for cid in list(j.chunks):
        if cid not in j.spilled and cid not in done and cid not in bad:
            bad.add(cid)
    for cid in bad:
        expected += expected_rows(j.chunks.get(cid, {})) or 0
        j.chunks.pop(cid, None)
    good = set(j.chunks) - set(j.spilled)
    # keep the longest run of segments holding only good chunks' rows; rewrite if any good
    # chunk lies beyond it
    cut, covered = 0, set()
    header_ok = header == ROWS_HEADER
    for start, end, cids, has_header in segs:
        if has_header and not header_ok:
            break
        if not cids <= good:
            break
        cut, covered = end, covered | cids
    j.segments = []
    if legacy:
        # a file written before some columns existed (its journal records no header): its
        # chunks are read from it as it is and written again in today's format
        # (iter_previous; the sweep fills the new columns), one chunk at a time
        j.legacy_path = j.rows_path.with_name(j.rows_path.name + ".legacy")
        os.replace(j.rows_path, j.legacy_path)
        j.legacy_header = header
        with open(j.rows_path, "wb") as f:
            f.write(encode(ROWS_HEADER, gz))
            f.flush()
            os.fsync(f.fileno())
        j.segments = [(0, os.path.getsize(j.rows_path), True)]
    elif header_ok and covered >= good:
        segs_kept = [s for s in segs if s[1] <= cut]
        if os.path.getsize(j.rows_path) != cut:
            _synced_truncate(j.rows_path, cut)
        j.segments = [(s, e, has_h) for s, e, _, has_h in segs_kept]
    else:
        _rewrite(j, good)
    return sorted(bad), expected, found, header


def _legacy_header(header: str) -> bool:
    """Whether ``header`` is a rows header of an older phaze: today's columns less some
    added since (``_table.LATE_COLUMNS``), with the chunk column."""
    from ._table import LATE_COLUMNS

    cols = header.rstrip("\n").split(",")
    return ("chunk" in cols and set(cols) <= set(COLUMN_NAMES) | {"chunk"}
            and set(COLUMN_NAMES) - set(cols) <= set(LATE_COLUMNS))


def _rewrite(j, good) -> None:
    """Rewrite the rows file with the rows of chunks ``good`` alone (one segment per old
    segment: a copy, so this needs the kept rows' size free; only for a file damaged in
    the middle)."""
    segments = []
    problems: list = []
    with atomic_output(j.rows_path) as out:
        out.write(encode(ROWS_HEADER, j.gz))
        segments.append((0, out.tell(), True))
        if j.rows_path.exists():
            for _, _, lines, has_header in iter_segments(j.rows_path, j.gz, problems):
                keep = [ln for ln in (lines[1:] if has_header else lines)
                        if _safe_chunk(ln) in good]
                if keep:
                    start = out.tell()
                    out.write(encode("".join(keep), j.gz))
                    segments.append((start, out.tell(), False))
    j.segments = segments


def _safe_chunk(line):
    try:
        return line_chunk(line)
    except (ValueError, IndexError):
        return None


def iter_previous(j):
    """(chunk id, table) of every chunk a resumed journal keeps, from the rows file and the
    spill files, one chunk at a time (a chunk's rows complete when its count is reached)."""
    table_of = j.parse_lines

    for cid, files in sorted(j.spilled.items()):
        lines = [ln for f in files for ln in spill_lines(j.spill_dir / f[0], j.gz)]
        yield cid, table_of(lines)
    pending: dict = {}
    source = j.rows_path
    if j.legacy_path is not None:
        source, header = j.legacy_path, j.legacy_header

        def table_of(lines):  # noqa: F811 - the legacy file's own columns
            return j.parse_lines(lines, header)
    for _, _, lines, has_header in iter_segments(source, j.gz, []):
        for line in (lines[1:] if has_header else lines):
            cid = line_chunk(line)
            if cid not in j.chunks or cid in j.spilled:
                continue
            pending.setdefault(cid, []).append(line)
            if len(pending[cid]) == expected_rows(j.chunks[cid]):
                yield cid, table_of(pending.pop(cid))
    if j.legacy_path is not None:
        j.legacy_path.unlink()  # every kept chunk is in the rows file again (the caller's)
        j.legacy_path = None


class MergeFailed(OSError):
    """The final merge failed after consuming (deleting) the spill files of ``lost`` chunks."""

    def __init__(self, errno_, strerror, lost):
        super().__init__(errno_, strerror)
        self.lost = lost


def free_bytes(folder) -> int:
    """Bytes free to this user on the file system of ``folder``."""
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def finish_rows(j, model_names) -> None:
    """Rewrite the journal's rows file sorted by point, in place (module docstring): the
    segments, last first, become sorted spill files (the journal lists them before the
    rows file is cut back), then the spills are merged into the rows file."""
    index = {n: i for i, n in enumerate(model_names)}
    gz = j.gz
    j.spill_dir.mkdir(exist_ok=True)
    seq = 0
    while j.segments:
        start, end, has_header = j.segments[-1]
        lines = read_segment(j.rows_path, start, end, gz)
        if has_header:
            lines = lines[1:]
        by_chunk: dict = {}
        presorted = start in j.sorted_starts
        for (cid, mi), group in split_lines(lines, index, presorted).items():
            name = spill_name(cid, mi, seq, gz)
            seq += 1
            write_spill(j.spill_dir, name, group, gz)
            by_chunk.setdefault(cid, []).append([name, list(line_key(group[0], index)),
                                                 list(line_key(group[-1], index))])
        for cid, files in by_chunk.items():
            j.spilled.setdefault(cid, []).extend(files)
            j.spills += [(tuple(f[1]), j.spill_dir / f[0], tuple(f[2])) for f in files]
        j.write_meta_spilled()
        # an older file's header member held rows: the header alone stays
        _synced_truncate(j.rows_path, 0 if has_header else start,
                         encode(ROWS_HEADER, gz) if has_header else b"")
        j.segments.pop()
        if has_header:
            break
    j.segments = []
    tmp = j.rows_path.with_name(j.rows_path.name + ".sorted.tmp")
    try:
        merge_spills(j.spills, tmp, ROWS_HEADER, gz, index)
        os.replace(tmp, j.rows_path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        lost = [c for c, files in j.spilled.items()
                if any(not (j.spill_dir / f[0]).exists() for f in files)]
        raise MergeFailed(exc.errno, exc.strerror or str(exc), len(lost)) from None
    j.spills, j.spilled = [], {}
    try:
        j.spill_dir.rmdir()
    except OSError:
        pass
