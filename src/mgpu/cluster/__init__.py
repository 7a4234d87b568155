"""Processes and launchers: a local parameter-server cluster, ``mxlaunch`` and
``horovodrun``. Standard library only: nothing here imports MXNet."""
