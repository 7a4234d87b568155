"""tools/catalogs.py: the catalogs are extracted again only when their sources change."""

from tools.catalogs import catalog_sources, update_catalogs


def book(tmp_path):
    docs = tmp_path / "docs"
    (docs / "_ext").mkdir(parents=True)
    (docs / "locales" / "zh_CN" / "LC_MESSAGES").mkdir(parents=True)
    (docs / "index.md").write_text("# The book")
    (docs / "conf.py").write_text("project = 'mgpu'")
    (docs / "_ext" / "ext.py").write_text("")
    (docs / "locales" / "zh_CN" / "LC_MESSAGES" / "index.po").write_text('msgid ""')
    (docs / "notes.txt").write_text("not a source")
    lock = tmp_path / "constraints.txt"
    lock.write_text("sphinx==8.1.3")
    return docs, tmp_path / "docs" / "_build", lock


def test_catalog_sources(tmp_path):
    docs, _, lock = book(tmp_path)
    names = [f.relative_to(tmp_path).as_posix() for f in catalog_sources(docs, lock)]
    assert names == ["constraints.txt", "docs/_ext/ext.py", "docs/conf.py", "docs/index.md",
                     "docs/locales/zh_CN/LC_MESSAGES/index.po"]


def test_extracted_again_only_after_a_change(tmp_path):
    docs, build, lock = book(tmp_path)
    commands, log = [], []
    po = docs / "locales" / "zh_CN" / "LC_MESSAGES" / "index.po"

    def run(*command, silent=False):
        commands.append(command[0])
        if command[0] == "sphinx-build":
            (build / "gettext").mkdir(parents=True, exist_ok=True)
        else:  # sphinx-intl merges into the catalogs: the stamp records them as they are after
            po.write_text(po.read_text() + "\nmsgid \"The book\"")

    def update():
        update_catalogs(docs, build, lock, run, log.append, force=False)

    update()
    assert commands == ["sphinx-build", "sphinx-intl"] and log == []
    update()
    assert len(commands) == 2
    assert log == ["catalogs: no page, catalog or conf changed since the last extraction, "
                   "not extracted again"]
    (docs / "index.md").write_text("# The book, edited")
    update()
    assert len(commands) == 4
    update_catalogs(docs, build, lock, run, log.append)  # forced (nox -s i18n)
    assert len(commands) == 6 and len(log) == 1
