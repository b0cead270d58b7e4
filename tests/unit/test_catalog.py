from __future__ import annotations

import copy
from pathlib import Path

import pytest

from erasure.catalog import DatasetKind, load_catalog
from erasure.errors import CatalogError
from erasure.model import DatasetRef

GOOD = """
version: 1
identifiers:
  email: {normalise: email}
  customer_id: {normalise: strip}
connections:
  warehouse: {url: "sqlite:///wh.db"}
datasets:
  - namespace: warehouse
    name: CRM.Customers
    connection: warehouse
    kind: table
    holds_subject: {email: [email, alt_email], customer_id: id}
    aliases: [{namespace: "postgres://db:5432", name: crm.public.customers}]
  - namespace: warehouse
    name: marts.ltv
    kind: table
    rebuild: {sql: "CREATE TABLE marts.ltv AS SELECT id FROM crm.customers"}
    aggregate: {quasi_identifiers: [region], count_column: n, k_threshold: 5}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(text)
    return path


def test_good_catalog_normalises_names_columns_and_paths(tmp_path: Path) -> None:
    catalog = load_catalog(write(tmp_path, GOOD))
    customers = catalog.by_name("crm.customers")
    assert customers.holds_subject == {"email": ["email", "alt_email"], "customer_id": ["id"]}
    assert catalog.by_name("marts.ltv").rebuild.sql == [  # type: ignore[union-attr]
        "CREATE TABLE marts.ltv AS SELECT id FROM crm.customers"
    ]
    assert catalog.k_for(catalog.by_name("marts.ltv")) == 5
    assert catalog.k_for(customers) == 10
    assert catalog.connection_url("warehouse") == f"sqlite:///{tmp_path.resolve()}/wh.db"


def test_aliases_map_to_the_catalog_identity_and_nothing_else(tmp_path: Path) -> None:
    catalog = load_catalog(write(tmp_path, GOOD))
    alias = DatasetRef("postgres://db:5432", "crm.public.customers")
    assert catalog.canonical(alias) == DatasetRef("warehouse", "crm.customers")
    lookalike = DatasetRef("postgres://db:5432", "crm.public.customer")
    assert catalog.canonical(lookalike) == lookalike


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "kind: table\n    holds",
            "kind: tabel\n    holds",
            ["dataset 'crm.customers' field 'kind'", "'table'", "'embedding_index'"],
        ),
        (
            "holds_subject: {email: [email, alt_email], customer_id: id}",
            "holds_subject: {passport: number}",
            [
                "dataset 'crm.customers' field 'holds_subject'",
                "'passport'",
                "allowed: ['customer_id', 'email']",
            ],
        ),
        (
            "connection: warehouse\n    kind: table\n    holds",
            "connection: lake\n    kind: table\n    holds",
            ["dataset 'crm.customers' field 'connection'", "'lake' is not declared"],
        ),
        (
            "count_column: n, k_threshold: 5",
            "count_column: n, k_threshold: 1",
            ["dataset 'marts.ltv' field 'aggregate.k_threshold'", "greater than or equal to 2"],
        ),
        (
            "rebuild: {sql:",
            "rebuild: {dag_id: build, sql:",
            [
                "dataset 'marts.ltv' field 'rebuild'",
                "exactly one of 'dag_id', 'dags', 'select' or 'sql'",
            ],
        ),
        (
            "    kind: table\n    rebuild",
            "    kind: table\n    colour: blue\n    rebuild",
            ["dataset 'marts.ltv' field 'colour'", "unknown field"],
        ),
        ("version: 1", "version: 2", ["field 'version'", "1"]),
    ],
)
def test_bad_catalog_names_file_dataset_field_and_what_is_allowed(
    tmp_path: Path, old: str, new: str, expected: list[str]
) -> None:
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(CatalogError) as err:
        load_catalog(path)
    message = str(err.value)
    assert str(path) in message
    for fragment in expected:
        assert fragment in message


def test_reference_to_unknown_dataset_and_per_subject_on_mutable_are_refused(
    tmp_path: Path,
) -> None:
    bad = GOOD.replace(
        "    aliases:", "    references: [{column: a, dataset: crm.nowhere, key: id}]\n    aliases:"
    )
    with pytest.raises(CatalogError, match=r"'crm\.nowhere' is not in the catalog"):
        load_catalog(write(tmp_path, bad))
    bad = GOOD.replace(
        "    kind: table\n    rebuild", "    kind: table\n    encryption: per_subject\n    rebuild"
    )
    with pytest.raises(CatalogError, match="per_subject applies to immutable storage"):
        load_catalog(write(tmp_path, bad))


def test_unreadable_catalogs_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="no such catalog file"):
        load_catalog(tmp_path / "missing.yaml")
    with pytest.raises(CatalogError, match="not valid YAML"):
        load_catalog(write(tmp_path, "version: [1"))
    with pytest.raises(CatalogError, match="must be a mapping"):
        load_catalog(write(tmp_path, "- 1"))


def test_every_dataset_kind_is_accepted(tmp_path: Path) -> None:
    for kind in DatasetKind:
        text = GOOD.replace("kind: table\n    holds", f"kind: {kind.value}\n    holds", 1)
        assert load_catalog(write(tmp_path, text)).by_name("crm.customers").kind is kind


def test_a_holder_without_a_connection_needs_an_owner_who_erases_there(tmp_path: Path) -> None:
    crm = (
        '  - {namespace: "postgres://crm-db:5432", name: crm.public.customers, kind: table,\n'
        "     holds_subject: {email: [email]}OWNER}\n"
    )
    with pytest.raises(CatalogError, match="or an 'owner' who erases them there"):
        load_catalog(write(tmp_path, GOOD + crm.replace("OWNER", "")))
    catalog = load_catalog(write(tmp_path, GOOD + crm.replace("OWNER", ", owner: crm-team")))
    held = catalog.dataset(DatasetRef("postgres://crm-db:5432", "crm.public.customers"))
    assert held is not None and (held.connection, held.owner) == (None, "crm-team")


def _laughs(levels: int) -> str:
    """The "billion laughs": each anchor is nine aliases of the one before."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for n in range(1, levels):
        lines.append(f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version: 1\n" + _laughs(9), "aliases expand to more than 1,000,000 values"),
        ("version: 1\n" + _laughs(30), "aliases expand to more than 1,000,000 values"),
        ("version: 1\nloop: &a [1, *a]\n", "refers to a node that contains it"),
        ("version: 1\nx: " + "[" * 20000 + "]" * 20000 + "\n", "not valid YAML"),
        (b"version: 1\n\xff\xfe: x\n", "is not UTF-8 text (byte 11"),
        ("version: 1\nx: *undefined_canary_alias\n", "found undefined alias (line 2"),
    ],
    ids=["billion-laughs", "a-quintillion", "alias-loop", "deep", "not-utf8", "undefined-alias"],
)
def test_a_hostile_catalog_file_is_refused_at_once_with_the_reason(
    tmp_path: Path, text: str | bytes, expected: str
) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(CatalogError) as refused:
        load_catalog(path)
    assert expected in str(refused.value)
    assert "canary" not in str(refused.value)


def test_modest_anchors_and_aliases_still_load(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    anchored = GOOD.replace("kind: table\n    holds", "kind: &table table\n    holds").replace(
        "name: marts.ltv\n    kind: table", "name: marts.ltv\n    kind: *table"
    )
    assert "*table" in anchored
    path.write_text(anchored)
    assert {d.kind for d in load_catalog(path).datasets} == {DatasetKind.TABLE}


def test_a_directory_is_not_a_catalog(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read the catalog file"):
        load_catalog(tmp_path)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("../../etc/passwd", "must not hold a '.' or '..' path segment"),
        ("s3://bucket/./../x@", "must not hold a '.' or '..' path segment"),
        ("crm.\u0000customers", "must not hold control characters"),
        ("crm.customers\n", "must not hold control characters"),
        ("   ", "must not be blank"),
        ("x" * 600, "must be at most 512 characters"),
    ],
)
def test_a_malformed_dataset_name_is_refused_without_repeating_it(
    tmp_path: Path, name: str, expected: str
) -> None:
    path = tmp_path / "catalog.yaml"
    escaped = name.replace("\u0000", "\\0").replace("\n", "\\n")
    path.write_text(GOOD.replace("name: CRM.Customers", f'name: "{escaped}"', 1))
    with pytest.raises(CatalogError) as refused:
        load_catalog(path)
    assert f"dataset #1 field 'name': {expected}" in str(refused.value)


OBJECT_STORES = """
version: 1
identifiers:
  email: {normalise: email}
datasets:
  - {namespace: "s3://exports", name: crm/daily/customers.parquet, kind: file}
  - {namespace: file, name: /data/exports/customers.csv, kind: file}
  - {namespace: "hdfs://nn:8020", name: /user/hive/warehouse/crm.db/orders, kind: table}
  - {namespace: warehouse, name: crm.customers, kind: table}
  - {namespace: "s3://lake", name: p/q, kind: file}
  - {namespace: file, name: "s3://lake/p/q", kind: file}
"""


@pytest.mark.parametrize(
    ("spelt", "expected"),
    [
        # OpenLineage's naming: an object store's bucket is the namespace, the key the name
        (
            "s3://exports/crm/daily/customers.parquet",
            ("s3://exports", "crm/daily/customers.parquet"),
        ),
        ("crm/daily/customers.parquet", ("s3://exports", "crm/daily/customers.parquet")),
        ("file//data/exports/customers.csv", ("file", "/data/exports/customers.csv")),
        ("/data/exports/customers.csv", ("file", "/data/exports/customers.csv")),
        ("file:///data/exports/customers.csv", ("file", "/data/exports/customers.csv")),
        (
            "hdfs://nn:8020/user/hive/warehouse/crm.db/orders",
            ("hdfs://nn:8020", "/user/hive/warehouse/crm.db/orders"),
        ),
        ("warehouse/crm.customers", ("warehouse", "crm.customers")),
        ("CRM.Customers", ("warehouse", "crm.customers")),
    ],
)
def test_names_with_slashes_and_schemes_are_found_bare_or_qualified(
    tmp_path: Path, spelt: str, expected: tuple[str, str]
) -> None:
    catalog = load_catalog(write(tmp_path, OBJECT_STORES))
    assert catalog.by_name(spelt).ref == DatasetRef(*expected)


def test_a_name_that_spells_two_datasets_is_refused_naming_both(tmp_path: Path) -> None:
    catalog = load_catalog(write(tmp_path, OBJECT_STORES))
    with pytest.raises(CatalogError) as err:
        catalog.by_name("s3://lake/p/q")  # s3://lake + p/q, or file's name s3://lake/p/q
    assert str(err.value) == (
        "the name spells several datasets (namespace 'file' name 's3://lake/p/q'; namespace "
        "'s3://lake' name 'p/q'): name the one meant in full"
    )
    assert catalog.by_name("file/s3://lake/p/q").ref == DatasetRef("file", "s3://lake/p/q")
    with pytest.raises(CatalogError, match=r"'s3://exports/crm/daily' is not in the catalog"):
        catalog.by_name("s3://exports/crm/daily")  # a prefix of a name is not the name


def test_two_identities_written_alike_as_namespace_slash_name_are_refused(tmp_path: Path) -> None:
    """The action log, the plan and the record name a dataset `namespace/name`: two entries or
    aliases spelt alike there would share one another's erasures and rulings."""
    alike = OBJECT_STORES + '  - {namespace: "s3://lake/p", name: q, kind: file}\n'
    with pytest.raises(CatalogError, match="are written 'namespace/name' alike"):
        load_catalog(write(tmp_path, alike))
    aliased = OBJECT_STORES.replace(
        "name: crm.customers, kind: table}",
        'name: crm.customers, kind: table, aliases: [{namespace: "s3://lake/p", name: q}]}',
    )
    for alias, said in (
        ('{namespace: "s3://lake/p", name: q}', "are written 'namespace/name' alike"),
        ('{namespace: "s3://lake", name: p/q}', "name 'p/q' names both the dataset"),
    ):  # alike, and the very identity of another entry
        aliased = OBJECT_STORES.replace(
            "name: crm.customers, kind: table}",
            f"name: crm.customers, kind: table, aliases: [{alias}]}}",
        )
        with pytest.raises(CatalogError, match=said):
            load_catalog(write(tmp_path, aliased))
    shared = OBJECT_STORES.replace(
        "name: crm.customers, kind: table}",
        'name: crm.customers, kind: table, aliases: [{namespace: "s3://x", name: y}]}',
    ).replace(
        "name: /data/exports/customers.csv, kind: file}",
        'name: /data/exports/customers.csv, kind: file, aliases: [{namespace: "s3://x", name: y}]}',
    )  # one alias, two datasets
    with pytest.raises(CatalogError, match="name 'y' names both the dataset"):
        load_catalog(write(tmp_path, shared))
    twice = OBJECT_STORES + "  - {namespace: warehouse, name: CRM.Customers, kind: table}\n"
    with pytest.raises(CatalogError, match="declared twice in namespace 'warehouse'"):
        load_catalog(write(tmp_path, twice))


@pytest.mark.parametrize("typed", ["07700900123", "020-7946-0000", "(020)79460000", "4155550123"])
def test_a_phone_number_typed_as_a_dataset_name_is_not_repeated(tmp_path: Path, typed: str) -> None:
    catalog = load_catalog(write(tmp_path, OBJECT_STORES))
    with pytest.raises(CatalogError) as err:
        catalog.by_name(typed)
    assert typed not in str(err.value) and "with that name" in str(err.value)


def test_a_reference_may_name_its_target_by_an_alias(tmp_path: Path) -> None:
    text = GOOD.replace(
        "    aliases:",
        '    references: [{column: a, dataset: "postgres://db:5432/crm.public.customers", '
        "key: id}]\n    aliases:",
    )
    catalog = load_catalog(write(tmp_path, text))
    customers = catalog.by_name("crm.customers")
    assert [ds.name for ds, _ in catalog.referrers(customers)] == ["crm.customers"]
    copied = copy.deepcopy(catalog)  # a copy's entries are other objects: found all the same
    assert [ds.name for ds, _ in copied.referrers(copied.by_name("crm.customers"))] == [
        "crm.customers"
    ]
    assert [ds.name for ds, _ in copied.referrers(customers)] == ["crm.customers"]
