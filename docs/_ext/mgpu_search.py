"""Sphinx extension of the mgpu book: a Chinese search that finds the book's terms.

The glossary's Chinese terms (``mgpu_search_glossary``) become words of jieba (a user
dictionary, ``html_search_options["dict"]``), of the index and of the query; and on the Sphinx
versions whose JavaScript asks for a ``ChineseStemmer`` that does not exist, the search names the
stemmer that does.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import sphinx
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

logger = logging.getLogger(__name__)


# --- the Chinese search: jieba's words, and the glossary's terms as words -------------------
# Sphinx 9.0 moved the Chinese search to Snowball's english-stemmer.js (sphinx-doc/sphinx#13574)
# but language_data.js still names the stemmer class after the language, ``ChineseStemmer``,
# which does not exist: the search page throws a ReferenceError and finds nothing (issue
# sphinx-doc/sphinx#14229). Fixed upstream by deriving the class name from the stemmer's file
# name, sphinx-doc/sphinx#14416, listed in CHANGES.rst under Sphinx 9.1.1 (the first release
# with the fix; 9.1 needs Python 3.12+). Sphinx 8 and older ship a porter stemmer for Chinese.
CHINESE_STEMMER_BROKEN = (9, 0, 0) <= sphinx.version_info[:3] < (9, 1, 1)

CJK_RUN = re.compile(r"[\u4e00-\u9fff]+")
# jieba's frequency for the glossary's terms in its user dictionary: high enough that jieba
# keeps each term whole in every sentence of the book (with the frequency jieba computes when
# none is given, 拉取 was split in 3 sentences of 18).
GLOSSARY_WORD_FREQUENCY = 100000


def glossary_terms(glossary: Path, column: str) -> list[str]:
    """The Chinese terms of the glossary's table: each run of Chinese characters of ``column``
    (``延后执行（惰性求值）`` gives 延后执行 and 惰性求值), in table order, without repeats."""
    rows = [line.strip() for line in glossary.read_text("utf-8").splitlines()
            if line.strip().startswith("|")]
    if not rows:
        return []
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    if column not in header:
        raise ValueError(f"{glossary}: no column {column!r} in the glossary's table ({header})")
    index, terms = header.index(column), []
    for row in rows[2:]:  # after the header and its |---| line
        cells = [c.strip() for c in row.strip("|").split("|")]
        if index < len(cells):
            terms += [t for t in CJK_RUN.findall(cells[index]) if t not in terms]
    return terms


# The query side. searchtools.js splits a query only at spaces and punctuation, so a Chinese
# query is looked up as one word: a glossary term is found as it is typed (it is an index term),
# but "参数服务器的作用" is not. This splitter (language_data.js's ``splitQuery``) cuts a run of
# Chinese that is not itself an index term into the longest index terms it contains, from the
# left, and drops the characters between them (which would otherwise be required words that no
# page has); a run with no index term in it is kept whole.
ZH_SPLIT_QUERY_JS = r"""
var splitQuery = (query) => {
  const parts = query
    .split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)
    .filter((term) => term);
  const index = typeof Search !== "undefined" && Search._index ? Search._index : null;
  if (!index) return parts;
  const has = (table, word) => Object.prototype.hasOwnProperty.call(table || {}, word);
  const known = (word) =>
    has(index.terms, word.toLowerCase()) || has(index.titleterms, word.toLowerCase());
  const result = [];
  parts.forEach((part) => {
    if (known(part) || !/\p{Script=Han}/u.test(part)) {
      result.push(part);
      return;
    }
    const found = [];
    let i = 0;
    while (i < part.length) {
      let j = Math.min(part.length, i + 16);
      while (j > i + 1 && !known(part.slice(i, j))) j--;
      if (known(part.slice(i, j))) {
        found.push(part.slice(i, j));
        i = j;
      } else {
        i += 1;
      }
    }
    result.push(...(found.length ? found : [part]));
  });
  return result;
};
"""


def _glossary_words_file(config: Config) -> Path | None:
    """Where the jieba dictionary of the glossary's terms goes: html_search_options' ``dict``."""
    path = (config.html_search_options or {}).get("dict")
    return Path(path) if path else None


def _chinese_search(app: Sphinx, config: Config) -> None:
    """The Chinese edition's search: the glossary's Chinese terms become words of jieba (a user
    dictionary written to ``html_search_options["dict"]``, which Sphinx's Chinese search loads),
    index terms of every page that uses them, and words of the query (``ZH_SPLIT_QUERY_JS``)."""
    search_language = config.html_search_language or config.language or ""
    if not search_language.startswith("zh"):
        return
    from sphinx.search.zh import SearchChinese  # imports jieba: only in Chinese builds

    terms: list[str] = []
    if config.mgpu_search_glossary:
        glossary = Path(app.confdir) / config.mgpu_search_glossary
        terms = glossary_terms(glossary, config.mgpu_search_glossary_column)
        if not terms:
            raise ValueError(f"{glossary}: no Chinese term in column "
                             f"{config.mgpu_search_glossary_column!r} of its table")
        words = _glossary_words_file(config)
        if words is None:
            raise ValueError("mgpu_search_glossary needs html_search_options['dict']: the file "
                             "jieba's dictionary of the glossary's terms is written to")
        text = "".join(f"{t} {GLOSSARY_WORD_FREQUENCY}\n" for t in terms)
        words.parent.mkdir(parents=True, exist_ok=True)
        if not words.is_file() or words.read_text("utf-8") != text:
            words.write_text(text, "utf-8")
        # A new term re-writes (and re-indexes) every page.
        config.mgpu_search_glossary_digest = hashlib.sha256(text.encode()).hexdigest()
    glossary_set = frozenset(terms)

    class SearchChineseGlossary(SearchChinese):
        """Sphinx's Chinese search, with the glossary's terms as index terms wherever they occur
        (even where jieba's HMM glues a term to its neighbour: 个键) and as words of the query."""

        if CHINESE_STEMMER_BROKEN:
            language_name = "English"  # language_data.js: window.Stemmer = EnglishStemmer;
        js_splitter_code = ZH_SPLIT_QUERY_JS

        def split(self, input: str) -> list[str]:  # noqa: A002 (Sphinx's name)
            words = super().split(input)
            return words + [t for t in glossary_set if t in input]

        def word_filter(self, stemmed_word: str) -> bool:
            # Sphinx drops words of one character; the glossary has one (键, key).
            return super().word_filter(stemmed_word) or stemmed_word in glossary_set

    app.add_search_language(SearchChineseGlossary)


def setup(app: Sphinx) -> dict[str, Any]:
    # The glossary (a page with a table) whose Chinese column holds the terms the Chinese
    # search must find, and the digest of those terms (computed; a change re-indexes every page).
    app.add_config_value("mgpu_search_glossary", "", "html", types=(str,))
    app.add_config_value("mgpu_search_glossary_column", "Chinese", "html", types=(str,))
    app.add_config_value("mgpu_search_glossary_digest", "", "html", types=(str,))
    app.connect("config-inited", _chinese_search, priority=600)  # after mgpu_book._per_language
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
