"""The sandbox a submission's code runs in while it is graded: bubblewrap, with limits.

Inside, the learner's code sees the system's programs and libraries, Python, the course
environment and the `hpcdl` package, all read-only, and a private /tmp. It does not see the
gradebook, the work folder, the submissions, other students' files, the course sources (hidden
tests) or anyone's home; it has no network, its own process tree (everything it starts dies with
it), no kernel keyrings, and runs as a user of its own with limits on memory, CPU time, processes and
file size.

A user of its own: the kernel counts some limits per user, across the whole machine (processes and
threads, queued signals, pipe buffers, inotify watches) and keeps each user a keyring that outlives
its processes. When grading as root, each running sandbox gets a uid no other running sandbox has
(claim_uid: one of SANDBOX_UIDS, held by a lock file under a folder only root can write), so a fork
bomb fills only its own sandbox's process limit. When grading as another user, bwrap runs the sandbox
in a user namespace of its own as that user: the process limit is counted per sandbox there too
(RLIMIT_NPROC is set inside the namespace, by prlimit), but the machine-wide per-user counts are the
grader's own, shared with it and every other sandbox it runs. The kernel's keyrings (add_key,
request_key, keyctl) are refused in every sandbox by a seccomp filter (ENOSYS): a key one submission
stored can be read by no other, whichever user grades.
"""
import ctypes
import errno
import fcntl
import os
import pathlib
import platform
import random
import resource
import shutil
import stat
import struct
import sys
import tempfile

from . import prebuild

SANDBOX_UIDS = range(1_900_000_000, 1_900_000_000 + 4096)  # outside the ranges systemd gives out
UID_LOCKS = "/run/hpcdl-sandbox-uids"  # a lock file per uid in use; root's only
PROCESS_LIMIT = 1024  # processes and threads of one sandbox (RLIMIT_NPROC)
PRLIMIT = shutil.which("prlimit")  # util-linux, as setpriv
LIMITS = {
    resource.RLIMIT_CPU: 3600,  # seconds of CPU time
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
    """What the learner's code may read: system folders, Python, the environment, the hpcdl package and the
    worker's (hpcdl_grader: the worker runs from it)."""
    roots = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"]
    etc = ["ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf",
           "localtime", "mime.types", "hosts"]  # hosts: `localhost` resolves (torch.distributed, MPI)
    roots += [f"/etc/{name}" for name in etc]
    for path in (sys.base_prefix, sys.prefix, os.path.dirname(sys.executable)):
        roots.append(os.path.realpath(path))
    package = pathlib.Path(_hpcdl().__file__).resolve().parent
    roots += [str(package), str(package.parent / "hpcdl_grader")]
    if prebuild.folder().is_dir():  # the solution's C++ builds, which cannot be listed (prebuild.py)
        roots.append(str(prebuild.folder()))
    return roots


class UidClaim:
    """A uid no other running sandbox has, while this object (its lock file) is held."""

    def __init__(self, uid: int, fd: int):
        self.uid, self._fd = uid, fd

    def release(self):
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            os.close(fd)  # closing the file gives up its lock

    __del__ = release


def _lock_folder() -> str:
    """UID_LOCKS (or a folder in the temporary folder where /run is missing), made by root and writable
    by root only: nobody else may hold, remove or plant a lock."""
    for folder in (UID_LOCKS, os.path.join(tempfile.gettempdir(), os.path.basename(UID_LOCKS))):
        try:
            os.mkdir(folder, 0o700)
            break
        except FileExistsError:
            break
        except OSError:  # no /run, or not writable here
            continue
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise SandboxUnavailable(f"{folder} must be a folder that only root can write (it holds the locks "
                                 f"on the sandboxes' uids): remove it and grade again")
    return folder


def claim_uid() -> UidClaim:
    """One of SANDBOX_UIDS that no running sandbox uses (root only). A uid is held by a lock (flock) on
    its file, which the kernel gives up when the holder exits, however it exits; all of a sandbox's
    processes die with it (--die-with-parent, its own PID namespace), so none is left running as a uid
    that is claimed again."""
    folder = _lock_folder()
    first = random.randrange(len(SANDBOX_UIDS))  # parallel graders rarely try the same uid first
    for i in range(len(SANDBOX_UIDS)):
        uid = SANDBOX_UIDS[(first + i) % len(SANDBOX_UIDS)]
        fd = os.open(os.path.join(folder, str(uid)), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidClaim(uid, fd)
    raise SandboxUnavailable(f"all {len(SANDBOX_UIDS)} sandbox uids are in use")


_HELD = []  # claims made by command() for callers that did not claim one: held until this process exits

# The kernel's keyrings, refused in the sandbox: {machine: [(AUDIT_ARCH_*, bits masked off the number,
# (add_key, request_key, keyctl))]}, for the machine's own system calls and its 32-bit ones.
_KEYRING_CALLS = {
    "x86_64": [(0xC000003E, 0x40000000, (248, 249, 250)), (0x40000003, 0, (286, 287, 288))],  # x32 bit; i386
    "aarch64": [(0xC00000B7, 0, (217, 218, 219)), (0x40000028, 0, (309, 310, 311))],  # arm64; arm
    "riscv64": [(0xC00000F3, 0, (217, 218, 219))],
}


def _keyring_filter(machine: str):
    """A seccomp program (classic BPF) that fails the keyring system calls with ENOSYS; None on a machine
    it does not know."""
    ld_abs, jeq, and_k, ret = 0x20, 0x15, 0x54, 0x06
    allow, refuse = 0x7FFF0000, 0x00050000 | errno.ENOSYS  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
    arches = _KEYRING_CALLS.get(machine)
    if not arches:
        return None
    blocks = []
    for arch, mask, calls in arches:
        block = [(ld_abs, 0, 0, 0)] + ([(and_k, 0, 0, 0xFFFFFFFF & ~mask)] if mask else [])
        block += [(jeq, "refuse", 0, nr) for nr in calls] + [(ret, 0, 0, allow)]
        blocks.append([(jeq, 0, len(block), arch)] + block)
    program = [(ld_abs, 0, 0, 4)] + [i for b in blocks for i in b] + [(ret, 0, 0, allow), (ret, 0, 0, refuse)]
    refuse_at = len(program) - 1
    code = b"".join(struct.pack("=HBBI", op, refuse_at - n - 1 if jt == "refuse" else jt, jf, k)
                    for n, (op, jt, jf, k) in enumerate(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(code, len(code))
    return SockFprog(len(program), ctypes.addressof(buffer)), buffer


_FILTER = _keyring_filter(platform.machine())  # built here, so that the child only makes one call
_LIBC = ctypes.CDLL(None, use_errno=True)


def forbid_keyrings() -> None:
    """In the child, before it becomes the sandbox: no process of it can use a kernel keyring. Sets
    no_new_privs, which bwrap sets in the sandbox anyway."""
    if _FILTER is None:
        return
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if _LIBC.prctl(pr_set_no_new_privs, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                   ctypes.c_ulong(0)) != 0 or \
            _LIBC.prctl(pr_set_seccomp, ctypes.c_ulong(seccomp_mode_filter), ctypes.byref(_FILTER[0]),
                        ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "could not install the sandbox's seccomp filter")


def _gpu_devices() -> list:
    return sorted(str(p) for p in pathlib.Path("/dev").glob("nvidia*")) if _hpcdl().ON_GPU else []


def command(argv: list, uid: int | None = None) -> list:
    """argv, run inside the sandbox, as uid when grading as root (by default a uid claimed for as long as
    this process lives); its process limit is set inside the sandbox (by set_limits where prlimit is
    missing)."""
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
        if uid is None:
            _HELD.append(claim_uid())
            uid = _HELD[-1].uid
        # bwrap keeps only these two capabilities, and setpriv gives them up as it becomes the sandbox's user.
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
                "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all"]
    else:
        cmd += ["--"]
    if PRLIMIT:
        # Inside bwrap's user namespace (when not root) the limit counts this sandbox's processes only: set
        # before bwrap, it would also bound the grader's user across the sandboxes it runs at once.
        cmd += [PRLIMIT, f"--nproc={PROCESS_LIMIT}:{PROCESS_LIMIT}", "--"]
    return cmd + list(argv)


def environment() -> dict:
    """The worker's whole environment: nothing of the grader's (no HPCDL_WORK, no paths, no tokens)."""
    env = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
           "USER": "hpcdl-sandbox", "LOGNAME": "hpcdl-sandbox",  # the sandbox's uid has no name in /etc/passwd
           "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONUNBUFFERED": "1", "TRITON_CACHE_DIR": "/tmp/triton", "MPLCONFIGDIR": "/tmp/mpl",
           "HPCDL_QUIET": "1", "HPCDL_CEILINGS_CACHE": "off", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    # Ranks inside: the sandbox hides /sys and the network, which MPICH's UCX and hwloc probe and complain
    # about in every rank's output; torch.distributed's gloo binds to the loopback.
    env.update({"UCX_LOG_LEVEL": "fatal", "HWLOC_HIDE_ERRORS": "2", "GLOO_SOCKET_IFNAME": "lo"})
    # Only hpcdl and hpcdl_grader are bound there, so this folder shows nothing else (not hpcdl_course).
    env["PYTHONPATH"] = str(pathlib.Path(_hpcdl().__file__).resolve().parents[1])
    if prebuild.folder().is_dir():
        env["HPCDL_PREBUILT"] = str(prebuild.folder())
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
    if mode() == "none" or not PRLIMIT:
        resource.setrlimit(resource.RLIMIT_NPROC, (PROCESS_LIMIT, PROCESS_LIMIT))
    if not _hpcdl().ON_GPU:
        resource.setrlimit(resource.RLIMIT_AS, (CPU_MEMORY_LIMIT, CPU_MEMORY_LIMIT))
    forbid_keyrings()


def _claim():
    return claim_uid() if mode() == "bwrap" and os.geteuid() == 0 else None


def worker(**kwargs):
    """A grading worker (`python -m hpcdl_grader.worker`) that will run in the sandbox, with its environment and
    limits, as a uid of its own for as long as the returned object lives (when grading as root); kwargs go
    to hpcdl_grader.remote.WorkerProcess (timeout, on_start)."""
    from hpcdl_grader import remote

    claim = _claim()
    w = remote.WorkerProcess(command([sys.executable, "-m", "hpcdl_grader.worker"], claim and claim.uid),
                             env=environment(), preexec_fn=set_limits, **kwargs)
    w.sandbox_uid = claim  # the uid stays claimed while the worker object lives
    return w


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
    from hpcdl_grader.worker import run_source

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
    claim = _claim()
    try:
        proc = subprocess.run(command([sys.executable, "-c", _PROBE], claim and claim.uid), env=env,
                              capture_output=True, text=True, timeout=300, preexec_fn=set_limits)
    finally:
        if claim:
            claim.release()
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
