"""HTML from view models, through Jinja2 templates with autoescaping on for everything.

The templates are package data (monitor/web/templates); the environment is built once.
StrictUndefined turns a misspelt field into an error in the tests rather than an empty
cell in production.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined


@cache
def environment() -> Environment:
    return Environment(
        loader=PackageLoader("monitor.web", "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(template: str, **values: Any) -> str:
    return environment().get_template(template).render(**values)
