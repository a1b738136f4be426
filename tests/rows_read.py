"""How many rows a query's plan read: the measure of a query's cost that
does not depend on the machine's speed (PostgreSQL only)."""
from __future__ import annotations

from django.db import connection


def rows_read(sql: str, *, seqscan: bool = True) -> int:
    """Rows the plan's scans read (actual rows x loops, before their filters
    drop any), by EXPLAIN ANALYZE of the query as it ran. A bitmap index
    scan's rows are counted once, by the heap scan that reads them.

    seqscan=False plans it as PostgreSQL would once the tables are large:
    a scan of a whole table only where no index serves (on small tables
    the planner rightly prefers one to a few hundred index lookups)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET enable_seqscan = {'on' if seqscan else 'off'}")
        try:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
            plan = cursor.fetchone()[0]  # psycopg reads the json
        finally:
            cursor.execute("RESET enable_seqscan")

    def walk(node: dict) -> int:
        here = 0
        if "Scan" in node["Node Type"] and node["Node Type"] != "Bitmap Index Scan":
            here = (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
        return here + sum(walk(child) for child in node.get("Plans", []))
    return walk(plan[0]["Plan"])
