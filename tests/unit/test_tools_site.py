"""tools/site.py: the published site assembled from a small fake two-edition build."""

from tools.site import prune_images, publish, share_static, site_size

THEME = "body { color: black }\n" * 50


def page(static: str, images: str = "") -> str:
    return (f'<link href="{static}_static/theme.css" rel="stylesheet">'
            f'<script src="{static}_static/lang.js?v=1"></script>'
            f'<script src="{static}_static/js/app.js"></script>{images}')


def edition(root, language, lang_js):
    """A Sphinx edition's build directory: two pages (one in a folder), _static, _images."""
    root.mkdir(parents=True)
    (root / "index.html").write_text(page("", '<img src="_images/shown.png">'))
    (root / "part").mkdir()
    (root / "part" / "chapter.html").write_text(page("../"))
    static = root / "_static"
    (static / "js").mkdir(parents=True)
    (static / "locales" / language).mkdir(parents=True)
    (static / "theme.css").write_text(THEME)
    (static / "js" / "app.js").write_text("app()")
    (static / "lang.js").write_text(lang_js)
    (static / "theme.css.map").write_text("{}")
    (static / "locales" / language / "theme.mo").write_text("catalog")
    (root / "_images").mkdir()
    (root / "_images" / "shown.png").write_bytes(b"png")
    (root / "_images" / "stale.png").write_bytes(b"old")
    (root / ".buildinfo").write_text("config")
    (root / "webpack-macros.html").write_text("{% macro %}")


def build_tree(tmp_path):
    build, root_pages = tmp_path / "_build", tmp_path / "_root"
    edition(build / "sphinx" / "en", "en", "english()")
    edition(build / "sphinx" / "zh_CN", "zh_CN", "chinese()")
    root_pages.mkdir()
    (root_pages / "index.html").write_text("choose a language")
    (root_pages / "404.html").write_text("not found")
    return build, root_pages


def test_publish_keeps_only_what_readers_load(tmp_path):
    build, root_pages = build_tree(tmp_path)
    site = publish(build, root_pages, ("en", "zh_CN"))
    assert site == build / "html"
    files = sorted(f.relative_to(site).as_posix() for f in site.rglob("*") if f.is_file())
    assert files == [
        ".nojekyll", "404.html",
        "en/_images/shown.png", "en/_static/js/app.js", "en/_static/lang.js",
        "en/_static/theme.css", "en/index.html", "en/part/chapter.html",
        "index.html",
        "zh_CN/_images/shown.png", "zh_CN/_static/lang.js", "zh_CN/index.html",
        "zh_CN/part/chapter.html",
    ]
    assert (site / "index.html").read_text() == "choose a language"
    # The English edition is untouched; the Chinese one loads the shared files from it.
    assert (site / "en" / "part" / "chapter.html").read_text() == page("../")
    assert (site / "zh_CN" / "index.html").read_text() == (
        '<link href="../en/_static/theme.css" rel="stylesheet">'
        '<script src="_static/lang.js?v=1"></script>'
        '<script src="../en/_static/js/app.js"></script><img src="_images/shown.png">')
    assert (site / "zh_CN" / "part" / "chapter.html").read_text() == (
        '<link href="../../en/_static/theme.css" rel="stylesheet">'
        '<script src="../_static/lang.js?v=1"></script>'
        '<script src="../../en/_static/js/app.js"></script>')
    # The build directories are left as they were.
    assert (build / "sphinx" / "zh_CN" / "_images" / "stale.png").is_file()


def test_publish_starts_from_scratch(tmp_path):
    build, root_pages = build_tree(tmp_path)
    (build / "html" / "old").mkdir(parents=True)
    (build / "html" / "old" / "page.html").write_text("stale")
    site = publish(build, root_pages, ("en",))
    assert not (site / "old").exists() and not (site / "zh_CN").exists()
    assert (site / "en" / "_static" / "theme.css").is_file()


def test_share_static_returns_the_bytes_saved(tmp_path):
    build, _ = build_tree(tmp_path)
    site = build / "sphinx"
    saved = share_static(site, "en", "zh_CN")
    assert saved == len(THEME) + len("app()") + len("{}")  # each edition's own catalog stays
    assert (site / "zh_CN" / "_static" / "locales" / "zh_CN" / "theme.mo").is_file()
    assert not (site / "zh_CN" / "_static" / "js").exists()  # emptied folders go too
    assert (site / "zh_CN" / "_static" / "lang.js").read_text() == "chinese()"


def test_prune_images_deletes_what_no_page_shows(tmp_path):
    build, _ = build_tree(tmp_path)
    prune_images(build / "sphinx" / "en")
    assert sorted(f.name for f in (build / "sphinx" / "en" / "_images").iterdir()) == ["shown.png"]


def test_site_size_counts_every_file(tmp_path):
    build, _ = build_tree(tmp_path)
    edition_size = site_size(build / "sphinx" / "en")
    assert site_size(build / "sphinx") == 2 * edition_size + len("chinese()") - len("english()")


def test_the_source_archive_is_published_once(tmp_path):
    """An identical file in both editions' _downloads is kept in the base edition only, and the
    other edition's pages link there; a file of its own (its notebooks) stays."""
    build, root_pages = build_tree(tmp_path)
    for language in ("en", "zh_CN"):
        downloads = build / "sphinx" / language / "_downloads"
        downloads.mkdir()
        (downloads / "mgpu-source.tar.gz").write_bytes(b"tar" * 100)
        (downloads / f"notebooks-{language}.zip").write_bytes(language.encode())
        (build / "sphinx" / language / "part" / "chapter.html").write_text(
            f'<a href="../_downloads/mgpu-source.tar.gz">source</a>'
            f'<a href="../_downloads/notebooks-{language}.zip">notebooks</a>')
    site = publish(build, root_pages, ("en", "zh_CN"))
    assert not (site / "zh_CN" / "_downloads" / "mgpu-source.tar.gz").exists()
    assert (site / "zh_CN" / "_downloads" / "notebooks-zh_CN.zip").is_file()
    assert (site / "zh_CN" / "part" / "chapter.html").read_text() == (
        '<a href="../../en/_downloads/mgpu-source.tar.gz">source</a>'
        '<a href="../_downloads/notebooks-zh_CN.zip">notebooks</a>')


def test_sources_no_page_links_are_not_published(tmp_path):
    """A page's notebook in _sources stays; what an earlier build left there goes."""
    build, root_pages = build_tree(tmp_path)
    sources = build / "sphinx" / "en" / "_sources"
    sources.mkdir()
    (sources / "index.ipynb").write_text("{}")
    (sources / "index.md").write_text("# stale MyST source")
    (build / "sphinx" / "en" / "index.html").write_text('<a href="_sources/index.ipynb">nb</a>')
    site = publish(build, root_pages, ("en",))
    assert sorted(p.name for p in (site / "en" / "_sources").iterdir()) == ["index.ipynb"]
