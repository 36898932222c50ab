"""Build learner C++ in a child process, cached by its source: PyTorch extensions and MPI programs.

A compiler that crashes or hangs stops the child, never the notebook. Builds are kept in a folder
named by a hash of everything that decides the result (source, flags, torch and Python versions),
so running a cell again rebuilds only when the source changed. A compile error raises CompileError
showing the compiler's first errors against the learner's own line numbers.

    ext = hpcdl.build.extension("int4", INT4_CPP, functions=["pack", "unpack"])
    ext.pack(w)                        # loaded in this process
    ext.isolated("pack")(w)            # in a process of its own, kept across calls: a segfault fails
                                       # this call only; a TORCH_CHECK raises RuntimeError here, as
                                       # ext.pack(w) would
    prog = hpcdl.build.mpi_program("ring", RING_CPP)   # then hpcdl.ranks.mpi(prog, 3)
"""
import functools
import hashlib
import importlib.util
import json
import os
import pathlib
import re
import shutil
import sys
import textwrap
import time
from dataclasses import dataclass, field

import torch

from . import isolation, processes
from .check import CheckFailed

BUILD_TIMEOUT = 600  # s; a first extension build takes about 20 s on two CPU cores


class BuildFailed(CheckFailed):
    """The build did not produce a program: a timeout, a missing tool, a crash of the toolchain."""


class CompileError(BuildFailed):
    """The compiler rejected the source; the message holds its first errors."""


def cache_root() -> pathlib.Path:
    root = os.environ.get("HPCDL_CACHE_DIR") or pathlib.Path.home() / ".cache" / "hpcdl"
    return pathlib.Path(root) / "builds"


def _build_folder(name: str, digest: str) -> pathlib.Path:
    """Where the build of this digest is: among the grader's prebuilt ones (HPCDL_PREBUILT, read-only,
    made before grading from the instructor's own source; hpcdl_course/prebuild.py) when it is there,
    otherwise in this user's cache."""
    prebuilt = os.environ.get("HPCDL_PREBUILT")
    if prebuilt:
        folder = pathlib.Path(prebuilt) / f"{name}-{digest}"
        if _up_to_date(folder / "built", digest):
            return folder
    return cache_root() / f"{name}-{digest}"


def _digest(name: str, *key) -> str:
    return hashlib.sha256(json.dumps([name, *key], sort_keys=True).encode()).hexdigest()[:16]


def _up_to_date(done: pathlib.Path, digest: str) -> bool:
    """The folder holds a finished build of exactly this source (`done` is written last)."""
    try:
        return done.read_text() == digest
    except OSError:
        return False


def _identifier(name: str, what: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"{what} {name!r} must be a C++ identifier (letters, digits, _)")
    return name


# --- compiler messages -------------------------------------------------------------------------

_DIAGNOSTIC = re.compile(r"^(?P<where>[^\s:][^:]*:\d+(?::\d+)?): (?P<kind>fatal error|error): ")
_SNIPPET = re.compile(r"^\s*\d*\s*\|")  # gcc and clang quote the line, then a caret line, after "|"
_LINKER = re.compile(r"undefined reference to|undefined symbol:|ld returned \d+ exit status|cannot find -l")


def _demangled(line: str) -> str:
    symbol = re.search(r"undefined symbol: (_Z\w+)", line)
    tool = shutil.which("c++filt")
    if not symbol or not tool:
        return line
    try:
        code, plain = processes.output_of([tool, symbol.group(1)], timeout=10)
    except processes.Timeout:
        return line
    plain = plain.strip() if code == 0 else ""
    return f"{line} ({plain})" if plain else line


def compiler_errors(log: str, *, folder=None, max_errors: int = 3) -> str:
    """The first `max_errors` errors of a build log, each with its quoted source line, without the
    build tool's command lines; the log's last lines when no error line is found."""
    if folder is not None:
        log = log.replace(f"{folder}{os.sep}", "")
    lines = log.splitlines()
    picked, errors, total = [], 0, 0
    for i, line in enumerate(lines):
        if _DIAGNOSTIC.match(line) or _LINKER.search(line):
            total += 1
            if errors == max_errors:
                continue
            errors += 1
            if i and lines[i - 1].rstrip().endswith(":") and ": In " in lines[i - 1]:
                picked.append(lines[i - 1])  # "x.cpp: In function 'f':" names where the error is
            picked.append(_demangled(line))
            for follow in lines[i + 1:i + 6]:
                if not _SNIPPET.match(follow):
                    break
                picked.append(follow)
    if not picked:
        return processes.tail(log)
    more = total - errors
    return "\n".join(picked) + (f"\n... and {more} more error line{'s' * (more > 1)}" if more else "")


# --- PyTorch C++ extensions --------------------------------------------------------------------

_BUILD_EXTENSION = textwrap.dedent("""
    import json, sys
    from torch.utils import cpp_extension
    spec = json.load(open(sys.argv[1]))
    cpp_extension.load(name=spec["name"], sources=[spec["source"]], build_directory=spec["folder"],
                       extra_cflags=spec["cflags"], extra_ldflags=spec["ldflags"], verbose=True)
    open(spec["done"], "w").write(spec["digest"])
""")

BINDINGS_FILE = "hpcdl_bindings.cpp"
# What a source may use without including it (tensors, torch:: and at:: names, TORCH_CHECK, at::parallel_for),
# and pybind11 with its tensor casters and torch's error handling for the bindings. Not <torch/extension.h>: it
# adds the C++ frontend (torch::nn, optim, data) that no source here uses, and on 2 cores it made each build of
# 05's solution take 25 s of compiling instead of 17. A source may still include it itself.
BINDINGS_HEADERS = ("torch/types.h", "torch/csrc/utils/pybind.h", "torch/csrc/Exceptions.h")


def _bindings(name: str, functions: dict) -> str:
    # The learner's file is included unchanged, so compiler messages quote its lines with its numbers.
    # torch::wrap_pybind_function, as load_inline binds: C++ errors reach Python through torch's own handler, as
    # torch's functions raise them (TORCH_CHECK: RuntimeError, TORCH_CHECK_VALUE: ValueError, ...; TORCH_WARN: a
    # Python warning), whether or not this extension's pybind11 shares torch's exception translators.
    includes = "".join(f"#include <{header}>\n" for header in BINDINGS_HEADERS)
    defs = "\n".join(f'  m.def("{f}", torch::wrap_pybind_function({f}), {json.dumps(doc)});'
                      for f, doc in functions.items())
    return (f'{includes}#include "{name}.cpp"\n\n'
            f"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{defs}\n}}\n")


@functools.cache  # a process does not change the C++ runtime it has loaded
def cxx_runtime() -> tuple:
    """The C++ runtime library this process runs with (torch's libstdc++), as a linker argument; none where it is
    not found (macOS, a libc++ build). Named first, it is what the extension links: a compiler whose own library
    folder holds only a static libstdc++ (the lent GPU image's g++ wrapper) would otherwise link a second copy into
    the extension, whose streams are never set up there: the first number that a TORCH_CHECK message formatted
    crashed the process (benchmarks/extension_exceptions.py)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps}
    except OSError:
        return ()
    return tuple(sorted(path for path in paths if os.path.basename(path).startswith("libstdc++.so"))[:1])


def _load(name: str, so: pathlib.Path):
    spec = importlib.util.spec_from_file_location(name, so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Extension:
    """A built extension. Its functions are its attributes (`ext.pack(w)`), loaded into this process
    on first use; `isolated(name)` calls one in a fresh process instead."""

    name: str
    path: pathlib.Path  # the .so
    functions: tuple
    _module: object = field(default=None, repr=False)

    @property
    def module(self):
        if self._module is None:
            self._module = _load(self.name, self.path)
        return self._module

    def __getattr__(self, attr):
        if attr.startswith("_") or attr not in self.functions:
            raise AttributeError(f"extension {self.name!r} has no function {attr!r}; it has {list(self.functions)}")
        return getattr(self.module, attr)

    def isolated(self, function: str, *, timeout: float = 300):
        """A callable that runs `function` in a process of its own, where a crash or a hang of the C++
        code fails only that call (IsolatedFailure). The process is one per extension, started on the
        first call and kept for the next ones (it imports torch once); after a crash or a timeout the
        next call starts a fresh one. An exception the function raises is raised again here with its
        type and message (a TORCH_CHECK's RuntimeError: see hpcdl.processes.raised), as a call in
        this process would raise it. Arguments go by pickle, the result comes back through
        torch.save: tensors, numbers and containers of them."""
        if function not in self.functions:
            raise AttributeError(f"extension {self.name!r} has no function {function!r}")

        def call(*args, **kwargs):
            return isolation.server(self.path, self.name).call(function, args, kwargs, timeout=timeout,
                                                               what=f"{self.name}.{function}()")

        call.__name__ = call.__qualname__ = function
        return call


def extension(name: str, cpp_source: str, *, functions, extra_cflags=("-O2",), extra_ldflags=(),
              timeout: float = BUILD_TIMEOUT) -> Extension:
    """Build `cpp_source` as a PyTorch extension named `name` whose Python functions are `functions`
    (names of C++ functions in the source, or {name: docstring}). Do not write PYBIND11_MODULE: the
    bindings are added here. Built once per source in a child process; returns an Extension."""
    _identifier(name, "extension name")
    functions = dict.fromkeys(functions, "") if not isinstance(functions, dict) else dict(functions)
    for f in functions:
        _identifier(f, "function name")
    runtime = cxx_runtime()
    cflags, ldflags = list(extra_cflags), [*runtime, *extra_ldflags]
    bindings = _bindings(name, functions)
    # The runtime by its file name (its version): a sandbox finds the same library under another path.
    digest = _digest(name, "torch-extension", cpp_source, bindings, cflags, list(extra_ldflags),
                     [os.path.basename(path) for path in runtime], torch.__version__, sys.version,
                     os.environ.get("CXX"))
    folder = _build_folder(name, digest)
    so, done = folder / f"{name}.so", folder / "built"
    if not _up_to_date(done, digest):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.cpp").write_text(cpp_source)
        (folder / BINDINGS_FILE).write_text(bindings)
        spec = {"name": name, "source": str(folder / BINDINGS_FILE), "folder": str(folder), "cflags": cflags,
                "ldflags": ldflags, "done": str(done), "digest": digest}
        (folder / "spec.json").write_text(json.dumps(spec))
        _build(f"the C++ extension {name!r}", [sys.executable, "-c", _BUILD_EXTENSION, folder / "spec.json"],
               folder, timeout)
    return Extension(name, so, tuple(functions))


def _build(what: str, command, folder: pathlib.Path, timeout: float) -> None:
    log = folder / "build.log"
    start = time.perf_counter()
    try:
        code, output = processes.run(command, timeout=timeout, log=log, cwd=folder)
    except processes.Timeout:
        # torch's lock file would make the next build of this folder wait for the killed one forever.
        (folder / "lock").unlink(missing_ok=True)
        raise BuildFailed(f"building {what} did not finish within {timeout:g} s and was stopped (its log: "
                          f"{log}).") from None
    except FileNotFoundError as e:
        raise BuildFailed(f"building {what}: {e}") from None
    if code != 0:
        raise CompileError(f"building {what} failed:\n{compiler_errors(output, folder=folder)}")
    print(f"built {what} in {time.perf_counter() - start:.0f} s")


# --- MPI programs ------------------------------------------------------------------------------

def mpi_program(name: str, cpp_source: str, *, flags=("-O2", "-std=c++17"), timeout: float = 300) -> pathlib.Path:
    """Compile a C++ MPI program with the course environment's `mpicxx` (once per source, in a child
    process); returns the path of the executable, to run with hpcdl.ranks.mpi."""
    _identifier(name, "program name")
    mpicxx = processes.find_program("mpicxx")
    if mpicxx is None:
        raise BuildFailed("no `mpicxx` next to this Python or on PATH: install the course environment "
                          "(its `mpich` package provides MPI's compiler wrapper).")
    digest = _digest(name, "mpi-program", cpp_source, list(flags), os.path.realpath(mpicxx))
    folder = _build_folder(name, digest)
    binary, done = folder / name, folder / "built"
    if not _up_to_date(done, digest):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.cpp").write_text(cpp_source)
        _build(f"the MPI program {name!r}", [mpicxx, *flags, "-o", name, f"{name}.cpp"], folder, timeout)
        done.write_text(digest)
    return binary
