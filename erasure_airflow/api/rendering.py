"""The pages' HTML shells: Jinja2 templates shipped as package data (templates/).

The callers build and escape each fragment (html.escape) as before; a fragment is inserted
as it is, and anything passed otherwise would be escaped by the template.
"""

from __future__ import annotations

from functools import cache

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup


@cache
def _environment() -> Environment:
    return Environment(
        loader=PackageLoader("erasure_airflow.api", "templates"),
        autoescape=select_autoescape(["html"]),
        keep_trailing_newline=True,  # the pages end as they always did
    )


def render(template: str, **fragments: str) -> str:
    """`template` with `fragments`: HTML its caller built and escaped, inserted as is."""
    return (
        _environment()
        .get_template(template)
        .render({name: Markup(value) for name, value in fragments.items()})
    )
