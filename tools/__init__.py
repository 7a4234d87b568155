"""What ``noxfile.py``'s sessions call, as modules with tests (tests/unit/test_tools_*.py).

Standard library only, and never nox: nox's own interpreter imports them (``noxfile.py`` puts the
repository on ``sys.path``), and so do the tests and the book's Sphinx extension
(``docs/_ext/mgpu_book.py`` shares :func:`tools.stamps.digest`). A step that needs a session's
abilities takes them as plain callables (``run``, ``install``, ``log``); a step that cannot go on
raises :class:`tools.system.SetupError`, whose message the session reports.

- ``stamps``: digests of what a step was done from, so that it is done once;
- ``system``: the MXNet build for this machine, and what is installed from Debian (one
  ``apt-get install`` path): the data set, CJK fonts, sshd, Chromium;
- ``horovod_wheel``: Horovod for MXNet with Gloo, built once per version and cached;
- ``catalogs``: the Chinese edition's message catalogs, extracted when their sources change;
- ``site``: the published site assembled from the editions' build directories.
"""
