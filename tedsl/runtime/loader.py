"""``load_module``: load a shared library written by ``Module.export_library``."""


def load_module(path):
    raise NotImplementedError
