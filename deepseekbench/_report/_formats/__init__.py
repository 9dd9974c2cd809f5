"""The output formats of a scorecard, registered by name: one renderer module per format.

Holds :data:`FORMAT_NAMES` (the CLI's ``--format`` choices and
:meth:`~deepseekbench.Scorecard.render`'s), :func:`render` and
:func:`omitted_sections`. Each format module walks the same report model
(:func:`~deepseekbench._report._sections.report_sections`) and says which
sections, if any, its data layout cannot carry (``OMITS``). The modules are
imported on first use, so the CLI can read the names without loading the
analysis.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Final, Protocol, cast

if TYPE_CHECKING:
    from deepseekbench._report._scorecard import Scorecard

__all__ = ["FORMAT_NAMES", "omitted_sections", "render"]

_MODULES: Final = {
    "text": "deepseekbench._report._formats._text",
    "markdown": "deepseekbench._report._formats._markdown",
    "json": "deepseekbench._report._formats._json",
    "csv": "deepseekbench._report._formats._csv",
    "html": "deepseekbench._report._formats._html",
}
"""Format name -> the module that renders it."""

FORMAT_NAMES: Final = tuple(_MODULES)
"""Every format a scorecard renders as, in the order the CLI lists them."""


class _Format(Protocol):
    OMITS: frozenset[str]

    def render(self, card: Scorecard) -> str: ...


def _module(name: str) -> _Format:
    if name not in _MODULES:
        raise ValueError(f"unknown format {name!r}; allowed: {', '.join(FORMAT_NAMES)}")
    return cast("_Format", import_module(_MODULES[name]))


def render(name: str, card: Scorecard) -> str:
    """``card`` rendered as format ``name`` (html: a whole page, plots included).

    Raises:
        ValueError: unknown format.
    """
    return _module(name).render(card)


def omitted_sections(name: str) -> frozenset[str]:
    """The section kinds format ``name`` does not carry (none for the text formats).

    Raises:
        ValueError: unknown format.
    """
    return _module(name).OMITS
