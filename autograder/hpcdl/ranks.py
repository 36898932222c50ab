"""Run learner code as several processes: MPI ranks under mpiexec, torch.distributed ranks.

    outputs = hpcdl.ranks.mpi(program, 3)                          # a C++ binary or a .py (mpi4py)
    results = hpcdl.ranks.mpi_call("ring.py", "run", 3, args=(n,))  # run(rank, size, n) on each rank
    results = hpcdl.ranks.torch_distributed("ddp.py", "run", 2)     # run(rank, world_size) on each rank

Every run has a deadline. When it passes, or when a rank dies, every process of the run is stopped
(nothing is left running) and RanksFailed says rank by rank which finished, which died (how, and
their last lines of output) and which were still running: hung, waiting for a message that never
came. Each rank's output is kept apart and echoed to stdout as `[rank r] ...`.

An exception that the called function raises on a rank (mpi_call, torch_distributed) is raised
again in the caller with its type and message (a ValueError stays a ValueError, see
hpcdl.processes.raised), with a note naming the rank, unless a rank crashed or exited without
raising: then RanksFailed describes the run.
"""
import functools
import os
import pickle
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass

import torch

from . import device, processes
from .check import CheckFailed

TIMEOUT = 120  # s
GRACE = 5  # s the other ranks get to finish after one died before they are stopped
ECHO_LINES = 40  # of each rank's output


class RanksFailed(CheckFailed):
    """A rank died or did not finish in time; every process of the run has been stopped."""


@dataclass
class Rank:
    rank: int
    exit: int | None  # None: never finished
    output: str
    started: bool = True
    returned: bool = False  # its function returned a value (it may still hang at exit)
    joined: bool = True  # it joined the torch.distributed group (ranks of MPI runs count as joined)
    exited_at: float = 0.0  # time.monotonic() when seen to exit, where known: who failed first

    @property
    def aborted(self) -> bool:
        # MPI_Abort stops every rank, the caller's shell included, so no exit status is left to read.
        return self.exit is None and "mpi_abort" in self.output.lower()

    @property
    def died(self) -> bool:
        return self.exit not in (None, 0) or self.aborted


# --- what happened, in words -------------------------------------------------------------------

def _state(r: Rank, *, timed_out: bool, from_shell: bool) -> str:
    if not r.started:
        return "never started"
    if r.aborted:
        return "called MPI_Abort, which stops every rank"
    if r.exit is None and r.returned:
        return "returned its value, then waited at exit for the ranks that had not finished"
    if r.exit is None and not r.joined:
        return ("still joining the process group at the deadline (waiting for rank 0's store, or for the other "
                "ranks)" if timed_out else "was stopped after another rank failed, before it joined the group")
    if r.exit is None:
        return "did not finish: still running at the deadline (hung?)" if timed_out else \
            "was stopped after another rank failed"
    if r.exit == 0:
        return "finished"
    reason = processes.exit_reason(r.exit, from_shell=from_shell)
    return reason if r.joined else f"{reason}, at start-up (before it joined the process group)"


def _report(what: str, ranks: list, *, timed_out: bool, timeout: float, from_shell=False, extra="") -> str:
    died = sorted((r for r in ranks if r.died), key=lambda r: r.exited_at)
    hung = [r for r in ranks if r.exit is None and r.started and timed_out and not r.returned and not r.died]
    if died:
        first = died[0]
        headline = f"{what}: rank {first.rank} {_state(first, timed_out=timed_out, from_shell=from_shell)}."
    elif hung and not any(r.joined for r in hung):
        names = ", ".join(str(r.rank) for r in hung)
        headline = (f"{what}: rank{'s' * (len(hung) > 1)} {names} did not join the process group within "
                    f"{timeout:g} s (a start slowed down by a loaded machine, or no store from rank 0).")
    elif hung:
        stuck = [r for r in hung if r.joined]
        names = ", ".join(str(r.rank) for r in stuck)
        headline = (f"{what}: rank{'s' * (len(stuck) > 1)} {names} did not finish within {timeout:g} s: a deadlock? "
                    f"(a receive whose send never comes, or a collective that not every rank calls).")
    else:
        headline = f"{what} failed."
    lines = [headline, "Every process of the run was stopped. Rank by rank:"]
    for r in ranks:
        lines.append(f"  rank {r.rank}: {_state(r, timed_out=timed_out, from_shell=from_shell)}")
        if r.died or r in hung:
            last = processes.tail(r.output, 6)
            if last:
                lines.append(processes.indent(last, "      "))
    if extra:
        lines.append(extra)
    return "\n".join(lines)


def _raise_what_a_rank_raised(ranks: list, tmp: str, what: str) -> None:
    """Raise again here the exception that the first rank to raise one raised (its type and message, see
    hpcdl.processes.raised), where every rank that failed failed by raising. Return where none raised,
    or where one crashed or exited without raising: RanksFailed then says rank by rank what happened."""
    reports = {}
    for r in ranks:
        found = processes.raised(os.path.join(tmp, f"rank{r.rank}.raised"))
        if found is not None:
            reports[r.rank] = found
    if not reports or any(r.died and r.rank not in reports for r in ranks):
        return
    rank = min(reports, key=lambda r: (reports[r][1], r))  # the first to raise; the others may have followed it
    exception = reports[rank][0]
    others = [r for r in reports if r != rank]
    exception.add_note(f"raised on rank {rank} by {what}" + (
        f" (rank{'s' * (len(others) > 1)} {', '.join(map(str, others))} raised after it)" if others else "")
        + "; every process of the run was stopped")
    raise exception from None


def _echo(ranks: list) -> None:
    for r in ranks:
        text = r.output.strip()
        if text:
            shown = text.splitlines()[-ECHO_LINES:]
            sys.stdout.write("".join(f"[rank {r.rank}] {line}\n" for line in shown))


# --- MPI ---------------------------------------------------------------------------------------

# Each rank runs inside this shell, which keeps the rank's output apart and records its exit status
# (mpiexec reports only the first failure, and not by rank).
_RANK_SHELL = """
dir=$1; shift
rank=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-unknown}}}
"$@" > "$dir/rank$rank.log" 2>&1
echo $? > "$dir/rank$rank.exit"
"""


def launcher_flags(version: str, *, root: bool) -> list:
    """mpiexec options for the MPI that printed `version` (`mpiexec --version`)."""
    if "Open MPI" in version or "OpenRTE" in version:
        # Open MPI refuses more ranks than cores, and refuses to run as root, unless told.
        return ["--oversubscribe", "--bind-to", "none"] + (["--allow-run-as-root"] if root else [])
    return []  # MPICH's Hydra (and MPIs built on it) need neither


@functools.cache
def mpiexec() -> tuple:
    """(path, flags): the course environment's mpiexec (next to this Python), else the one on PATH."""
    path = processes.find_program("mpiexec")
    if path is None:
        raise RanksFailed("no `mpiexec` next to this Python or on PATH: install the course environment "
                          "(its `mpich` package provides MPI).")
    _, version = processes.output_of([path, "--version"], timeout=60)
    return path, launcher_flags(version, root=os.geteuid() == 0)


def _rank_env(nprocs: int = 1) -> dict:
    # Ranks share the machine's cores: one thread each, unless the caller chose otherwise.
    env = processes.child_env({"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    # Open MPI's single-copy shared memory needs ptrace rights that containers often lack.
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    if nprocs > (os.cpu_count() or 1):
        # MPICH's shared-memory collectives spin on every rank being on a core: with more ranks than cores,
        # back-to-back MPI_Allreduce calls of 1 MB stalled for 2-4 s each (4 ranks on 2 cores); its generic
        # algorithms over point-to-point messages took 0.02 s. Open MPI ignores the variable.
        env.setdefault("MPIR_CVAR_DEVICE_COLLECTIVES", "none")
    return env


def _program_command(program) -> list:
    program = os.fspath(program)
    if not os.path.exists(program):
        raise FileNotFoundError(f"no program {program!r} to run under mpiexec")
    if program.endswith(".py"):
        # mpi4py's runner aborts every rank when one raises, instead of leaving the others waiting.
        return [sys.executable, "-m", "mpi4py", program]
    return [os.path.abspath(program)]


def _run_mpi(command: list, nprocs: int, timeout: float, what: str, tmp: str, echo: bool) -> list:
    path, flags = mpiexec()
    launch = [path, *flags, "-n", str(nprocs), "sh", "-c", _RANK_SHELL, "sh", tmp, *command]
    child = processes.Child(launch, log=os.path.join(tmp, "mpiexec.log"), env=_rank_env(nprocs))
    try:
        finished = processes.wait([child], time.monotonic() + timeout)
    finally:
        processes.stop([child])
    ranks = []
    for r in range(nprocs):
        log, status = os.path.join(tmp, f"rank{r}.log"), os.path.join(tmp, f"rank{r}.exit")
        output = open(log, errors="replace").read() if os.path.exists(log) else ""
        code = int(open(status).read().strip() or 1) if os.path.exists(status) else None
        ranks.append(Rank(r, code, output, started=os.path.exists(log),
                          returned=os.path.exists(os.path.join(tmp, f"rank{r}.returned"))))
    if echo:
        _echo(ranks)
    if not finished or child.returncode != 0 or any(r.exit != 0 for r in ranks):
        _raise_what_a_rank_raised(ranks, tmp, what)
        launcher = processes.tail(child.output(), 8)
        extra = f"mpiexec said:\n{processes.indent(launcher)}" if launcher and not any(r.died for r in ranks) else ""
        raise RanksFailed(_report(what, ranks, timed_out=not finished, timeout=timeout, from_shell=True,
                                  extra=extra))
    return ranks


def mpi(program, nprocs: int, *, args=(), timeout: float = TIMEOUT, echo: bool = True) -> list:
    """Run `program` (an executable, or a .py file that uses mpi4py) as `nprocs` MPI ranks; return
    each rank's output (stdout and stderr), indexed by rank. Raises RanksFailed unless every rank
    exits 0 within `timeout` seconds."""
    what = f"{nprocs} MPI ranks of {os.path.basename(os.fspath(program))}"
    with tempfile.TemporaryDirectory(prefix="hpcdl-mpi-") as tmp:
        ranks = _run_mpi(_program_command(program) + [str(a) for a in args], nprocs, timeout, what, tmp, echo)
    return [r.output for r in ranks]


_MPI_CALL = processes.CALL_FILE + processes.SAVE_RESULT + textwrap.dedent("""
    import os, pickle, sys
    from mpi4py import MPI
    path, function, nprocs, args_file, out_dir = sys.argv[1:]
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if size != int(nprocs):
        raise SystemExit(f"this rank sees {size} rank(s) instead of {nprocs}: mpi4py was built for another MPI "
                         f"than the mpiexec that started it")
    with open(args_file, "rb") as f:
        args = pickle.load(f)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    # What it raises is reported, then raised: mpi4py's runner aborts every rank.
    result = call_file(path, function, (rank, size, *args), {}, os.path.join(out_dir, f"rank{rank}.raised"))
    open(os.path.join(out_dir, f"rank{rank}.returned"), "w").close()
    save_result(result, os.path.join(out_dir, f"rank{rank}.pt"))
""")


def _results(ranks: list, tmp: str, what: str) -> list:
    missing = [r.rank for r in ranks if not os.path.exists(os.path.join(tmp, f"rank{r.rank}.pt"))]
    if missing:
        raise RanksFailed(f"{what}: rank(s) {missing} exited without returning a value (sys.exit() or os._exit()?).")
    return [processes.load_result(os.path.join(tmp, f"rank{r.rank}.pt")) for r in ranks]


def mpi_call(path, function: str, nprocs: int, *, args=(), timeout: float = TIMEOUT, echo: bool = True) -> list:
    """Import the Python file `path` on each of `nprocs` MPI ranks and call
    `function(rank, size, *args)` there (MPI.COMM_WORLD is the communicator); return the ranks'
    return values (tensors, numpy arrays, numbers, containers of them), indexed by rank."""
    what = f"{function}() of {os.path.basename(os.fspath(path))} on {nprocs} MPI ranks"
    with tempfile.TemporaryDirectory(prefix="hpcdl-mpi-") as tmp:
        args_file = os.path.join(tmp, "args.pkl")
        with open(args_file, "wb") as f:
            pickle.dump(tuple(args), f)
        command = [sys.executable, "-m", "mpi4py", "-c", _MPI_CALL, os.fspath(path), function, str(nprocs),
                   args_file, tmp]
        ranks = _run_mpi(command, nprocs, timeout, what, tmp, echo)
        return _results(ranks, tmp, what)


# --- torch.distributed -------------------------------------------------------------------------

_DISTRIBUTED_CALL = processes.CALL_FILE + processes.SAVE_RESULT + textwrap.dedent("""
    import os, pickle, sys, time
    import torch
    import torch.distributed as dist
    path, function, backend, args_file, out_dir = sys.argv[1:]
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if backend == "nccl":
        torch.cuda.set_device(rank)
    # Rank 0's store listens on a port the system gives it as it binds, and tells the others through a
    # file. A port chosen by the caller beforehand may be taken, before rank 0 binds it, by any
    # connection on this machine (EADDRINUSE).
    port_file = os.path.join(out_dir, "port")
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False)
        with open(port_file + ".part", "w") as f:
            f.write(str(store.port))
        os.replace(port_file + ".part", port_file)
    else:
        while not os.path.exists(port_file):
            time.sleep(0.02)
        with open(port_file) as f:
            store = dist.TCPStore("127.0.0.1", int(f.read()), world_size, is_master=False)
    os.environ["MASTER_PORT"] = str(store.port)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
    open(os.path.join(out_dir, f"rank{rank}.joined"), "w").close()
    # No rank runs the called file before every rank has joined: one that failed at once would close its
    # connections while a peer still set up its own (gloo's connectFullMesh), and that peer would die at
    # start-up, hiding the failure. Rank 0 hosts the store, so it too stays until then.
    joined = [os.path.join(out_dir, f"rank{r}.joined") for r in range(world_size)]
    while not all(os.path.exists(j) for j in joined):
        time.sleep(0.01)
    with open(args_file, "rb") as f:
        args = pickle.load(f)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    result = call_file(path, function, (rank, world_size, *args), {}, os.path.join(out_dir, f"rank{rank}.raised"))
    save_result(result, os.path.join(out_dir, f"rank{rank}.pt"))
    open(os.path.join(out_dir, f"rank{rank}.returned"), "w").close()
    # The result is kept: leave without tearing the process group down. Gloo's threads could abort the
    # interpreter's exit ("terminate called without an active exception") after the result was written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
""")


def default_backend(world_size: int) -> str:
    """NCCL with one GPU per rank when this machine has enough GPUs, else gloo on the CPU."""
    enough = device.ON_GPU and torch.cuda.device_count() >= world_size
    return "nccl" if enough and torch.distributed.is_nccl_available() else "gloo"


def _watch(children: list, timeout: float) -> tuple:
    """Wait for the ranks; returns (timed_out, exit codes). Once one rank dies, the others get GRACE
    seconds: a rank blocked on a dead peer may never notice by itself."""
    deadline = time.monotonic() + timeout
    while True:
        codes = [c.poll() for c in children]
        if all(code is not None for code in codes):
            return False, codes
        if any(code not in (None, 0) for code in codes):
            deadline = min(deadline, time.monotonic() + GRACE)
            if not processes.wait(children, deadline):
                return False, [c.poll() for c in children]
            continue
        if time.monotonic() >= deadline:
            return True, codes
        time.sleep(0.05)


def torch_distributed(path, function: str, world_size: int, *, args=(), timeout: float = TIMEOUT,
                      backend: str | None = None, echo: bool = True) -> list:
    """Start `world_size` processes that each join a torch.distributed group, import the Python file
    `path` and call `function(rank, world_size, *args)`; return their return values (tensors,
    numbers, containers of them; on the CPU), indexed by rank.

    backend: "gloo" (CPU) or "nccl" (one GPU per rank; each rank's current CUDA device is its own);
    by default NCCL when there are at least `world_size` GPUs, else gloo. A run whose ranks all ended
    before any joined the group (so `path` never ran) is started once more."""
    backend = backend or default_backend(world_size)
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise device.GPURequired(f"NCCL with {world_size} ranks needs {world_size} GPUs (one per rank); this "
                                 f"machine has {torch.cuda.device_count()}")
    what = f"{function}() of {os.path.basename(os.fspath(path))} on {world_size} {backend} ranks"
    for attempt in (1, 2):
        with tempfile.TemporaryDirectory(prefix="hpcdl-dist-") as tmp:
            ranks, timed_out = _start_torch_ranks(path, function, world_size, args, backend, timeout, tmp)
            if echo:
                _echo(ranks)
            if not timed_out and all(r.exit == 0 for r in ranks):
                return _results(ranks, tmp, what)
            if attempt == 1 and _died_starting(ranks, timed_out):
                continue
            _raise_what_a_rank_raised(ranks, tmp, what)
            raise RanksFailed(_report(what, ranks, timed_out=timed_out, timeout=timeout))


def _died_starting(ranks: list, timed_out: bool) -> bool:
    """Every rank ended before any joined the group, so the called file never ran: the machine failed
    them (a library that did not load while memory was short, a port taken), not the code under test."""
    return not timed_out and not any(r.joined for r in ranks) and any(r.died for r in ranks)


def _start_torch_ranks(path, function, world_size, args, backend, timeout, tmp) -> tuple:
    """Run the ranks once, their files in the folder tmp; (ranks, timed_out)."""
    args_file = os.path.join(tmp, "args.pkl")
    with open(args_file, "wb") as f:
        pickle.dump(tuple(args), f)
    children = []
    try:
        for rank in range(world_size):
            env = _rank_env() | {"MASTER_ADDR": "127.0.0.1", "RANK": str(rank), "WORLD_SIZE": str(world_size),
                                 "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world_size)}
            command = [sys.executable, "-c", _DISTRIBUTED_CALL, os.fspath(path), function, backend, args_file, tmp]
            children.append(processes.Child(command, log=os.path.join(tmp, f"rank{rank}.log"), env=env))
        timed_out, codes = _watch(children, timeout)
    finally:
        processes.stop(children)
    ranks = [Rank(r, code, c.output(), returned=os.path.exists(os.path.join(tmp, f"rank{r}.returned")),
                  joined=os.path.exists(os.path.join(tmp, f"rank{r}.joined")), exited_at=c.exited_at or 0.0)
             for r, (code, c) in enumerate(zip(codes, children))]
    return ranks, timed_out
