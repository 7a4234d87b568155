"""Check that every message catalog of the Chinese edition is complete.

Usage: ``python docs/check_translations.py [LOCALE_DIR]``. Exits 1 and lists the catalogs with
untranslated or fuzzy entries; a new English paragraph without its translation fails CI here.
"""

from __future__ import annotations

import sys
from pathlib import Path

from babel.messages.pofile import read_po

LOCALES = Path(__file__).parent / "locales" / "zh_CN" / "LC_MESSAGES"


def catalog_stats(po: Path) -> dict[str, int]:
    """Counts of translated, untranslated and fuzzy messages in one ``.po`` file."""
    with po.open("rb") as f:
        catalog = read_po(f)
    stats = {"translated": 0, "untranslated": 0, "fuzzy": 0}
    for message in catalog:
        if not message.id:  # the header
            continue
        if message.fuzzy:
            stats["fuzzy"] += 1
        elif not message.string or (isinstance(message.string, tuple) and not all(message.string)):
            stats["untranslated"] += 1
        else:
            stats["translated"] += 1
    return stats


def main(locale_dir: Path = LOCALES) -> int:
    catalogs = sorted(locale_dir.glob("*.po"))
    if not catalogs:
        print(f"no catalogs in {locale_dir}: run 'nox -s i18n' first")
        return 1
    bad = 0
    for po in catalogs:
        s = catalog_stats(po)
        flag = "" if s["untranslated"] == s["fuzzy"] == 0 else "   <-- incomplete"
        bad += bool(flag)
        print(f"{po.name:32} {s['translated']:4} translated, {s['untranslated']:3} untranslated,"
              f" {s['fuzzy']:3} fuzzy{flag}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else LOCALES))
