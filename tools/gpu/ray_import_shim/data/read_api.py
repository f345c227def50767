"""``ray.data.read_api`` of the GPU-device Ray import shim: Data-Juicer's ``ray_dataset`` module subclasses
its JSON datasource and builds a ``Partitioning("hive")`` default argument at import time."""

from ray.data import _placeholder


class Partitioning:
    """Held as a default argument only."""

    def __init__(self, style, *args, **kwargs):
        self.style = style


def __getattr__(name):
    return _placeholder(globals(), "data.read_api", name)
