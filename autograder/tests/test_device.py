import os
import subprocess
import sys

import hpcdl


def run_python(code: str, **env):
    full = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "HPCDL_DEVICE")}
    return subprocess.run([sys.executable, "-c", code], env={**full, **env}, capture_output=True, text=True,
                          timeout=300)


def test_import_prints_one_mode_line():
    proc = run_python("import hpcdl", HPCDL_DEVICE="cpu")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("hpcdl:")]
    assert len(lines) == 1 and "CPU interpreter" in lines[0]


def test_cpu_mode_sets_interpreter_before_triton():
    proc = run_python("import hpcdl, os, triton; print(os.environ['TRITON_INTERPRET'])", HPCDL_DEVICE="cpu")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("1"), proc.stderr


def test_triton_imported_first_gets_a_clear_error():
    proc = run_python("import triton, hpcdl", HPCDL_DEVICE="cpu")
    assert proc.returncode != 0
    assert "Restart the kernel and run `import hpcdl` before `import triton`" in proc.stderr


def test_warnings_go_to_stdout_not_stderr():
    proc = run_python("import hpcdl, warnings; warnings.warn('careful')", HPCDL_DEVICE="cpu")
    assert "careful" in proc.stdout and "careful" not in proc.stderr


def test_require_gpu_message():
    if hpcdl.ON_GPU:
        hpcdl.device.require_gpu("this")
    else:
        try:
            hpcdl.device.require_gpu("Timing")
        except hpcdl.device.GPURequired as e:
            assert "needs a CUDA GPU" in str(e)
        else:
            raise AssertionError("require_gpu did not raise")
