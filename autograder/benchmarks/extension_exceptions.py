"""Does an exception thrown by a C++ extension built on this machine reach Python as a RuntimeError? (any machine)

    PYTHONPATH=autograder python3 -m benchmarks.extension_exceptions OUT.json

Why: on the lent GPU image (an H100, torch 2.11.0+cu130, Python 3.12, 2026-12-06 19:13 UTC;
results/h100-2026-12-06-1913-gpu-calls.txt) an extension built by hpcdl.build killed its process with SIGSEGV
when a TORCH_CHECK failed, called directly as well as through `ext.isolated`. So 05's `test_pack_errors` failed
there for the reference solution, while it passes on every CPU machine. Each variant below is one small
extension, built by hpcdl.build and called in a fresh interpreter, whose exit status and last lines are kept:
which throws crash, whether torch's own TORCH_CHECK does, what the first one links and whether it carries C++
runtime code of its own, what the compiler is, and (where `cuda-gdb` or `gdb` is installed) where the first
crash happens.

On the H200 image (2026-12-06 20:14 UTC, torch 2.11.0+cu130, Python 3.12.3, "g++-real (Ubuntu 13.3.0)"):
torch's own TORCH_CHECK, a plain `throw std::runtime_error` and `backtrace()` all arrived as RuntimeError; every
TORCH_CHECK variant (either header, frame pointers) died by SIGSEGV, four frames above pybind11's dispatcher in
the extension (the frames above were cut off; they are kept now). A c10::Error is thrown by libc10's code and
caught by the extension's; a std::runtime_error is thrown and caught by the extension's own. One guess fits
both: a compiler wrapper that links a second copy of the C++ runtime into the extension. What the benchmark
records now (the libraries, the runtime symbols, the wrapper's first lines) confirms or drops it.
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
PLAIN = ('#include <stdexcept>\n'
         'torch::Tensor f(torch::Tensor q) { if (q.size(-1) % 2) throw std::runtime_error("odd length"); return q; }\n')
BACKTRACE = ('#include <execinfo.h>\n#include <stdexcept>\n#include <string>\n'
             'torch::Tensor f(torch::Tensor q) {\n  void* frames[64];\n  int n = backtrace(frames, 64);\n'
             '  throw std::runtime_error("backtrace() found " + std::to_string(n) + " frames");\n}\n')
VARIANTS = {  # label: (source, compiler flags)
    "TORCH_CHECK, as 05's solution": (CHECK, ("-O2",)),
    "throw std::runtime_error": (PLAIN, ("-O2",)),
    "backtrace(), then throw std::runtime_error": (BACKTRACE, ("-O2",)),
    "TORCH_CHECK, with <torch/extension.h>": ("#include <torch/extension.h>\n" + CHECK, ("-O2",)),
    "TORCH_CHECK, -fno-omit-frame-pointer": (CHECK, ("-O2", "-fno-omit-frame-pointer")),
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


def compiler() -> dict:
    """The C++ compiler that torch's build uses ($CXX, else c++), its version, and its first lines where it is
    a script (the GPU image's g++ said it was "g++-real": a wrapper, whose added flags may matter)."""
    found = shutil.which(os.environ.get("CXX", "c++"))
    if not found:
        return {"path": None, "version": "no C++ compiler found"}
    real = os.path.realpath(found)
    with open(real, "rb") as f:
        head = f.read(600)
    script = head.decode(errors="replace") if head.startswith(b"#!") else None
    return {"path": found, "resolves_to": real, "version": run([found, "--version"])["output"].splitlines()[0],
            "script_head": script}


def linked(path) -> str:
    """The shared libraries an extension needs, and whether it holds C++ runtime code of its own."""
    needed = run(["readelf", "-d", str(path)], keep=200_000)["output"] if shutil.which("readelf") else ""
    symbols = run(["nm", "-D", "--defined-only", str(path)], keep=200_000)["output"] if shutil.which("nm") else ""
    own = sorted({s.split()[-1] for s in symbols.splitlines() if "__cxa_" in s or "_Unwind_" in s})
    return "\n".join(line.strip() for line in needed.splitlines() if "NEEDED" in line) + \
        f"\nC++ runtime symbols it defines itself: {own[:12] or 'none'}"


def main(out_path: str) -> None:
    results = {"command": "PYTHONPATH=autograder python3 -m benchmarks.extension_exceptions OUT.json",
               "machine": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
               "compiler": compiler(), "torch's own TORCH_CHECK": run([sys.executable, "-c", TORCH_OWN]),
               "variants": {}}
    first_crash = None
    for i, (label, (source, flags)) in enumerate(VARIANTS.items()):
        name = f"exception_probe_{i}"
        try:
            ext = build.extension(name, source, functions=["f"], extra_cflags=flags)
        except build.BuildFailed as e:
            results["variants"][label] = {"returncode": None, "output": f"build failed: {str(e)[-600:]}"}
            continue
        outcome = results["variants"][label] = run([sys.executable, "-c", CALL, str(ext.path), name])
        if i == 0:
            results["first variant's libraries"] = linked(ext.path)
        if outcome["returncode"] not in (0, None) and first_crash is None:
            first_crash = (label, ext.path, name)
    debugger = shutil.which("cuda-gdb") or shutil.which("gdb")
    if first_crash and debugger:
        label, path, name = first_crash
        traced = run([debugger, "-q", "-batch", "-ex", "run", "-ex", "bt", "--args", sys.executable, "-c", CALL,
                      str(path), name], timeout=300, keep=6000)
        results["backtrace"] = {"variant": label, "debugger": debugger, "output": traced["output"]}
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    found = results["compiler"]
    print(f"{results['machine']}, Python {results['python']}, torch {results['torch']}, "
          f"{found['version']} ({found['path']} -> {found.get('resolves_to')})")
    if found.get("script_head"):
        print(f"the compiler is a script:\n{found['script_head']}")
    print(results.get("first variant's libraries", ""))
    for label, outcome in [("torch's own TORCH_CHECK", results["torch's own TORCH_CHECK"]),
                           *results["variants"].items()]:
        last = outcome["output"].strip().splitlines()[-1:] or [""]
        print(f"{label:45} exit {outcome['returncode']}: {last[0][:120]}")
    if "backtrace" in results:
        print(f"--- {results['backtrace']['variant']} under {debugger}:\n{results['backtrace']['output']}")


if __name__ == "__main__":
    main(*sys.argv[1:])
