#!/usr/bin/env python3
"""Read an ourios store with two independent Parquet readers and check they agree.

The parquet crate's own reader shares code with the writer, so a round-trip through it cannot
show that other tools read what the node writes. This script reads every
`records/**/*.parquet` and `audit/**/*.parquet` below a store directory with pyarrow and with
DuckDB and checks, per object:

- both readers open it, and report the same number of rows;
- the schema has every column the sinks write, with the Arrow types they declare;
- both readers return the same rows (ids, tenant, template, parameters, body; for audit
  objects: seq, tenant, kind, template id, version, text);
- the Hive-style path agrees with the rows: `tenant=`, `date=` and `hour=` (records) or
  `tenant=` and `date=` (audit) are the row's tenant and the UTC date/hour of its time.

and for the whole store:

- DuckDB's count over the glob equals the per-object sum;
- the distinct record ids are exactly `--expect-records` many (duplicates are allowed: the
  store is at-least-once), from exactly the `--expect-tenants` tenants;
- every record's (tenant, template_key) has an audit event that defines it (audit before
  records, I3, as the final state shows it), and no key names two template texts.

Prints one line per failure, then `interop: <n> passed, <m> failed`; exits 1 when anything
failed or nothing was read, 2 on bad usage or a missing reader.

Usage: read_store.py STORE_DIR [--expect-records N] [--expect-tenants a,b]
"""

from __future__ import annotations

import argparse
import datetime as dt
import pathlib
import sys
import urllib.parse

try:
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError as e:  # pragma: no cover - the caller installs both
    print(f"interop: cannot import a reader ({e}); install pyarrow and duckdb", file=sys.stderr)
    sys.exit(2)

NANOS_PER_HOUR = 3_600 * 1_000_000_000
NANOS_PER_DAY = 24 * NANOS_PER_HOUR
EPOCH = dt.date(1970, 1, 1)

STRING = pa.string()
MAP = pa.map_(pa.string(), pa.string())
TS = pa.timestamp("ns", tz="UTC")

# sinks/src/encode.rs `columns` and `audit_columns`, with the Arrow types `record_batch` and
# `audit_batch` declare (nullability is not compared; a UTC timestamp may name its zone `UTC`
# or `+00:00`, which is what arrow-rs writes).
RECORD_COLUMNS = {
    "tenant": STRING,
    "wal_id": pa.binary(16),
    "record_lsn": pa.uint64(),
    "record_index": pa.uint32(),
    "time": TS,
    "observed_time": TS,
    "severity_number": pa.int32(),
    "severity_text": STRING,
    "template_key": pa.binary(16),
    "template_id": pa.uint64(),
    "template_version": pa.uint32(),
    "params": pa.list_(STRING),
    "body": STRING,
    "attributes": MAP,
    "resource_attributes": MAP,
    "trace_id": pa.binary(16),
    "span_id": pa.binary(8),
}
AUDIT_COLUMNS = {
    "seq": pa.uint64(),
    "tenant": STRING,
    "timestamp": TS,
    "kind": STRING,
    "template_key": pa.binary(16),
    "template_id": pa.uint64(),
    "template_version": pa.uint32(),
    "old_template_version": pa.uint32(),
    "template": STRING,
    "old_template": STRING,
    "record_lsn": pa.uint64(),
    "record_index": pa.uint32(),
    "partition_key": STRING,
    "error": STRING,
}
# The columns whose values both readers must agree on, row by row (compared sorted).
RECORD_ROW = ["tenant", "wal_id", "record_lsn", "record_index", "template_key", "template_id",
              "template_version",
              "params", "body", "severity_number"]
AUDIT_ROW = ["seq", "tenant", "kind", "template_key", "template_id", "template_version",
             "template"]


class Tally:
    """Counts checks; prints each failure as it happens."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def check(self, ok: bool, what: str) -> bool:
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {what}")
        return ok


def sql_string(path: pathlib.Path | str) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def hive_parts(path: pathlib.Path, root: pathlib.Path) -> dict[str, str]:
    """`key=value` directory segments between the store root and the file, percent-decoded."""
    parts = {}
    for segment in path.relative_to(root).parts[1:-1]:
        key, sep, value = segment.partition("=")
        if sep:
            parts[key] = urllib.parse.unquote(value)
    return parts


def day_and_hour(nanos: int) -> tuple[str, str]:
    day = EPOCH + dt.timedelta(days=nanos // NANOS_PER_DAY)
    return day.isoformat(), f"{(nanos % NANOS_PER_DAY) // NANOS_PER_HOUR:02}"


def same_type(found: pa.DataType, expected: pa.DataType) -> bool:
    if pa.types.is_timestamp(found) and pa.types.is_timestamp(expected):
        utc = {"UTC", "+00:00", "Z"}
        return found.unit == expected.unit and found.tz in utc and expected.tz in utc
    return found == expected


def normalise(value):
    """Make pyarrow's and DuckDB's Python values comparable (lists stay lists, bytes stay bytes)."""
    if isinstance(value, (list, tuple)):
        return tuple(normalise(v) for v in value)
    return value


def check_object(path: pathlib.Path, root: pathlib.Path, kind: str, con, tally: Tally):
    """Check one object; return its pyarrow table, or None when a reader could not open it."""
    expected = RECORD_COLUMNS if kind == "records" else AUDIT_COLUMNS
    row_cols = RECORD_ROW if kind == "records" else AUDIT_ROW
    name = path.relative_to(root)
    table = duck_rows = duck_schema = None
    try:
        table = pq.ParquetFile(path).read()
    except Exception as e:  # noqa: BLE001 - any reader error is the finding
        tally.check(False, f"{name}: pyarrow cannot read it: {e}")
    src = f"read_parquet({sql_string(path)}, hive_partitioning = false)"
    try:
        (duck_rows,) = con.execute(f"SELECT count(*) FROM {src}").fetchone()
        duck_schema = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
    except Exception as e:  # noqa: BLE001
        tally.check(False, f"{name}: duckdb cannot read it: {e}")
    if table is None or duck_schema is None:
        return None
    tally.check(table.num_rows == duck_rows,
                f"{name}: pyarrow reads {table.num_rows} rows, duckdb {duck_rows}")
    tally.check(table.num_rows > 0, f"{name}: an object with no rows")

    missing = [c for c in expected if c not in table.schema.names or c not in duck_schema]
    if not tally.check(not missing, f"{name}: columns missing: {missing}"):
        return table
    wrong = [f"{c}: {table.schema.field(c).type} (expected {t})"
             for c, t in expected.items() if not same_type(table.schema.field(c).type, t)]
    tally.check(not wrong, f"{name}: column types differ: {wrong}")

    ours = sorted(zip(*(map(normalise, table.column(c).to_pylist()) for c in row_cols)),
                  key=repr)
    theirs = con.execute(f"SELECT {', '.join(row_cols)} FROM {src}").fetchall()
    theirs = sorted((tuple(normalise(v) for v in row) for row in theirs), key=repr)
    tally.check(ours == theirs, f"{name}: pyarrow and duckdb return different rows")

    hive = hive_parts(path, root)
    time_col = "time" if kind == "records" else "timestamp"
    nanos = table.column(time_col).cast(pa.int64()).to_pylist()
    bad = []
    for tenant, ns in zip(table.column("tenant").to_pylist(), nanos):
        day, hour = day_and_hour(ns)
        want = {"tenant": tenant, "date": day}
        if kind == "records":
            want["hour"] = hour
        if any(hive.get(k) != v for k, v in want.items()):
            bad.append(want)
    tally.check(not bad, f"{name}: rows outside the partition {hive}: {bad[:3]}")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=pathlib.Path)
    parser.add_argument("--expect-records", type=int, default=None,
                        help="the number of distinct record ids the store must hold")
    parser.add_argument("--expect-tenants", default=None,
                        help="comma-separated tenants the records must belong to, exactly")
    args = parser.parse_args()
    root = args.store.resolve()
    if not root.is_dir():
        print(f"interop: store directory {root} does not exist", file=sys.stderr)
        return 2

    tally = Tally()
    con = duckdb.connect()
    rows = {"records": 0, "audit": 0}
    files = {"records": 0, "audit": 0}
    ids: set[tuple[bytes, int, int]] = set()
    tenants: set[str] = set()
    definitions: dict[tuple[str, bytes], str] = {}
    conflicts: list[str] = []
    record_templates: set[tuple[str, bytes]] = set()
    for kind in ("records", "audit"):
        paths = sorted((root / kind).glob("**/*.parquet"))
        tally.check(bool(paths), f"no {kind}/**/*.parquet below {root}")
        for path in paths:
            table = check_object(path, root, kind, con, tally)
            files[kind] += 1
            if table is None:
                continue
            rows[kind] += table.num_rows
            cols = {c: table.column(c).to_pylist()
                    for c in ("tenant", "wal_id", "record_lsn", "record_index", "template_key",
                              "template", "kind") if c in table.schema.names}
            if kind == "records":
                ids.update(zip(cols["wal_id"], cols["record_lsn"], cols["record_index"]))
                tenants.update(cols["tenant"])
                record_templates.update(zip(cols["tenant"], cols["template_key"]))
            else:
                for tenant, k, key, text in zip(cols["tenant"], cols["kind"],
                                                cols["template_key"], cols["template"]):
                    if k in ("template_created", "template_widened", "template_defined"):
                        old = definitions.setdefault((tenant, key), text)
                        if old != text:
                            conflicts.append(f"{tenant} {key.hex()}: {old!r} and {text!r}")
        if files[kind]:
            glob = sql_string(root / kind / "**" / "*.parquet")
            try:
                (total,) = con.execute(
                    f"SELECT count(*) FROM read_parquet({glob}, hive_partitioning = false)"
                ).fetchone()
            except Exception as e:  # noqa: BLE001
                total = f"nothing ({e})"
            tally.check(total == rows[kind],
                        f"{kind}: duckdb counts {total} rows over the glob, the objects sum to "
                        f"{rows[kind]}")

    if args.expect_records is not None:
        tally.check(len(ids) == args.expect_records,
                    f"{len(ids)} distinct record ids, expected {args.expect_records}")
    if args.expect_tenants is not None:
        want = set(filter(None, args.expect_tenants.split(",")))
        tally.check(tenants == want, f"record tenants {sorted(tenants)}, expected {sorted(want)}")
    uncovered = sorted(record_templates - definitions.keys())
    tally.check(not uncovered,
                f"records whose (tenant, template_key) has no audit definition: {uncovered[:5]}")
    tally.check(not conflicts, f"template keys naming two texts: {conflicts[:5]}")

    print(f"interop: read {rows['records']} record rows ({len(ids)} distinct ids, "
          f"{len(tenants)} tenants) in {files['records']} objects and {rows['audit']} audit rows "
          f"in {files['audit']} objects with pyarrow {pa.__version__} and duckdb "
          f"{duckdb.__version__}")
    print(f"interop: {tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
