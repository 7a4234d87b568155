"""Processes and launchers, standard library only: nothing here imports MXNet.

:mod:`~mgpu.cluster.processes` (``/proc``, the one way to stop processes, free ports),
:mod:`~mgpu.cluster.job` (the checked arguments of a local job),
:mod:`~mgpu.cluster.local` (a local parameter-server cluster),
:mod:`~mgpu.cluster.mxlaunch` (MXNet's launcher, fixed) and
:mod:`~mgpu.cluster.horovodrun` (``horovodrun`` on loopback)."""
