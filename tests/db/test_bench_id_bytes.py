"""``bench.id_bytes`` (issue 50's measure of ids as ``uuid``): which columns it would cast."""

from __future__ import annotations

import psycopg

from bench import id_bytes


def test_only_columns_of_32_hex_ids_or_empty_values_are_cast(db) -> None:
    url = db.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS public.bench_id_probe")
        conn.execute(
            "CREATE TABLE public.bench_id_probe (ids text, some_empty text, keys text, n int, none text)"
        )
        try:
            conn.execute(
                "INSERT INTO public.bench_id_probe VALUES "
                "(md5('a'), md5('b'), 'order-17', 1, NULL), (md5('c'), '', md5('d'), 2, NULL)"
            )
            assert id_bytes.id_columns(conn, "bench_id_probe") == ["ids", "some_empty"]
        finally:
            conn.execute("DROP TABLE public.bench_id_probe")
