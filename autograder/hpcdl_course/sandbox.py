"""The sandbox a submission's code runs in while it is graded: bubblewrap, with limits.

Inside, the learner's code sees the system's programs and libraries, Python, the course
environment and the `hpcdl` package, all read-only, and a private /tmp. It does not see the
gradebook, the work folder, the submissions, other students' files, the course sources (hidden
tests) or anyone's home; it has no network, its own process tree (everything it starts dies with
it), and runs as an unprivileged user with limits on memory, CPU time, processes and file size.
"""
import os
import pathlib
import resource
import shutil
import sys

NOBODY = 65534
LIMITS = {
    resource.RLIMIT_CPU: 3600,  # seconds of CPU time
    resource.RLIMIT_NPROC: 1024,  # processes and threads of the sandbox's user
    resource.RLIMIT_FSIZE: 1 << 30,
    resource.RLIMIT_NOFILE: 4096,
    resource.RLIMIT_CORE: 0,
}
CPU_MEMORY_LIMIT = 8 << 30  # address space; not on GPUs, where CUDA reserves far more than it uses
TMP_SIZE = 2 << 30
SHM_SIZE = 1 << 30  # /dev/shm: MPI ranks on one machine exchange messages through shared memory there


class SandboxUnavailable(RuntimeError):
    pass


def mode() -> str:
    """'bwrap' (the default) or 'none' (HPCDL_SANDBOX=none: only for submissions you trust)."""
    wanted = os.environ.get("HPCDL_SANDBOX", "bwrap")
    if wanted == "none":
        return "none"
    if not shutil.which("bwrap"):
        raise SandboxUnavailable(
            "grading runs each submission in a bubblewrap sandbox, and `bwrap` is not installed: install it "
            "(Debian/Ubuntu: apt install bubblewrap) or, for submissions you trust, set HPCDL_SANDBOX=none")
    return "bwrap"


def _hpcdl():
    import hpcdl  # the checker's own; imported here so that `make grade` itself does not load torch

    return hpcdl


def _read_only_roots() -> list:
    """What the learner's code may read: system folders, Python, the environment, the hpcdl package."""
    roots = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"]
    etc = ["ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf",
           "localtime", "mime.types", "hosts"]  # hosts: `localhost` resolves (torch.distributed, MPI)
    roots += [f"/etc/{name}" for name in etc]
    for path in (sys.base_prefix, sys.prefix, os.path.dirname(sys.executable)):
        roots.append(os.path.realpath(path))
    roots.append(str(pathlib.Path(_hpcdl().__file__).resolve().parent))
    return roots


def _gpu_devices() -> list:
    return sorted(str(p) for p in pathlib.Path("/dev").glob("nvidia*")) if _hpcdl().ON_GPU else []


def command(argv: list) -> list:
    """argv, run inside the sandbox."""
    if mode() == "none":
        return list(argv)
    cmd = [shutil.which("bwrap"), "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--new-session"]
    # The private /tmp first: a course checked out under /tmp is then bound on top of it, not hidden.
    cmd += ["--proc", "/proc", "--dev", "/dev", "--size", str(SHM_SIZE), "--perms", "1777", "--tmpfs", "/dev/shm",
            "--size", str(TMP_SIZE), "--perms", "1777", "--tmpfs", "/tmp"]
    for dev in _gpu_devices():
        cmd += ["--dev-bind", dev, dev]
    if _hpcdl().ON_GPU:
        cmd += ["--ro-bind-try", "/sys", "/sys"]
    binds = []
    for root in _read_only_roots():
        if os.path.exists(root) and root not in binds and not any(root.startswith(b + "/") for b in binds):
            binds.append(root)
    # bwrap would create the folders above each bind as private to root: the worker's user could not
    # pass through them.
    parents = sorted({str(p) for b in binds for p in pathlib.Path(b).parents}
                     - set(binds) - {"/", "/tmp", "/dev", "/proc"})
    for parent in parents:
        cmd += ["--perms", "0755", "--dir", parent]
    for root in binds:
        cmd += ["--ro-bind", root, root]
    cmd += ["--chdir", "/tmp"]
    if os.geteuid() == 0:
        # bwrap keeps only these two capabilities, and setpriv gives them up as it becomes nobody.
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
                "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all"]
    else:
        cmd += ["--"]
    return cmd + list(argv)


def environment() -> dict:
    """The worker's whole environment: nothing of the grader's (no HPCDL_WORK, no paths, no tokens)."""
    env = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
           "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONUNBUFFERED": "1", "TRITON_CACHE_DIR": "/tmp/triton", "MPLCONFIGDIR": "/tmp/mpl",
           "HPCDL_QUIET": "1", "HPCDL_CEILINGS_CACHE": "off", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    # Ranks inside: the sandbox hides /sys and the network, which MPICH's UCX and hwloc probe and complain
    # about in every rank's output; torch.distributed's gloo binds to the loopback.
    env.update({"UCX_LOG_LEVEL": "fatal", "HWLOC_HIDE_ERRORS": "2", "GLOO_SOCKET_IFNAME": "lo"})
    # Only the hpcdl package is bound there, so this folder shows nothing else (not hpcdl_course).
    env["PYTHONPATH"] = str(pathlib.Path(_hpcdl().__file__).resolve().parents[1])
    if not _hpcdl().ON_GPU:
        env["HPCDL_DEVICE"] = "cpu"
    elif "TRITON_LIBCUDA_PATH" not in os.environ:
        env.update(_libcuda())
    # HPCDL_TEST_TOKEN: an opaque mark by which the test suite finds processes left running (tests/leftovers.py).
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "TRITON_LIBCUDA_PATH",
                 "HPCDL_TEST_TOKEN"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _libcuda() -> dict:
    """Where libcuda is, as Triton finds it out here: inside, its search (ldconfig) may come up empty."""
    try:
        from triton.backends.nvidia.driver import libcuda_dirs

        return {"TRITON_LIBCUDA_PATH": libcuda_dirs()[0]}
    except Exception:  # no such helper in this Triton, or no libcuda: Triton's own search decides
        return {}


def set_limits() -> None:
    """Run in the child before it becomes the sandbox (subprocess's preexec_fn)."""
    for which, value in LIMITS.items():
        resource.setrlimit(which, (value, value))
    if not _hpcdl().ON_GPU:
        resource.setrlimit(resource.RLIMIT_AS, (CPU_MEMORY_LIMIT, CPU_MEMORY_LIMIT))


def worker(**kwargs):
    """A grading worker (`python -m hpcdl.worker`) that will run in the sandbox, with its environment and
    limits; kwargs go to hpcdl.remote.WorkerProcess (timeout, on_start)."""
    from hpcdl import remote

    return remote.WorkerProcess(command([sys.executable, "-m", "hpcdl.worker"]), env=environment(),
                                preexec_fn=set_limits, **kwargs)


_PROBE = """
import json, os, socket
seen = {"uid": os.getuid(), "can_read": {}, "network": None, "gpu": None}
for path in json.loads(os.environ["HPCDL_PROBE_PATHS"]):
    try:
        seen["can_read"][path] = sorted(os.listdir(path)) if os.path.isdir(path) else open(path, "rb").read(1) is not None
    except OSError:
        seen["can_read"][path] = False
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    seen["network"] = True
except OSError:
    seen["network"] = False
import torch
seen["gpu"] = torch.cuda.is_available() and torch.cuda.get_device_name()
if seen["gpu"]:
    seen["gpu_works"] = float((torch.ones(1 << 20, device="cuda") * 2).sum()) == 2 * (1 << 20)
import hpcdl
seen["hpcdl"] = hpcdl.__file__
_KERNEL = '''
import triton
import triton.language as tl

@triton.jit
def _double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

x = torch.ones(1000, device=DEVICE)
_double[(8,)](x, 1000, BLOCK=128)
result = "works" if float(x.sum()) == 2000 else "wrong result"
'''
try:  # a Triton kernel compiles (on a GPU: cc, ptxas, libcuda) and runs in here, as the worker runs cells
    from hpcdl.worker import run_source

    cell = {"torch": torch, "DEVICE": hpcdl.DEVICE}
    run_source(_KERNEL, "<probe cell>", cell)
    seen["triton"] = cell["result"]
except Exception as e:
    seen["triton"] = f"{type(e).__name__}: {str(e)[-1500:]}"
print(json.dumps(seen))
"""


def probe(secret_paths: list) -> dict:
    """Run a small program in the sandbox and report which of secret_paths it could read
    (`hpcdl-course check-sandbox`). A folder counts as read when the sandbox lists any entry of the
    real folder other than those it mounts for Python (e.g. /root holds .pyenv where Python lives)."""
    import json
    import subprocess

    env = {**environment(), "HPCDL_PROBE_PATHS": json.dumps([str(p) for p in secret_paths])}
    proc = subprocess.run(command([sys.executable, "-c", _PROBE]), env=env, capture_output=True, text=True,
                          timeout=300, preexec_fn=set_limits)
    if proc.returncode != 0:
        raise SandboxUnavailable(f"the sandbox could not run Python (exit {proc.returncode}): "
                                 f"{proc.stderr.strip()[-1500:]}")
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    mounted = {part for root in _read_only_roots() for part in pathlib.Path(root).parts}
    for path, inside in seen["can_read"].items():
        if isinstance(inside, list):
            real = set(os.listdir(path)) if os.path.isdir(path) else set()
            seen["can_read"][path] = bool((set(inside) & real) - mounted)
    return seen
