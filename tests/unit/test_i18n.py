"""The Chinese edition must be complete: every catalog fully translated, nothing fuzzy."""

import importlib.util
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs"
LOCALES = DOCS / "locales" / "zh_CN" / "LC_MESSAGES"


def _checker():
    spec = importlib.util.spec_from_file_location("check_translations",
                                                  DOCS / "check_translations.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CATALOGS = sorted(LOCALES.glob("*.po"))


def test_every_page_has_a_catalog():
    pages = {p.stem for p in DOCS.glob("*.md")} - {"README"}
    assert pages <= {c.stem for c in CATALOGS}, "run 'nox -s i18n' and translate the new pages"


@pytest.mark.parametrize("po", CATALOGS, ids=[c.stem for c in CATALOGS])
def test_catalog_complete(po):
    stats = _checker().catalog_stats(po)
    assert stats["untranslated"] == 0 and stats["fuzzy"] == 0, stats
    assert stats["translated"] > 0


def test_checker_flags_missing_translations(tmp_path):
    po = tmp_path / "x.po"
    po.write_text('msgid ""\nmsgstr ""\n"Language: zh_CN\\n"\n\n'
                  'msgid "Hello"\nmsgstr ""\n\n#, fuzzy\nmsgid "World"\nmsgstr "世界"\n\n'
                  'msgid "Done"\nmsgstr "完成"\n', encoding="utf-8")
    checker = _checker()
    assert checker.catalog_stats(po) == {"translated": 1, "untranslated": 1, "fuzzy": 1}
    assert checker.main(tmp_path) == 1
