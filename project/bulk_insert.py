"""Many new rows in one statement's worth of work: `insert_many`.

Django's bulk_create compiles the SQL of every value of every row (each
field's placeholder and preparation, then the VALUES list joined): 2,000
jobs of 30 fields are 60,000 compiled values, most of a 2,000-file claim's
web CPU (bench-upload). The rows of one model all compile to the same
one-row statement, so `insert_many` lets Django compile that statement once
and hands the database every row's prepared values with `executemany`
(psycopg pipelines it on PostgreSQL, SQLite loops in C).

For models whose primary key and every other value are known before the
insert (a UUID key, defaults evaluated at construction): nothing is read
back, as with bulk_create on a backend without RETURNING, and no signals
are sent, as with bulk_create.
"""
from __future__ import annotations

from collections.abc import Sequence

from django.db import connections, router
from django.db.models import Model
from django.db.models.sql import InsertQuery


def insert_many(model: type[Model], objs: Sequence[Model]) -> None:
    """INSERT `objs` (new instances of `model`, primary keys set) as
    bulk_create would, without compiling each value's SQL."""
    if not objs:
        return
    alias = router.db_for_write(model)
    connection = connections[alias]
    fields = [f for f in model._meta.local_concrete_fields if not f.generated]
    for field in fields:
        if hasattr(field, "get_placeholder"):  # a value-dependent placeholder: one statement cannot fit all rows
            raise ValueError(f"{model.__name__}.{field.name}: a placeholder per value; use bulk_create")
    if any(obj.pk is None for obj in objs):
        raise ValueError(f"{model.__name__}: every instance needs its primary key before insert_many")
    query = InsertQuery(model)
    query.insert_values(fields, objs[:1])
    (statement, first), = query.get_compiler(using=alias).as_sql()
    rows = [first, *([field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields]
                     for obj in objs[1:])]
    if any(hasattr(value, "resolve_expression") for row in rows for value in row):
        raise ValueError(f"{model.__name__}: an expression among the values; use bulk_create")
    with connection.cursor() as cursor:
        cursor.executemany(statement, rows)
    for obj in objs:
        obj._state.adding, obj._state.db = False, alias
