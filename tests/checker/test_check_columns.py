"""report/check.py's column map (COLUMNS, STATE_COLUMNS) agrees with the table specs of refspec.core.tables."""

from __future__ import annotations

import copy

import pytest
import refspec_check as C

from refspec.core import tables as T
from refspec.core.paths import REPO_ROOT

CHECK = REPO_ROOT / "report" / "check.py"


# the spec types each of the checker's kinds reads
SPEC_TYPES = {C.S: {"string"}, C.I: {"int32", "int64"}, C.F: {"float64"}, C.B: {"bool"}, C.L: {"list<int32>"}}

# one value of each spec type, as refspec writes it (refspec.core.tables.csv_cell)
SAMPLE = {"string": "x", "int32": -7, "int64": 2**40 + 3, "float64": 0.1, "bool": True, "list<int32>": [3, 0, 12]}


def disagreements(columns: dict) -> list[str]:
    """Where a column map disagrees with the table specs: a table without a spec, a column the spec
    does not define, a kind that does not read the spec's type, or a value of the spec's type that
    the checker does not read back as written."""
    out = []
    for table, cols in columns.items():
        sp = T.TABLES.get(table)
        if sp is None:
            out.append(f"{table}: no table spec")
            continue
        for name, kind in cols.items():
            if name not in sp.names:
                out.append(f"{table}.{name}: not a column of the spec")
                continue
            ctype = sp.column(name).type
            if kind not in SPEC_TYPES:
                out.append(f"{table}.{name}: unknown kind {kind!r}")
                continue
            if ctype not in SPEC_TYPES[kind]:
                out.append(f"{table}.{name}: kind {kind!r} but the spec says {ctype}")
            v = SAMPLE[ctype]
            try:
                got = C.parse_value(kind, T.csv_cell(ctype, v))
            except ValueError as e:
                out.append(f"{table}.{name}: {T.csv_cell(ctype, v)!r} unreadable as {kind!r} ({e})")
                continue
            if type(got) is not type(v) or got != v:
                out.append(f"{table}.{name}: {v!r} written as {ctype} reads back as {got!r}")
    return out


def test_every_table_the_checker_reads_has_a_spec():
    assert set(C.COLUMNS) <= set(T.TABLES), sorted(set(C.COLUMNS) - set(T.TABLES))
    assert set(C.TABLE_NAMES) == set(C.COLUMNS)
    for name, cols in C.STATE_COLUMNS.items():
        assert C.COLUMNS[name] == cols


@pytest.mark.parametrize("name", sorted(C.COLUMNS))
def test_a_tables_declared_columns_are_its_spec(name):
    """The columns the archive's format declares for a table (refspec_check.files refuses any other)
    are its spec's: the ones the checker reads (COLUMNS) and the ones it carries (CARRIED_COLUMNS)."""
    from refspec_check.contract import table_columns

    declared = table_columns(name)
    assert len(declared) == len(set(declared)), name
    assert set(declared) == set(T.TABLES[name].names), (name, set(declared) ^ set(T.TABLES[name].names))


@pytest.mark.parametrize("name", sorted(C.COLUMNS))
def test_checker_columns_agree_with_the_table_spec(name):
    assert disagreements({name: C.COLUMNS[name]}) == []


def test_state_columns_agree_with_the_table_specs():
    assert disagreements(C.STATE_COLUMNS) == []


def test_null_cells_read_as_null():
    for table, cols in C.COLUMNS.items():
        for name, kind in cols.items():
            ctype = T.TABLES[table].column(name).type
            if ctype != "list<int32>":
                assert C.parse_value(kind, T.csv_cell(ctype, None)) is None, (table, name)


def _extra_column(m):
    m["ratios"]["speedup"] = C.F
    return "ratios.speedup"


def _renamed_column(m):
    m["requests"]["t_ms"] = m["requests"].pop("t_ns")
    return "requests.t_ms"


def _int_read_as_float(m):
    m["requests"]["t_ns"] = C.F
    return "requests.t_ns"


def _float_read_as_int(m):
    m["estimates"]["threshold"] = C.I
    return "estimates.threshold"


def _bool_read_as_string(m):
    m["qualification"]["qualified"] = C.S
    return "qualification.qualified"


def _list_read_as_string(m):
    m["endpoints"]["tokens"] = C.S
    return "endpoints.tokens"


def _state_string_read_as_int(m):
    m["claims"]["status"] = C.I
    return "claims.status"


def _unknown_table(m):
    m["speedups"] = dict(family=C.S)
    return "speedups"


@pytest.mark.parametrize(
    "mutate",
    [
        _extra_column,
        _renamed_column,
        _int_read_as_float,
        _float_read_as_int,
        _bool_read_as_string,
        _list_read_as_string,
        _state_string_read_as_int,
        _unknown_table,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
def test_a_wrong_column_map_is_caught(mutate):
    wrong = copy.deepcopy(C.COLUMNS)
    where = mutate(wrong)
    found = disagreements(wrong)
    assert found and all(p.startswith(where) for p in found), found
    assert disagreements(C.COLUMNS) == []
