"""Sphinx extension of the mgpu book: the Chinese edition's citations and theme strings.

- **Citations.** sphinxcontrib-bibtex's ``author_year`` style writes 「Goyal *et al.* [2017]」
  in both editions. The reference style ``author_year_zh`` (registered here as a plugin of the
  group ``sphinxcontrib.bibtex.style.referencing``) writes 「Goyal 等人（2017）」 for
  ``{cite:t}``, 「（Goyal 等人，2017）」 for ``{cite:p}`` and 「Li 和 Smola（2014）」 for two
  authors. ``conf.py`` chooses it for the Chinese edition (``mgpu_per_language["zh"]``, applied
  by ``_ext/mgpu_book.py`` on ``config-inited``; sphinxcontrib-bibtex reads
  ``bibtex_reference_style`` later, on ``builder-inited``). The English edition keeps
  ``author_year``. The catalogs write a space on either side of a role, as between Chinese and
  Latin words; beside a full-width parenthesis the Chinese edition drops it
  (「规则（Goyal 等人，2017）。」, 「Goyal 等人（2017）采用」).
- **Theme strings.** The themes' own Chinese catalogs print 「列印成 PDF」 (sphinx-book-theme's
  ``booktheme`` domain) and 「链接到此标题。」, 「最后更新于 ….」 (Sphinx's and
  pydata-sphinx-theme's ``sphinx`` domain). The book's catalogs of those domains, beside the
  pages' in ``locales/<language>/LC_MESSAGES/`` (``sphinx.po``, ``booktheme.po``), hold the
  corrections, and win:

  * ``sphinx``: Sphinx loads this domain from ``locale_dirs`` first, its own catalog and
    pydata-sphinx-theme's (``app.add_message_catalog("sphinx", ...)``) come after as
    fallbacks (``sphinx.locale.init`` keeps the first catalog found and adds the others with
    ``add_fallback``). Sphinx compiles ``sphinx.po`` itself (``Sphinx._init_i18n``).
  * other domains (``booktheme``): the first catalog registered for a domain wins the same
    way. sphinx-book-theme registers its catalog when the theme is loaded, as the builder
    starts; this extension compiles the book's ``.po`` and registers it on ``config-inited``,
    before that, so that the theme's catalog becomes the fallback.

  Only messages the book corrects are in these catalogs; the rest come from the themes. Keep
  ``_()`` out of ``_templates/``: the gettext builder would write a ``sphinx.pot`` of the
  templates' messages, and ``sphinx-intl update`` would drop the corrections of ``sphinx.po``
  as obsolete.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging
from sphinxcontrib.bibtex.plugin import register_plugin
from sphinxcontrib.bibtex.style.referencing import BracketStyle, PersonStyle
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle

logger = logging.getLogger(__name__)

REFERENCE_STYLE_GROUP = "sphinxcontrib.bibtex.style.referencing"
REFERENCE_STYLE_ZH = "author_year_zh"
# Domains of the themes' messages that the book's catalogs correct; "sphinx" is loaded from
# locale_dirs by Sphinx itself.
THEME_DOMAINS = ("booktheme",)


# --- citations ---------------------------------------------------------------------------------
def _brackets() -> BracketStyle:
    """Full-width parentheses; several works in one citation are separated by 「；」."""
    return BracketStyle(left="（", right="）", sep="；")


def _textual_brackets() -> BracketStyle:
    """「Goyal 等人（2017）、Li 等人（2014）和 Zhang 等人（2019）」."""
    return BracketStyle(left="（", right="）", sep="、", sep2="和 ", last_sep="和 ")


def _persons() -> PersonStyle:
    """「Goyal」, 「Li 和 Smola」, 「Goyal 等人」 (all names with ``{cite:ts}``: 「A、B 和 C」)."""
    return PersonStyle(sep="、", sep2=" 和 ", last_sep=" 和 ", other=" 等人")


@dataclass
class ChineseAuthorYearReferenceStyle(AuthorYearReferenceStyle):
    """sphinxcontrib-bibtex's author-year references, written the Chinese way."""

    bracket_textual: BracketStyle = field(default_factory=_textual_brackets)
    bracket_parenthetical: BracketStyle = field(default_factory=_brackets)
    bracket_author: BracketStyle = field(default_factory=_brackets)
    bracket_label: BracketStyle = field(default_factory=_brackets)
    bracket_year: BracketStyle = field(default_factory=_brackets)
    person: PersonStyle = field(default_factory=_persons)
    author_year_sep: str = "，"
    text_reference_sep: str = ""  # 「Goyal 等人（2017）」: no space before the full-width （
    pre_text_sep: str = ""
    post_text_sep: str = "，"


def _tight_parentheses(app: Sphinx, doctree: Any, docname: str) -> None:
    """Drop the spaces between a citation's full-width parenthesis and the text beside it."""
    from docutils import nodes

    if not (app.config.language or "en").startswith("zh"):
        return
    for citation in list(doctree.findall(nodes.inline)):
        if "bibtex-citation" not in citation["classes"] or citation.parent is None:
            continue
        text = citation.astext()
        parent = citation.parent
        at = parent.index(citation)
        before = parent[at - 1] if at > 0 else None
        after = parent[at + 1] if at + 1 < len(parent) else None
        if text.startswith("（") and isinstance(before, nodes.Text):
            parent.replace(before, nodes.Text(before.astext().rstrip(" ")))
        if text.endswith("）") and isinstance(after, nodes.Text):
            parent.replace(after, nodes.Text(after.astext().lstrip(" ")))


# --- the themes' messages ----------------------------------------------------------------------
def _theme_catalogs(app: Sphinx, config: Config) -> None:
    """Compile the book's catalogs of the themes' domains and register them ahead of the
    themes' own (see the module's docstring)."""
    from sphinx.util.i18n import CatalogRepository

    if not config.language or config.language == "en":
        return
    repo = CatalogRepository(app.srcdir, config.locale_dirs, config.language,
                             config.source_encoding)
    for catalog in repo.catalogs:
        if catalog.domain not in THEME_DOMAINS:
            continue
        if catalog.is_outdated():
            catalog.write_mo(config.language, config.gettext_allow_fuzzy_translations)
        # locale_dirs[i]/<language>/LC_MESSAGES/<domain>.po: the locale dir is two levels up.
        app.add_message_catalog(catalog.domain, Path(catalog.po_path).parents[2])


def register_reference_style() -> None:
    """Make ``bibtex_reference_style = "author_year_zh"`` this module's style."""
    register_plugin(REFERENCE_STYLE_GROUP, REFERENCE_STYLE_ZH, ChineseAuthorYearReferenceStyle,
                    force=True)


def setup(app: Sphinx) -> dict[str, Any]:
    # Before builder-inited, when sphinxcontrib-bibtex looks the style up.
    register_reference_style()
    # Before the theme is loaded (builder-inited at the latest); after _per_language does not
    # matter, it changes no locale setting.
    app.connect("config-inited", _theme_catalogs, priority=450)
    app.connect("doctree-resolved", _tight_parentheses)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
