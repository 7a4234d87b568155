"""How the book's executing cells tie the prose to the measurements.

A sentence that states an outcome is only as good as its check. Two kinds of check:

- :func:`require` for deterministic claims (sums, equality, counts): when the claim does not hold,
  it raises :class:`ClaimError` and the build fails, naming the claim.
- :func:`pick` for claims that depend on timing: the measurement chooses which of two prepared
  sentences the page shows, in English and in Chinese, so a noisy machine changes the words,
  never the build's result.

The numbers themselves reach the prose with :func:`glue` (MyST-NB's ``glue``). The Chinese
edition's catalogs refer to the ``*_zh`` keys that :func:`pick` glues.
"""

from __future__ import annotations

__all__ = ["ClaimError", "glue", "pick", "require"]


class ClaimError(AssertionError):
    """A deterministic claim of the book's text that the build's own results contradict."""


def require(holds: bool, claim: str, found: object = None) -> None:
    """Fail the build if ``claim`` (the sentence, as the page states it) does not hold.

    >>> require(1 + 1 == 2, "one and one make two")
    >>> require(sum([1, 2]) == 4, "the sum is 4", found=3)
    Traceback (most recent call last):
    ...
    mgpu.book.ClaimError: the text claims "the sum is 4", but this build found 3: ...
    """
    if not holds:
        raise ClaimError(
            f'the text claims "{claim}", but this build found '
            f"{'otherwise' if found is None else found}: fix the text or the code before "
            "publishing")


def glue(key: str, value: object) -> object:
    """Glue ``value`` under ``key`` for the page's glue roles (nothing outside a notebook build).

    In the page, refer to it with MyST-NB's ``glue:text`` role and the document-qualified key
    ``<page>.md::key:<format>``: that form resolves in the Chinese edition too, whose translated
    paragraphs are parsed again without the notebook's glue data (myst-nb 1.4); strings need the
    format ``s``.
    """
    try:
        from myst_nb import glue as myst_glue
    except ImportError:  # plain Python or a notebook without MyST-NB: nothing to glue into
        return value
    myst_glue(key, value, display=False)
    return value


def pick(key: str, holds: bool, en: tuple[str, str], zh: tuple[str, str]) -> bool:
    """Glue the sentence the measurement supports: ``en[0]`` if ``holds`` else ``en[1]``.

    The English text is glued as ``key`` and the Chinese as ``key + "_zh"``; return ``holds``.

    >>> pick("faster", 2.0 > 1.0, ("is faster", "is not faster"), ("更快", "并不更快"))
    True
    """
    glue(key, en[0] if holds else en[1])
    glue(f"{key}_zh", zh[0] if holds else zh[1])
    return holds
