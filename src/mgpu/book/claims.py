"""How the book's executing cells tie the prose to the measurements.

A sentence that states an outcome is only as good as its check. Two kinds of check, both
run in cells that the page does not show (MyST-NB's ``remove-cell`` tag):

- :func:`require` for deterministic claims (sums, equality, counts): when the claim does
  not hold, it raises :class:`ClaimError` and the build fails, naming the claim.
- :func:`verdict` for claims that depend on timing: the measurement glues an outcome
  (``true`` or ``false``, or a short name such as ``faster``), and the page's
  ``{verdict}`` directive (``docs/_ext/mgpu_verdict.py``) shows the one of its prepared
  sentences whose ``{case}`` matches. The sentences live in the chapter's Markdown, so
  the catalogs translate them; a noisy machine changes the words, never the build's
  result.

The numbers themselves reach the prose with :func:`glue` (MyST-NB's ``glue``). Small
results are shown as a :class:`Table`, which renders as a Markdown table on the page and
as aligned text elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["ClaimError", "Table", "glue", "require", "verdict"]


class ClaimError(AssertionError):
    """A deterministic claim of the book's text that the build's own results
    contradict."""


def require(holds: bool, claim: str, found: object = None) -> None:
    """Fail the build if ``claim`` (the sentence, as the page states it) does not hold.

    >>> require(1 + 1 == 2, "one and one make two")
    >>> require(sum([1, 2]) == 4, "the sum is 4", found=3)
    Traceback (most recent call last):
    ...
    mgpu.book.claims.ClaimError: the text claims "the sum is 4", but this build found 3:
    ...
    """
    if not holds:
        raise ClaimError(
            f'the text claims "{claim}", but this build found '
            f"{'otherwise' if found is None else found}: fix the text or the code "
            "before publishing")


def glue(key: str, value: object) -> object:
    """Glue ``value`` under ``key`` for the page's glue roles (a no-op outside a
    notebook build).

    In the page, refer to it with MyST-NB's ``glue:text`` role and the
    document-qualified key ``<page>.md::key:<format>``: that form resolves in the
    Chinese edition too, whose translated paragraphs are parsed again without the
    notebook's glue data (myst-nb 1.4); strings need the format ``s``.
    """
    try:
        from myst_nb import glue as myst_glue
    except ImportError:  # plain Python, or a notebook without MyST-NB: nowhere to glue
        return value
    myst_glue(key, value, display=False)
    return value


def verdict(key: str, outcome: bool | str) -> str:
    """Glue the outcome of a measurement under ``key`` and return it as the case name.

    ``True`` and ``False`` (NumPy's too, which comparisons of arrays give) become
    ``"true"`` and ``"false"``; a string names its case itself. The page's
    ``{verdict} key`` directive shows the ``{case}`` of that name.

    >>> verdict("faster", 2.0 > 1.0)
    'true'
    >>> verdict("smaller", np.float32(1.0) < 2)
    'true'
    >>> verdict("trend", "slower")
    'slower'
    >>> verdict("trend", "two words")
    Traceback (most recent call last):
    ...
    ValueError: verdict 'trend': the outcome 'two words' is not a case name ...
    """
    if isinstance(outcome, bool | np.bool_):
        name = "true" if outcome else "false"
    else:
        name = str(outcome)
    if not name or not all(part.isidentifier() for part in name.split("-")):
        raise ValueError(
            f"verdict {key!r}: the outcome {outcome!r} is not a case name (a bool, or "
            "one word of letters, digits, '_' or '-'): name the outcome, not the "
            "sentence")
    glue(key, name)
    return name


def _cell(value: object, digits: int) -> str:
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


class Table:
    """A small result table: Markdown on the page, aligned columns in plain text.

    Floats are rounded to ``digits`` decimals (whole numbers from 100 up); put units in
    the header or the caption.

    >>> Table(["devices", "time (ms)"], [[1, 12.3456], [2, 7.0]])
    devices  time (ms)
    -------  ---------
          1      12.35
          2       7.00
    >>> Table(["run", "ms"], [["a", 1.5], ["b", "—"]])
    run    ms
    ---  ----
    a    1.50
    b       —
    >>> Table(["a", "b"], [[1]])
    Traceback (most recent call last):
    ...
    ValueError: Table: row 0 has 1 cells, but there are 2 columns (['a', 'b']): ...
    """

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence[object]],
                 digits: int = 2) -> None:
        self.header = [str(h) for h in header]
        for i, row in enumerate(rows):
            if len(row) != len(self.header):
                raise ValueError(
                    f"Table: row {i} has {len(row)} cells, but there are "
                    f"{len(self.header)} columns ({self.header}): give every row one "
                    "value per column")
        self.rows = [[_cell(v, digits) for v in row] for row in rows]

    @classmethod
    def from_mapping(cls, header: Sequence[str], mapping: Mapping[object, object],
                     digits: int = 2) -> Table:
        """A two-column table of a mapping's keys and values.

    >>> Table.from_mapping(["device", "threads"], {"cpu(0)": 7, "cpu(1)": 8})
        device  threads
        ------  -------
        cpu(0)        7
        cpu(1)        8
        """
        return cls(header, [[k, v] for k, v in mapping.items()], digits)

    def _widths(self) -> list[int]:
        return [max(len(c) for c in column) for column in zip(self.header, *self.rows)]

    def _numeric_columns(self) -> list[bool]:
        # A column is numeric when its cells are numbers or blanks ("", "-", "—").
        return [any(_numeric(row[i]) for row in self.rows)
                and all(_numeric(row[i]) or row[i] in BLANKS for row in self.rows)
                for i in range(len(self.header))]

    def __repr__(self) -> str:
        widths, numeric = self._widths(), self._numeric_columns()
        lines = [self.header, ["-" * w for w in widths], *self.rows]
        return "\n".join(
            "  ".join(c.rjust(w) if n else c.ljust(w)
                      for c, w, n in zip(line, widths, numeric)).rstrip()
            for line in lines)

    def _repr_markdown_(self) -> str:
        rule = ["---:" if n else "---" for n in self._numeric_columns()]
        lines = [self.header, rule, *self.rows]
        return "\n".join("| " + " | ".join(_md(c) for c in line) + " |"
                         for line in lines)


BLANKS = ("", "-", "—")


def _numeric(text: str) -> bool:
    return text.replace(",", "").replace(".", "", 1).lstrip("-+").isdigit()


def _md(text: str) -> str:
    return text.replace("|", "\\|")

