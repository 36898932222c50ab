"""Does an exception thrown by a C++ extension built on this machine reach Python as a RuntimeError? (any machine)

    PYTHONPATH=autograder python3 -m benchmarks.extension_exceptions OUT.json

Why: on the lent GPU image (an H100, torch 2.11.0+cu130, Python 3.12, 2026-12-06 19:13 UTC;
results/h100-2026-12-06-1913-gpu-calls.txt) an extension built by hpcdl.build killed its process with SIGSEGV
when a TORCH_CHECK failed, called directly as well as through `ext.isolated`. So 05's `test_pack_errors` failed
there for the reference solution, while it passes on every CPU machine. Each variant below is one small
extension, built by hpcdl.build and called in a fresh interpreter, whose exit status and last lines are kept:
which throws crash, whether torch's own TORCH_CHECK does, and (where `cuda-gdb` or `gdb` is installed) where
the first crash happens.
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


def run(command: list, timeout: float = 120) -> dict:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"returncode": None, "output": f"no answer within {timeout:g} s"}
    return {"returncode": done.returncode, "output": (done.stdout + done.stderr)[-800:]}


def compiler() -> str:
    found = shutil.which(os.environ.get("CXX", "c++"))
    return run([found, "--version"])["output"].splitlines()[0] if found else "no C++ compiler found"


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
        if outcome["returncode"] not in (0, None) and first_crash is None:
            first_crash = (label, ext.path, name)
    debugger = shutil.which("cuda-gdb") or shutil.which("gdb")
    if first_crash and debugger:
        label, path, name = first_crash
        traced = run([debugger, "-q", "-batch", "-ex", "run", "-ex", "bt", "--args", sys.executable, "-c", CALL,
                      str(path), name], timeout=300)
        results["backtrace"] = {"variant": label, "debugger": debugger, "output": traced["output"][-3000:]}
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    print(f"{results['machine']}, Python {results['python']}, torch {results['torch']}, {results['compiler']}")
    for label, outcome in [("torch's own TORCH_CHECK", results["torch's own TORCH_CHECK"]),
                           *results["variants"].items()]:
        last = outcome["output"].strip().splitlines()[-1:] or [""]
        print(f"{label:45} exit {outcome['returncode']}: {last[0][:120]}")
    if "backtrace" in results:
        print(f"--- {results['backtrace']['variant']} under {debugger}:\n{results['backtrace']['output']}")


if __name__ == "__main__":
    main(*sys.argv[1:])
