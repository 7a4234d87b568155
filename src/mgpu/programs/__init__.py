"""The programs the book runs in other processes: ``python -m mgpu NAME --arg v``.

One mechanism: a program is a function of one of these modules (``ps``, ``kvstore``,
``engine``, ``fresh``, ``horovod``), named in :mod:`mgpu.programs.registry`,
reporting its results with :func:`mgpu.programs.report.report` (one JSON line each),
which :func:`mgpu.programs.report.read_reports` reads back;
:func:`mgpu.programs.run.run_program` runs one in a fresh process. Importing this
package imports nothing else.
"""
