"""``python -m bench.id_bytes DATABASE``: what Ledgerflow's workflow tables would weigh with their ids as
``uuid`` (16 bytes) instead of 32-hex ``text`` (33 bytes), measured on a database a run left.

    BENCH_KEEP_DATABASE=1 python -m bench.workflows --shape task-timer-task --n 1000 --probe 0 --engines ledgerflow
    python -m bench.id_bytes lf_bench_wf_xxxxxx      # the kept database's name, from the run's log

Copies each workflow table twice into scratch schemas of that database, once as it is and once with every
``text`` column whose values are all 32-hex ids (or empty) cast to ``uuid``, builds the table's indexes on
both (an expression on such a column reads it as text), ``VACUUM``s them, and prints heap and index bytes
per workflow of each: fresh copies, so no dead versions on either side. The ids inside JSON values (event
bodies, payloads) stay text. Numbers only (bench/README, "Bytes per workflow"); the schemas are dropped.
The server is DATABASE_URL's (default: the machine's).
"""

from __future__ import annotations

import argparse
import os
import re

import psycopg
from psycopg import sql

from bench.run import with_database

TABLES = (
    "workflow_event_batches",
    "workflow_tasks",
    "workflow_steps",
    "workflow_jobs",
    "workflow_instances",
    "workflow_waits",
    "workflow_job_executions",
)
AS_IS, AS_UUID = "lf_ids_text", "lf_ids_uuid"
_INDEX_HEAD = re.compile(r"INDEX (\S+) ON (ONLY )?public\.\S+")


def id_columns(conn: psycopg.Connection, table: str) -> list[str]:
    """The ``text`` columns of ``table`` whose values are all 32-hex ids or empty (and some are ids)."""
    out = []
    for (name,) in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s "
        "AND data_type = 'text' ORDER BY ordinal_position",
        (table,),
    ).fetchall():
        col = sql.Identifier(name)
        other, ids = conn.execute(
            sql.SQL(
                "SELECT count(*) FILTER (WHERE {c} !~ '^[0-9a-f]{{32}}$' AND {c} <> ''), "
                "count(*) FILTER (WHERE {c} ~ '^[0-9a-f]{{32}}$') FROM public.{t}"
            ).format(c=col, t=sql.Identifier(table))
        ).fetchone()  # type: ignore[misc]
        if other == 0 and ids > 0:
            out.append(name)
    return out


def index_definitions(conn: psycopg.Connection, table: str) -> list[str]:
    """The indexes of ``table``, or of its largest partition (a partitioned table's are on its partitions)."""
    rel = table
    parts = [
        r[0]
        for r in conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            (table,),
        )
    ]
    if parts:
        rel = max(parts, key=lambda p: conn.execute(f"SELECT pg_relation_size('\"{p}\"')").fetchone()[0])  # type: ignore[index]
    return [
        r[0]
        for r in conn.execute(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = %s::regclass", (rel,)
        )
    ]


def measure(database: str) -> None:
    with psycopg.connect(
        with_database(
            os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"), database
        ),
        autocommit=True,
        application_name="bench-id-bytes",
    ) as conn:
        if conn.execute("SELECT to_regclass('public.workflow_instances')").fetchone()[0] is None:  # type: ignore[index]
            raise SystemExit(f"{database} has no Ledgerflow tables: name a database a bench run kept")
        workflows = conn.execute("SELECT count(*) FROM workflow_instances").fetchone()[0]  # type: ignore[index]
        if not workflows:
            raise SystemExit(f"{database} holds no workflow")
        totals = {AS_IS: 0, AS_UUID: 0}
        try:
            for schema in totals:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
            print(f"bytes per workflow ({workflows} workflows in {database}): heap + indexes, fresh copies")
            for table in TABLES:
                cols = [
                    r[0]
                    for r in conn.execute(
                        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' "
                        "AND table_name = %s ORDER BY ordinal_position",
                        (table,),
                    )
                ]
                ids = id_columns(conn, table)
                plain = ", ".join(f'"{c}"' for c in cols)
                cast = ", ".join(
                    (f'NULLIF("{c}", \'\')::uuid AS "{c}"' if c in ids else f'"{c}"') for c in cols
                )
                conn.execute(f"CREATE TABLE {AS_IS}.{table} AS SELECT {plain} FROM public.{table}")
                conn.execute(f"CREATE TABLE {AS_UUID}.{table} AS SELECT {cast} FROM public.{table}")
                sizes = {}
                for schema in totals:
                    for k, d in enumerate(index_definitions(conn, table)):
                        d = _INDEX_HEAD.sub(f"INDEX {schema}_{k}_{table[:30]} ON {schema}.{table}", d)
                        if schema == AS_UUID:
                            for c in ids:  # an expression over an id reads it as text, as before
                                d = d.replace(f"hashtextextended({c},", f"hashtextextended(({c})::text,")
                        conn.execute(d)
                    conn.execute(f"VACUUM ANALYZE {schema}.{table}")
                    heap, idx = conn.execute(
                        f"SELECT pg_table_size('{schema}.{table}'), pg_indexes_size('{schema}.{table}')"
                    ).fetchone()  # type: ignore[misc]
                    sizes[schema] = (heap / workflows, idx / workflows)
                    totals[schema] += heap + idx
                (h0, i0), (h1, i1) = sizes[AS_IS], sizes[AS_UUID]
                print(
                    f"  {table:26} text ids: heap {h0:6,.0f} indexes {i0:6,.0f} | uuid ids: heap {h1:6,.0f} "
                    f"indexes {i1:6,.0f}   ({', '.join(ids) or 'no id column'})"
                )
            a, b = totals[AS_IS] / workflows, totals[AS_UUID] / workflows
            print(
                f"  {'all':26} text ids {a:6,.0f}, uuid ids {b:6,.0f}: {a - b:,.0f} bytes less ({(a - b) / a:.0%})"
            )
        finally:
            for schema in totals:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.id_bytes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("database", help="a database a bench run left (BENCH_KEEP_DATABASE=1)")
    measure(ap.parse_args(argv).database)


if __name__ == "__main__":
    main()
