"""A matplotlib ``Figure`` that a notebook shows inline by itself (needs the ``plot`` extra).

The scorecard's figures are built without pyplot, so IPython's matplotlib display
hook (registered only once a pyplot backend is active) may not know them.
``_repr_png_`` is IPython's rich-display protocol, which Jupyter calls on any
object a cell returns (IPython docs, "Rich display"). Imported only after
:func:`~deepseekbench._report._plot.require_matplotlib`; a module-level class, so
the figure still pickles.
"""

from __future__ import annotations

from matplotlib.figure import Figure

__all__ = ["NotebookFigure"]


class NotebookFigure(Figure):
    """A ``Figure`` with ``_repr_png_`` (PNG bytes at 110 dpi) for inline display."""

    def _repr_png_(self) -> bytes:
        from deepseekbench._report._plot import figure_png

        return figure_png(self)
