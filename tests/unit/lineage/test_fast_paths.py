"""The shortcuts ingest takes are the long way's answers: the check that a dataset entry has
nothing to drop, and the links of a `fields` facet read as text rows (`PlainLinks`)."""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any

import pytest

from erasure.errors import LineageError
from erasure.lineage.openlineage import OutputLineage, PlainLinks
from erasure.lineage.openlineage import kept_facets as kf
from erasure.lineage.openlineage.column_facets import output_links
from erasure.lineage.store.projection import link_set_digest, link_sources, links_text
from erasure.model import DatasetRef

OUT = DatasetRef("warehouse", "marts.out")


def _slow_dataset(entry: Any) -> Any:
    """`kept_facets._dataset` without its shortcut: the copy compared with the entry."""
    original = kf._kept_dataset
    kf._kept_dataset = lambda _: False  # type: ignore[assignment]
    try:
        return kf._dataset(entry)
    finally:
        kf._kept_dataset = original  # type: ignore[assignment]


def _input(name: str = "crm.customers", field: str = "email", **extra: Any) -> dict[str, Any]:
    return {"namespace": "warehouse", "name": name, "field": field, **extra}


def _entries() -> list[Any]:
    """Dataset entries with nothing to drop, and each way one may hold something to drop."""
    kept = {
        "namespace": "warehouse",
        "name": "marts.out",
        "facets": {
            "columnLineage": {
                "_producer": "p",
                "fields": {
                    "a": {"inputFields": [_input(transformations=[{"type": "DIRECT"}])]},
                    "b": {"inputFields": [_input()], "transformationType": "IDENTITY"},
                    "c": {"inputFields": [_input()], "transformationDescription": kf.NOT_KEPT},
                    "d": {"inputFields": [_input()], "transformationDescription": "  "},
                },
                "dataset": [_input(transformations=[{"type": "INDIRECT", "masking": False}])],
            },
            "schema": {"fields": [{"name": "a", "type": "struct", "fields": [{"name": "x"}]}]},
            "symlinks": {"identifiers": [{"namespace": "n", "name": "m", "type": "TABLE"}]},
        },
    }
    spoiled = []
    paths = [
        ("entry", lambda e: e.update(inputFacets={"x": 1})),
        ("facet", lambda e: e["facets"].update(ownership={"owners": ["Alice"]})),
        ("facet key", lambda e: e["facets"]["columnLineage"].update(note="free")),
        ("field key", lambda e: e["facets"]["columnLineage"]["fields"]["a"].update(x=1)),
        ("description", lambda e: _fields(e)["c"].update(transformationDescription="by Bob")),
        ("null description", lambda e: _fields(e)["d"].update(transformationDescription=None)),
        ("input key", lambda e: _fields(e)["a"]["inputFields"][0].update(description="t")),
        (
            "transformation",
            lambda e: _fields(e)["a"]["inputFields"][0]["transformations"][0].update(
                description="where email = 'x'"
            ),
        ),
        ("dataset input", lambda e: e["facets"]["columnLineage"]["dataset"][0].update(note=1)),
        ("schema", lambda e: e["facets"]["schema"]["fields"][0].update(description="free")),
        ("nested schema", lambda e: e["facets"]["schema"]["fields"][0]["fields"][0].update(d=1)),
        ("symlink", lambda e: e["facets"]["symlinks"]["identifiers"][0].update(note="x")),
    ]
    for _, spoil in paths:
        entry = copy.deepcopy(kept)
        spoil(entry)
        spoiled.append(entry)
    odd = [
        {"namespace": "n", "name": "m"},
        {"namespace": "n", "name": "m", "facets": None},
        {"namespace": "n", "name": "m", "facets": []},
        {"namespace": "n", "name": "m", "facets": {"columnLineage": None}},
        {"namespace": "n", "name": "m", "facets": {"columnLineage": {"fields": []}}},
        {"namespace": "n", "name": "m", "facets": {"columnLineage": {"fields": {"a": 3}}}},
        {"namespace": "n", "name": "m", "facets": {"schema": {"fields": ["x", {"name": "y"}]}}},
        "not an object",
    ]
    return [kept, *spoiled, *odd]


def _fields(entry: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = entry["facets"]["columnLineage"]["fields"]
    return fields


@pytest.mark.parametrize("entry", _entries())
def test_an_entry_is_kept_as_it_is_exactly_when_the_copy_would_equal_it(entry: Any) -> None:
    slow = _slow_dataset(copy.deepcopy(entry))
    fast = kf._dataset(entry)
    assert fast == slow
    assert (fast is entry) == (slow == entry)


def test_the_shortcut_keeps_nothing_the_copy_drops() -> None:
    for entry in _entries()[1:13]:
        assert kf._dataset(entry) is not entry  # each one has something to drop
        assert "Alice" not in repr(kf._dataset(entry)) and "by Bob" not in repr(kf._dataset(entry))


def _facet(rng: random.Random) -> dict[str, Any]:
    """A `fields` facet with repeats, case, empty names, legacy and unknown kinds."""
    fields: dict[str, Any] = {}
    for column in rng.sample(["id", "a", "B", "", "c.d", "é"], rng.randint(0, 5)):
        inputs = []
        for _ in range(rng.randint(0, 4)):
            entry: dict[str, Any] = {
                "namespace": rng.choice(["warehouse", "pg://h:5432"]),
                "name": rng.choice(["crm.customers", "CRM.Customers", "s3://b/p/x", "crm.orders"]),
                "field": rng.choice(["id", "email", "", "Email"]),
            }
            shape = rng.random()
            if shape < 0.7:
                entry["transformations"] = [
                    {
                        "type": rng.choice(["DIRECT", "INDIRECT", " indirect ", "other"]),
                        "subtype": rng.choice([None, "JOIN", " filter ", "nope", "IDENTITY"]),
                    }
                    for _ in range(rng.randint(1, 2))
                ]
            elif shape < 0.85:
                entry["transformations"] = []
            inputs.append(entry)
        inputs += inputs[:1]  # a repeated input field
        lineage: dict[str, Any] = {"inputFields": inputs}
        if rng.random() < 0.3:
            lineage["transformationType"] = rng.choice(["IDENTITY", "MASKED", ""])
        if rng.random() < 0.2:
            lineage["transformationDescription"] = rng.choice(["", kf.NOT_KEPT])
        fields[column] = lineage
    return {"fields": fields}


def test_plain_links_are_the_links_the_facet_gives() -> None:
    rng = random.Random(17)
    ids = {
        DatasetRef(ns, name.lower()): k
        for k, (ns, name) in enumerate(
            itertools.product(
                ["warehouse", "pg://h:5432"], ["crm.customers", "s3://b/p/x", "crm.orders"]
            )
        )
    }
    for _ in range(300):
        facets = {"columnLineage": _facet(rng)}
        links, gap = output_links("job", OUT, facets, [])
        plain = OutputLineage(OUT, facets, [], "job").link_set()
        assert isinstance(plain, PlainLinks) and gap is None
        assert plain.links() == frozenset(links)
        assert len(plain) == len(set(links))
        assert link_set_digest(plain) == link_set_digest(frozenset(links))
        assert links_text(plain, ids) == links_text(frozenset(links), ids)
        assert link_sources(plain) == link_sources(frozenset(links))


def test_declared_inputs_a_facet_leaves_out_are_added_on_either_path() -> None:
    """The store's no-object path (`PlainLinks`) serves a facet only when it names every
    declared input; otherwise the links are read the long way, the missing inputs added."""
    rng = random.Random(23)
    candidates = [DatasetRef("warehouse", n) for n in ("crm.customers", "crm.orders", "x.y")]
    for _ in range(200):
        facets = {"columnLineage": _facet(rng)}
        inputs = rng.sample(candidates, rng.randint(0, len(candidates)))
        links, gap = output_links("job", OUT, facets, inputs)
        published = OutputLineage(OUT, facets, inputs, "job")
        found = published.link_set()
        named = {source.dataset for source, *_ in output_links("job", OUT, facets, [])[0]}
        assert isinstance(found, PlainLinks) == (set(inputs) <= named)
        assert (found.links() if isinstance(found, PlainLinks) else found) == frozenset(links)
        assert {source.dataset for source, *_ in links} >= set(inputs)
        assert gap is None and published.gap is None


@pytest.mark.parametrize(
    "facets",
    [
        {},
        {"columnLineage": None},
        {"columnLineage": {"fields": {"a": {"inputFields": ["bad"]}}}},
        {"columnLineage": {"fields": {}, "dataset": [_input()]}},
    ],
)
def test_other_shapes_are_read_the_long_way(facets: dict[str, Any]) -> None:
    published = OutputLineage(OUT, facets, [DatasetRef("warehouse", "crm.customers")], "job")
    assert published.link_set() == frozenset(published.links)
    assert published.gap == output_links("job", OUT, facets, published._inputs)[1]


def test_a_column_name_too_long_is_refused_either_way() -> None:
    facets = {"columnLineage": {"fields": {"x" * 600: {"inputFields": [_input()]}}}}
    plain = OutputLineage(OUT, facets, [], "job").link_set()
    ids = {DatasetRef("warehouse", "crm.customers"): 1}
    with pytest.raises(LineageError, match="longer than") as fast:
        links_text(plain, ids)
    with pytest.raises(LineageError, match="longer than") as slow:
        links_text(plain.links(), ids)  # type: ignore[union-attr]
    assert str(fast.value) == str(slow.value)
    assert "x" * 20 not in str(fast.value)
