"""Answer files: code that must live in a file (a module the ranks import, a C++ source) is written
in an answer cell as a string, and a locked cell writes it out:

    RING_ALLREDUCE_PY = r'''
    def ring_allreduce(comm, x):
        ...
    '''                                                   # the answer cell
    path = hpcdl.files.write("ring_allreduce.py", RING_ALLREDUCE_PY)   # the locked cell after it
"""
import os
import pathlib
import tempfile
import textwrap


def write(path, text: str) -> pathlib.Path:
    """Write `text` (dedented, ending in a newline) to `path`, relative to the notebook's folder, and
    return its absolute path. The file is replaced in one step: a process reading it never sees half."""
    path = pathlib.Path(path).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = textwrap.dedent(text).lstrip("\n")
    text = text if text.endswith("\n") else text + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path
