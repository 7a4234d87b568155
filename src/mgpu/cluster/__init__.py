"""Processes and launchers, standard library only: nothing here imports MXNet.

:mod:`~mgpu.cluster.processes` (``/proc``, the one way to stop processes, free ports),
:mod:`~mgpu.cluster.job` (the checked arguments of a local job),
:mod:`~mgpu.cluster.local` (a local parameter-server cluster),
:mod:`~mgpu.cluster.mxlaunch` (MXNet's launcher, fixed),
:mod:`~mgpu.cluster.horovodrun` (``horovodrun``) and
:mod:`~mgpu.cluster.hosts` (several hosts on one machine: namespaces, shaped links,
sshd)."""
