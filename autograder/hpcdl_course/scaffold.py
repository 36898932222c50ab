"""Start a new assignment: solutions/<name>/<name>.nb.py in the course's arc, and its answers.toml.

The notebook (templates/notebook.nb.py) is a small working exercise, squaring a vector, with every
part of the arc: what you will learn, the accounting, the exercise, setup, answer, test helpers,
visible, hidden and speed tests, and a measurement. answers.toml (templates/answers.toml) holds one
right and one wrong answer to it. The author replaces the placeholder exercise and its answers.
"""
import pathlib
import re
import string

from . import paths

TEMPLATES = pathlib.Path(__file__).with_name("templates")
NAME = re.compile(r"[0-9]{2}_[a-z0-9_]+")


class ScaffoldError(ValueError):
    pass


def title(name: str) -> str:
    """'05_int4_packing' -> 'Int4 packing'."""
    return name[3:].replace("_", " ").strip().capitalize()


def create(name: str, root=None) -> list:
    """Write the new assignment's two files under root (default: solutions/); returns their paths.
    Refuses a malformed name and an assignment folder that already exists."""
    if not NAME.fullmatch(name):
        raise ScaffoldError(f"{name!r} is not an assignment name: two digits, an underscore, then lower-case "
                            f"letters, digits and underscores, such as 05_int4_packing")
    folder = pathlib.Path(root or paths.SOLUTIONS) / name
    if folder.exists():
        raise ScaffoldError(f"{folder} already exists: not overwriting it")
    values = {"name": name, "number": name[:2], "title": title(name)}
    texts = {folder / f"{name}.nb.py": "notebook.nb.py", folder / "answers.toml": "answers.toml"}
    texts = {path: string.Template((TEMPLATES / template).read_text()).substitute(values)
             for path, template in texts.items()}
    folder.mkdir(parents=True)
    for path, text in texts.items():
        path.write_text(text)
    return list(texts)
