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
# The grader's machinery: hpcdl_grader (the worker that runs answers, its messages, the checker's clock) and
# hpcdl's modules for other processes and guards, which an answer reaches through checks, never directly.
GRADER_PACKAGE = "hpcdl_grader"
GRADER_INTERNALS = {"elsewhere", "guard", "processes", "isolation"}
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
    shared = SHARED_NAMES | protected
    found = [f"{cell_id} line {getattr(node, 'lineno', '?')}: {why}"
             for node in ast.walk(tree) for why in _reasons(node, shared)]
    for name, file_tree in _python_files(tree):
        found += [f"{cell_id}, file {name} line {getattr(node, 'lineno', '?')}: {why}"
                  for node in ast.walk(file_tree) for why in _reasons(node, SHARED_NAMES)]
    return found


def _python_files(tree) -> list:
    """(name, syntax tree) of each string assigned to a name in capitals that parses as Python: a file that
    ranks or other processes import (README, "Answers that are files"), whose code no other review reads."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper()):
            try:
                found.append((node.targets[0].id, ast.parse(node.value.value)))
            except SyntaxError:  # C++, or not code
                continue
    return found


def _reasons(node, shared: set) -> list:
    """What is suspect about one syntax node; `shared`: names the notebook's locked cells and imports define."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return _import_reasons(node)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SUSPECT_CALLS:
        return [f"calls {node.func.id}()"]
    if isinstance(node, ast.Attribute):
        return _attribute_reasons(node)
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        return _assignment_reasons(node, shared)
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in shared:
        return [f"redefines {node.name}, which the notebook's locked cells define"]
    if isinstance(node, ast.Global):
        return [f"declares global {name}" for name in node.names if name in shared]
    return []


def _import_reasons(node) -> list:
    mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    if isinstance(node, ast.ImportFrom) and node.module == "hpcdl":
        mods = [f"hpcdl.{a.name}" for a in node.names]
    found = []
    for m in mods:
        top, _, sub = m.partition(".")
        if top == GRADER_PACKAGE or (top == "hpcdl" and sub.split(".")[0] in GRADER_INTERNALS):
            found.append(f"imports {m}, the grader's own machinery")
        elif top in SUSPECT_MODULES and not (m == "sys" and isinstance(node, ast.Import)):
            found.append(f"imports {m}")  # `import sys` alone is judged by what it touches (_attribute_reasons)
    return found


def _attribute_reasons(node) -> list:
    owner = node.value.id if isinstance(node.value, ast.Name) else None
    if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in ("__name__", "__init__"):
        return [f"reaches for {node.attr}"]
    if node.attr in FRAME_ATTRS:
        return [f"reaches for a frame ({node.attr})"]
    if owner == "hpcdl" and node.attr in GRADER_INTERNALS:
        return [f"reaches for hpcdl.{node.attr}, the grader's own machinery"]
    if owner == "sys" and node.attr not in HARMLESS_SYS:
        return [f"uses sys.{node.attr}"]
    return []


def _assignment_reasons(node, shared: set) -> list:
    targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
    found = []
    for t in targets:
        for leaf in ast.walk(t):
            if isinstance(leaf, ast.Attribute) and _root_name(leaf) in shared:
                found.append(f"changes {ast.unparse(leaf)}")
            elif isinstance(leaf, ast.Name) and isinstance(leaf.ctx, (ast.Store, ast.Del)) and leaf.id in shared:
                found.append(f"rebinds {leaf.id}, which the notebook's locked cells define")
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
