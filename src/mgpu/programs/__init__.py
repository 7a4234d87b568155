"""The programs the book runs in other processes: ``python -m mgpu NAME --arg v``."""
