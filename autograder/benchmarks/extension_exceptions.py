"""Does a failed TORCH_CHECK in a C++ extension built on this machine reach Python as a RuntimeError? (any machine)

    PYTHONPATH=autograder python3 -m benchmarks.extension_exceptions OUT.json

Why: on the lent GPU images (H100 and H200, torch 2.11.0+cu130, Python 3.12.3; results/h100-2026-12-06-1913-gpu-
calls.txt and h100-2026-12-06-2140-gpu-calls.txt) every extension whose TORCH_CHECK failed killed its process
with SIGSEGV, so 05's `test_pack_errors` failed there for the reference solution. The cause, found with this
benchmark: the image's g++ is a script that runs the real compiler with its own library folders first, where
only a static libstdc++ lies. The extension got a copy of the C++ runtime of its own (libstdc++.so.6 was not
among the libraries it needs), whose streams are never set up inside a shared library, and the debugger showed the
crash in that copy's `std::ostream::operator<<(long)`, formatting the number in the TORCH_CHECK's message. A
plain `throw std::runtime_error("...")` formats nothing and arrived. hpcdl.build now names the libstdc++ that
torch runs with to the linker (hpcdl.build.cxx_runtime).

Each variant is one small extension, built either by hpcdl.build or by torch's load_inline as it stands (which
leaves the C++ runtime to the compiler), and called in a fresh interpreter; its exit status and last lines are
kept, with the shared libraries each build needs and, where `cuda-gdb` or `gdb` is installed, where the first
crash happens.
"""
import json
import os
import platform
import shutil
import subprocess
import sys

from hpcdl import build  # first, as everywhere in the course
import torch

CHECK = 'torch::Tensor f(torch::Tensor q) { TORCH_CHECK(q.size(-1) % 2 == 0, "odd length ", q.size(-1)); return q; }\n'
CHECK_TEXT = 'torch::Tensor f(torch::Tensor q) { TORCH_CHECK(q.size(-1) % 2 == 0, "odd length"); return q; }\n'
PLAIN = ('#include <stdexcept>\n'
         'torch::Tensor f(torch::Tensor q) { if (q.size(-1) % 2) throw std::runtime_error("odd length"); return q; }\n')
STREAM = ('#include <sstream>\n#include <stdexcept>\n'
          'torch::Tensor f(torch::Tensor q) {\n  std::ostringstream s;\n  s << "length " << q.size(-1);\n'
          '  throw std::runtime_error(s.str());\n}\n')
VARIANTS = {  # label: (source, who builds it)
    "TORCH_CHECK formatting a number, hpcdl.build": (CHECK, "hpcdl"),
    "TORCH_CHECK formatting a number, load_inline": (CHECK, "load_inline"),
    "TORCH_CHECK with text only, load_inline": (CHECK_TEXT, "load_inline"),
    "throw std::runtime_error, load_inline": (PLAIN, "load_inline"),
    "std::ostringstream << a number, then throw, load_inline": (STREAM, "load_inline"),
}
# Loads the extension at argv[1] and calls f on 3 values: exit 0 with the message where a RuntimeError arrives.
CALL = """import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
try:
    module.f(torch.zeros(3))
except RuntimeError as e:
    print("RuntimeError:", str(e).splitlines()[0])
    sys.exit(0)
print("no exception")
sys.exit(3)
"""
TORCH_OWN = """import sys, torch
try:
    torch.zeros(3).view(2)
except RuntimeError as e:
    print("RuntimeError:", str(e).splitlines()[0])
    sys.exit(0)
sys.exit(3)
"""


def run(command: list, timeout: float = 120, keep: int = 800) -> dict:
    """Exit status and the last `keep` characters of what `command` printed."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"returncode": None, "output": f"no answer within {timeout:g} s"}
    return {"returncode": done.returncode, "output": (done.stdout + done.stderr)[-keep:]}


def built(name: str, source: str, builder: str) -> str:
    """The path of the extension's .so, built by hpcdl.build or by load_inline (its default bindings)."""
    if builder == "hpcdl":
        return str(build.extension(name, source, functions=["f"]).path)
    from torch.utils import cpp_extension
    folder = build.cache_root() / f"{name}-load_inline"
    folder.mkdir(parents=True, exist_ok=True)
    return cpp_extension.load_inline(name, source, functions=["f"], build_directory=str(folder)).__file__


def compiler() -> dict:
    """The C++ compiler that torch's build uses ($CXX, else c++), its version, and its first lines where it is
    a script (the GPU image's g++ is one, which puts its own library folders first)."""
    found = shutil.which(os.environ.get("CXX", "c++"))
    if not found:
        return {"path": None, "version": "no C++ compiler found"}
    real = os.path.realpath(found)
    with open(real, "rb") as f:
        head = f.read(600)
    script = head.decode(errors="replace") if head.startswith(b"#!") else None
    return {"path": found, "resolves_to": real, "version": run([found, "--version"])["output"].splitlines()[0],
            "script_head": script}


def needed(path) -> str:
    """The shared libraries an extension needs (readelf), on one line."""
    if not shutil.which("readelf"):
        return "readelf not found"
    lines = run(["readelf", "-d", str(path)], keep=200_000)["output"].splitlines()
    return " ".join(line.split("[")[-1].rstrip("]") for line in lines if "NEEDED" in line)


def main(out_path: str) -> None:
    results = {"command": "PYTHONPATH=autograder python3 -m benchmarks.extension_exceptions OUT.json",
               "machine": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
               "compiler": compiler(), "torch's C++ runtime": build.cxx_runtime(),
               "torch's own TORCH_CHECK": run([sys.executable, "-c", TORCH_OWN]), "variants": {}}
    first_crash = None
    for i, (label, (source, builder)) in enumerate(VARIANTS.items()):
        name = f"exception_probe_{i}"
        try:
            path = built(name, source, builder)
        except Exception as e:  # a build error of either builder, kept with the rest
            results["variants"][label] = {"returncode": None, "output": f"build failed: {str(e)[-600:]}"}
            continue
        outcome = results["variants"][label] = run([sys.executable, "-c", CALL, path, name])
        outcome["needs"] = needed(path)
        if outcome["returncode"] not in (0, None) and first_crash is None:
            first_crash = (label, path, name)
    debugger = shutil.which("cuda-gdb") or shutil.which("gdb")
    if first_crash and debugger:
        label, path, name = first_crash
        traced = run([debugger, "-q", "-batch", "-ex", "run", "-ex", "bt", "--args", sys.executable, "-c", CALL,
                      path, name], timeout=300, keep=3000)
        results["backtrace"] = {"variant": label, "debugger": debugger, "output": traced["output"]}
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    found, runtime = results["compiler"], results["torch's C++ runtime"]
    print(f"{results['machine']}, Python {results['python']}, torch {results['torch']}, "
          f"{found['version']} ({found['path']} -> {found.get('resolves_to')}); torch's C++ runtime: {runtime}")
    if found.get("script_head"):
        print(f"the compiler is a script:\n{found['script_head']}")
    for label, outcome in [("torch's own TORCH_CHECK", results["torch's own TORCH_CHECK"]),
                           *results["variants"].items()]:
        last = outcome["output"].strip().splitlines()[-1:] or [""]
        print(f"{label:56} exit {outcome['returncode']}: {last[0][:100]}")
        if "needs" in outcome:
            print(f"{'':56} needs {outcome['needs']}")
    if "backtrace" in results:
        print(f"--- {results['backtrace']['variant']} under {debugger}:\n{results['backtrace']['output']}")


if __name__ == "__main__":
    main(*sys.argv[1:])
