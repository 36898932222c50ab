"""hpcdl.ranks: learner code as MPI ranks (mpi4py and C++) and as torch.distributed ranks.

Each all-reduce runs a right and a wrong version (the reduce-scatter one step short), and the check
must catch the wrong one. A hang and a crash must be reported by rank, with nothing left running; an
exception a rank raises must be raised again in the caller with its type (a hostile rank cannot choose
another class).
"""
import os

import numpy as np
import pytest
import torch

import capabilities
from leftovers import no_leftovers  # noqa: F401  (a fixture)
from hpcdl import build, check, files, processes, ranks
from hpcdl.ranks import RanksFailed

N = 11  # elements: not a multiple of 2 or 3, so the chunks differ in size

RING_PY = '''
import numpy as np
from mpi4py import MPI


def ring_allreduce(comm, x):
    """Sum x over the ranks in place: reduce-scatter, then all-gather, around the ring."""
    rank, size = comm.Get_rank(), comm.Get_size()
    bounds = [len(x) * c // size for c in range(size + 1)]

    def chunk(c):
        return slice(bounds[c % size], bounds[c % size + 1])

    after, before = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):  # reduce-scatter
        send, recv = chunk(rank - step), chunk(rank - step - 1)
        incoming = np.empty(recv.stop - recv.start)
        comm.Sendrecv(np.ascontiguousarray(x[send]), dest=after, recvbuf=incoming, source=before)
        x[recv] += incoming
    for step in range(size - 1):  # all-gather
        send, recv = chunk(rank + 1 - step), chunk(rank - step)
        incoming = np.empty(recv.stop - recv.start)
        comm.Sendrecv(np.ascontiguousarray(x[send]), dest=after, recvbuf=incoming, source=before)
        x[recv] = incoming
    return x


def run(rank, size, n):
    return ring_allreduce(MPI.COMM_WORLD, np.arange(n, dtype=np.float64) + 1000 * rank)


def deadlock(rank, size):
    if rank == 1:
        MPI.COMM_WORLD.recv(source=0)  # rank 0 never sends
    return rank


class ShapeError(ValueError):
    pass


def fails(rank, size, kind):
    if rank == 1:
        raise ShapeError("rank 1's own kind of error") if kind == "own" else ValueError("n must be positive")
    MPI.COMM_WORLD.recv(source=1)  # waits for rank 1, which never sends


def imports(rank, size):
    import sys
    return {"torch": "torch" in sys.modules, "scalar": np.float32(rank), "nested": [{"x": np.arange(rank + 1)}]}


def forges_its_result(rank, size, marker):
    """Returns, then replaces its saved result with a pickle that would run a command when loaded."""
    import atexit, os, pickle, sys

    class Command:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    def forge():
        with open(os.path.join(sys.argv[-1], f"rank{rank}.pt"), "wb") as f:
            pickle.dump(Command(), f)
    atexit.register(forge)
    return rank
'''

RING_CPP = r'''
#include <mpi.h>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <vector>

static int chunk_start(int c, int n, int p) { return static_cast<int>(static_cast<long>(c) * n / p); }

void ring_allreduce(std::vector<double>& x, MPI_Comm comm) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const int n = static_cast<int>(x.size());
    const int after = (rank + 1) % size, before = (rank + size - 1) % size;
    std::vector<double> incoming(n / size + 1);
    auto exchange = [&](int send_chunk, int recv_chunk) {
        int s0 = chunk_start(send_chunk, n, size), s1 = chunk_start(send_chunk + 1, n, size);
        int r0 = chunk_start(recv_chunk, n, size), r1 = chunk_start(recv_chunk + 1, n, size);
        // Even ranks send first, odd ranks receive first, so the blocking calls cannot all wait.
        if (rank % 2 == 0) {
            MPI_Send(x.data() + s0, s1 - s0, MPI_DOUBLE, after, 0, comm);
            MPI_Recv(incoming.data(), r1 - r0, MPI_DOUBLE, before, 0, comm, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(incoming.data(), r1 - r0, MPI_DOUBLE, before, 0, comm, MPI_STATUS_IGNORE);
            MPI_Send(x.data() + s0, s1 - s0, MPI_DOUBLE, after, 0, comm);
        }
        return r0;
    };
    for (int step = 0; step < size - 1; ++step) {  // reduce-scatter
        int c = (rank - step - 1 + 2 * size) % size;
        int r0 = exchange((rank - step + size) % size, c);
        for (int i = r0; i < chunk_start(c + 1, n, size); ++i) x[i] += incoming[i - r0];
    }
    for (int step = 0; step < size - 1; ++step) {  // all-gather
        int c = (rank - step + 2 * size) % size;
        int r0 = exchange((rank + 1 - step + size) % size, c);
        for (int i = r0; i < chunk_start(c + 1, n, size); ++i) x[i] = incoming[i - r0];
    }
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const int n = std::atoi(argv[1]);
    if (argc > 2 && rank == std::atoi(argv[2])) *reinterpret_cast<volatile int*>(8) = 1;  // crash on request
    std::vector<double> x(n);
    for (int i = 0; i < n; ++i) x[i] = 1000.0 * rank + i;
    ring_allreduce(x, MPI_COMM_WORLD);
    for (double v : x) std::printf("%.17g ", v);
    std::printf("\n");
    MPI_Finalize();
}
'''

AVERAGE_PY = '''
import time

import torch
import torch.distributed as dist


def average(t):
    """Every rank ends with the mean of t over the ranks (what DDP does to gradients)."""
    dist.all_reduce(t)
    t /= dist.get_world_size()
    return t


def run(rank, world_size, n):
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    return average(torch.arange(n, dtype=torch.float32, device=device) + 100 * rank)


def stuck(rank, world_size):
    while rank == 1:
        time.sleep(0.1)
    return rank


def fails(rank, world_size):
    if rank == 1:
        raise ValueError("rank 1 got a tensor of the wrong shape")
    dist.barrier()


def forges(rank, world_size, name):
    """A hostile rank: it writes the report of an exception itself, naming any class, and exits."""
    import json, os, sys
    if rank == 1:
        with open(os.path.join(sys.argv[-1], f"rank{rank}.raised"), "w") as f:
            json.dump({"type": name, "message": "forged", "when": 0}, f)
        os._exit(1)
    return rank


def crashes(rank, world_size):
    dist.barrier()  # rank 1 is past start-up, which needs rank 0 (it holds the store), before rank 0 dies
    if rank == 0:
        import ctypes
        ctypes.string_at(0)  # a segfault: no exception of Python's
    time.sleep(2)  # within ranks.GRACE
    raise ValueError("rank 1 raises after rank 0 died")


def exits(rank, world_size):
    if rank == 1:
        raise SystemExit(3)  # an exit, not an exception to raise again
    return rank


def sees_every_rank_joined(rank, world_size):
    import os, sys
    return all(os.path.exists(os.path.join(sys.argv[-1], f"rank{r}.joined")) for r in range(world_size))
'''

# Imported by each rank as it starts (PYTHONPATH): rank 0 stays a while after joining its process group.
SLOW_RANK_0 = '''
import os
if os.environ.get("RANK") == "0":
    import time
    import torch.distributed as dist
    joined = dist.init_process_group
    def init_process_group(*args, **kwargs):
        joined(*args, **kwargs)
        time.sleep(1.5)
    dist.init_process_group = init_process_group
'''


def wrong(source: str, right_line: str, wrong_line: str) -> str:
    assert source.count(right_line) == 1
    return source.replace(right_line, wrong_line)


def expected_sum(n: int, size: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float64) * size + 1000 * sum(range(size))


def problems(results, expected) -> list:
    """hpcdl.check's comparison, rank by rank: the check a notebook's test cell would make."""
    return [check.compare(torch.as_tensor(r, dtype=expected.dtype), expected) for r in results]


@pytest.fixture
def ring_py(tmp_path):
    return files.write(tmp_path / "ring_allreduce.py", RING_PY)


@capabilities.mpi
@pytest.mark.parametrize("nprocs", [2, 3])
def test_mpi4py_ring_allreduce_right_and_wrong(tmp_path, ring_py, nprocs, capfd):
    results = ranks.mpi_call(ring_py, "run", nprocs, args=(N,), timeout=120)
    assert capfd.readouterr().err == ""  # stderr would cost a grade cell its points
    assert len(results) == nprocs and isinstance(results[0], np.ndarray)
    assert problems(results, expected_sum(N, nprocs)) == [None] * nprocs

    short = files.write(tmp_path / "ring_short.py", wrong(RING_PY, "for step in range(size - 1):  # reduce-scatter",
                                                          "for step in range(size - 2):  # reduce-scatter"))
    results = ranks.mpi_call(short, "run", nprocs, args=(N,), timeout=120)
    assert any(problems(results, expected_sum(N, nprocs)))


@capabilities.mpi
def test_mpi4py_ranks_send_arrays_without_importing_torch(ring_py):
    results = ranks.mpi_call(ring_py, "imports", 2, timeout=120)
    assert [r["torch"] for r in results] == [False, False]  # a rank that imports torch starts a second slower
    assert results[1]["scalar"] == np.float32(1) and type(results[1]["scalar"]) is np.float32
    assert np.array_equal(results[1]["nested"][0]["x"], np.arange(2))


@capabilities.mpi
def test_a_result_file_a_rank_forged_cannot_run_code_here(ring_py, tmp_path, no_leftovers):
    marker = tmp_path / "ran"
    with pytest.raises(Exception, match="posix.system, which is not a numpy array"):
        ranks.mpi_call(ring_py, "forges_its_result", 2, args=(marker,), timeout=120)
    assert not marker.exists()


@pytest.fixture(scope="module")
def ring_programs():
    short = wrong(RING_CPP, "for (int step = 0; step < size - 1; ++step) {  // reduce-scatter",
                  "for (int step = 0; step < size - 2; ++step) {  // reduce-scatter")
    return build.mpi_program("ring", RING_CPP), build.mpi_program("ring_short", short)


def parse(outputs) -> list:
    return [np.array(out.split(), dtype=np.float64) for out in outputs]


@capabilities.mpi_cxx
@pytest.mark.parametrize("nprocs", [2, 3])
def test_cpp_ring_allreduce_right_and_wrong(ring_programs, nprocs):
    right, short = ring_programs
    assert problems(parse(ranks.mpi(right, nprocs, args=(N,), timeout=60)), expected_sum(N, nprocs)) == [None] * nprocs
    assert any(problems(parse(ranks.mpi(short, nprocs, args=(N,), timeout=60)), expected_sum(N, nprocs)))


@capabilities.mpi_cxx
def test_crashing_cpp_rank_is_named_with_its_signal(ring_programs, no_leftovers):
    with pytest.raises(RanksFailed) as failure:
        ranks.mpi(ring_programs[0], 3, args=(N, 1), timeout=60)
    message = str(failure.value)
    assert "rank 1 was killed by SIGSEGV" in message.splitlines()[0]
    assert "rank 0: was stopped after another rank failed" in message


@capabilities.mpi
def test_deadlocked_mpi_rank_is_named_and_stopped(ring_py, no_leftovers):
    with pytest.raises(RanksFailed) as failure:
        ranks.mpi_call(ring_py, "deadlock", 2, timeout=5)
    message = str(failure.value)
    assert "rank 1 did not finish within 5 s" in message
    assert "rank 0: returned its value" in message and "rank 1: did not finish" in message


@capabilities.mpi
def test_exception_in_an_mpi_rank_is_raised_again_with_its_type(ring_py, no_leftovers):
    with pytest.raises(ValueError) as raised:
        ranks.mpi_call(ring_py, "fails", 3, args=("builtin",), timeout=60)
    assert type(raised.value) is ValueError and str(raised.value) == "n must be positive"
    assert raised.value.__notes__ == ["raised on rank 1 by fails() of ring_allreduce.py on 3 MPI ranks; every "
                                      "process of the run was stopped"]
    with pytest.raises(processes.ChildError) as raised:  # a class of the rank's own: by name, never its bases
        ranks.mpi_call(ring_py, "fails", 2, args=("own",), timeout=60)
    assert type(raised.value).__name__ == "ShapeError" and not isinstance(raised.value, ValueError)


@pytest.fixture
def average_py(tmp_path):
    return files.write(tmp_path / "average.py", AVERAGE_PY)


def expected_mean(n: int, world_size: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32) + 100 * sum(range(world_size)) / world_size


def test_gloo_average_right_and_wrong(tmp_path, average_py, capfd):
    results = ranks.torch_distributed(average_py, "run", 2, args=(N,), backend="gloo", timeout=120)
    assert capfd.readouterr().err == ""
    assert problems(results, expected_mean(N, 2)) == [None, None]

    no_division = files.write(tmp_path / "average_sum.py",
                              wrong(AVERAGE_PY, "    t /= dist.get_world_size()\n", ""))
    results = ranks.torch_distributed(no_division, "run", 2, args=(N,), backend="gloo", timeout=120)
    assert all(problems(results, expected_mean(N, 2)))


def test_ranks_that_all_die_at_start_up_are_started_once_more(average_py, tmp_path, monkeypatch, no_leftovers):
    # As when torch's libraries fail to load while the machine is short of memory: every rank of the first
    # run exits before joining the group; the second run works.
    first = tmp_path / "first-run-done"
    monkeypatch.setattr(ranks, "_DISTRIBUTED_CALL", f"""
import os, sys
if not os.path.exists({str(first)!r}):
    if os.environ["RANK"] == "0":
        open({str(first)!r}, "w").close()
    sys.exit(2)
""" + ranks._DISTRIBUTED_CALL)
    results = ranks.torch_distributed(average_py, "run", 2, args=(N,), backend="gloo", timeout=120)
    assert problems(results, expected_mean(N, 2)) == [None, None]


def test_hung_torch_rank_is_named_and_stopped(average_py, no_leftovers):
    with pytest.raises(RanksFailed) as failure:
        ranks.torch_distributed(average_py, "stuck", 2, backend="gloo", timeout=10)
    message = str(failure.value)
    assert "rank 1 did not finish within 10 s" in message
    assert "rank 0: finished" in message


def test_exception_in_a_torch_rank_is_raised_again_with_its_type(average_py, no_leftovers):
    with pytest.raises(ValueError) as raised:
        ranks.torch_distributed(average_py, "fails", 2, backend="gloo", timeout=60)
    e = raised.value
    assert type(e) is ValueError and str(e) == "rank 1 got a tensor of the wrong shape"
    # rank 0 may have raised too (gloo: its peer closed the connection), but after rank 1
    assert e.__notes__[0].startswith("raised on rank 1 by fails() of average.py on 2 gloo ranks")
    check.raises(ranks.torch_distributed, (average_py, "fails", 2), ValueError)  # what a test cell does


@pytest.mark.parametrize("name", ["SystemExit", "KeyboardInterrupt", "eval", "os.system", "OSError", "RanksFailed"])
def test_a_hostile_torch_rank_cannot_choose_the_class_raised_here(average_py, name, no_leftovers):
    with pytest.raises(processes.ChildError) as raised:
        ranks.torch_distributed(average_py, "forges", 2, args=(name,), backend="gloo", timeout=60)
    assert type(raised.value).__bases__ == (processes.ChildError,) and str(raised.value) == "forged"


def test_no_rank_runs_the_file_before_every_rank_has_joined(average_py, tmp_path, monkeypatch):
    """A rank that failed at once closed its connections while a slower peer still set up its own (gloo's
    connectFullMesh): that peer died at start-up and the failure was reported as its (CI, 2026-12-07)."""
    files.write(tmp_path / "slow" / "sitecustomize.py", SLOW_RANK_0)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path / "slow"),
                                                                     os.environ.get("PYTHONPATH")])))
    assert ranks.torch_distributed(average_py, "sees_every_rank_joined", 2, backend="gloo", timeout=60) == [True] * 2


def test_a_crash_that_makes_another_rank_raise_is_described_rank_by_rank(average_py, no_leftovers):
    with pytest.raises(RanksFailed) as failure:
        ranks.torch_distributed(average_py, "crashes", 2, backend="gloo", timeout=60)
    message = str(failure.value)
    assert message.startswith("crashes() of average.py on 2 gloo ranks: rank 0 was killed by SIGSEGV")
    assert "rank 1: exited with code 1" in message and "ValueError: rank 1 raises after rank 0 died" in message


def test_exit_in_a_torch_rank_is_still_described_rank_by_rank(average_py, no_leftovers):
    with pytest.raises(RanksFailed, match=r"exits\(\) of average.py on 2 gloo ranks: rank 1 exited with code 3\."):
        ranks.torch_distributed(average_py, "exits", 2, backend="gloo", timeout=60)


@capabilities.gpu
def test_nccl_one_rank_per_gpu(average_py):
    world_size = torch.cuda.device_count()
    results = ranks.torch_distributed(average_py, "run", world_size, args=(N,), timeout=180)
    assert ranks.default_backend(world_size) == "nccl"
    assert problems(results, expected_mean(N, world_size)) == [None] * world_size


@capabilities.multi_gpu(2)
def test_nccl_two_ranks_wrong_average_is_caught(tmp_path):
    no_division = files.write(tmp_path / "average_sum.py", wrong(AVERAGE_PY, "    t /= dist.get_world_size()\n", ""))
    results = ranks.torch_distributed(no_division, "run", 2, args=(N,), backend="nccl", timeout=180)
    assert all(problems(results, expected_mean(N, 2)))


def test_launcher_flags_follow_the_mpi_implementation():
    assert ranks.launcher_flags("HYDRA build details:\n    Version: 5.0.2", root=True) == []
    openmpi = "mpiexec (OpenRTE) 4.1.6\n\nReport bugs to http://www.open-mpi.org/community/help/"
    assert ranks.launcher_flags(openmpi, root=False) == ["--oversubscribe", "--bind-to", "none"]
    assert ranks.launcher_flags(openmpi, root=True)[-1] == "--allow-run-as-root"


def test_without_gpus_the_backend_is_gloo():
    assert ranks.default_backend(torch.cuda.device_count() + 1) == "gloo"


def test_more_ranks_than_cores_use_mpichs_point_to_point_collectives(monkeypatch):
    monkeypatch.delenv("MPIR_CVAR_DEVICE_COLLECTIVES", raising=False)
    cores = os.cpu_count() or 1
    assert ranks._rank_env(cores + 1)["MPIR_CVAR_DEVICE_COLLECTIVES"] == "none"
    assert "MPIR_CVAR_DEVICE_COLLECTIVES" not in ranks._rank_env(1)
    monkeypatch.setenv("MPIR_CVAR_DEVICE_COLLECTIVES", "all")  # the caller's choice stands
    assert ranks._rank_env(cores + 1)["MPIR_CVAR_DEVICE_COLLECTIVES"] == "all"
