"""Answers that reach for the grader, the libraries, the interpreter or the file system, for an
instructor to review. A flag costs no points: the checks decide the grade. It says where to look.

The learner's code cannot change a verdict (checker.py), so these are reasons to read a
submission, not defences; honest answers rarely need any of these constructs.
"""
import ast

# Modules an answer to a kernel exercise has no use for; each gives reach beyond the exercise.
SUSPECT_MODULES = {"os", "subprocess", "ctypes", "builtins", "importlib", "gc", "inspect", "threading",
                   "multiprocessing", "signal", "socket", "shutil", "pathlib", "IPython", "pickle", "marshal",
                   "atexit", "sqlite3", "nbgrader", "hpcdl_course", "sys", "io", "tempfile", "glob", "pty",
                   "resource", "mmap", "urllib", "http", "requests", "asyncio", "concurrent", "traceback", "types"}
SUSPECT_CALLS = {"open", "exec", "eval", "compile", "__import__", "globals", "vars", "setattr", "delattr",
                 "get_ipython", "breakpoint", "memoryview"}
# Reading these is harmless; anything else on sys (modules, settrace, stdout replaced...) is flagged.
HARMLESS_SYS = {"stderr", "stdout", "version_info", "maxsize", "float_info"}
# hpcdl's own machinery for grading: the worker that runs answers, its messages and guards.
GRADER_INTERNALS = {"worker", "remote", "wire", "guard", "processes", "isolation"}
# Frames and their variables: how code finds the objects that called it (the worker, a check).
FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_builtins", "gi_frame", "cr_frame", "ag_frame", "tb_frame"}
SHARED_NAMES = {"hpcdl", "torch", "triton", "tl", "math", "np", "numpy", "time", "random", "DEVICE"}


def _root_name(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def review(cell_id: str, source: str, protected: set) -> list:
    """Reasons to review one answer cell. `protected` holds names that locked cells define."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []

    def flag(node, why):
        found.append(f"{cell_id} line {getattr(node, 'lineno', '?')}: {why}")

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.module == "hpcdl":
                mods = [f"hpcdl.{a.name}" for a in node.names]
            for m in mods:
                top, _, sub = m.partition(".")
                if top == "hpcdl" and sub.split(".")[0] in GRADER_INTERNALS:
                    flag(node, f"imports {m}, the grader's own machinery")
                elif top in SUSPECT_MODULES:
                    if m == "sys" and isinstance(node, ast.Import):
                        continue  # judged by what it touches, below
                    flag(node, f"imports {m}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SUSPECT_CALLS:
            flag(node, f"calls {node.func.id}()")
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in ("__name__", "__init__"):
                flag(node, f"reaches for {node.attr}")
            elif node.attr in FRAME_ATTRS:
                flag(node, f"reaches for a frame ({node.attr})")
            elif isinstance(node.value, ast.Name) and node.value.id == "hpcdl" and node.attr in GRADER_INTERNALS:
                flag(node, f"reaches for hpcdl.{node.attr}, the grader's own machinery")
            elif isinstance(node.value, ast.Name) and node.value.id == "sys" and node.attr not in HARMLESS_SYS:
                flag(node, f"uses sys.{node.attr}")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                for leaf in ast.walk(t):
                    if isinstance(leaf, ast.Attribute) and _root_name(leaf) in SHARED_NAMES | protected:
                        flag(node, f"changes {ast.unparse(leaf)}")
                    elif isinstance(leaf, ast.Name) and isinstance(leaf.ctx, (ast.Store, ast.Del)) \
                            and leaf.id in SHARED_NAMES | protected:
                        flag(node, f"rebinds {leaf.id}, which the notebook's locked cells define")
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in SHARED_NAMES | protected:
            flag(node, f"redefines {node.name}, which the notebook's locked cells define")
        elif isinstance(node, ast.Global):
            for name in node.names:
                if name in SHARED_NAMES | protected:
                    flag(node, f"declares global {name}")
    return found


def defined_names(source: str) -> set:
    """Top-level names a (locked) cell binds."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names
