"""Benchmark notebook 06 on this machine's CPU: bus bandwidth of the reference Python ring (mpi4py), the
reference C++ ring and the MPI library's Allreduce, on 4 ranks, from 1 KB to 64 MB.

    PYTHONPATH=autograder .venv/bin/python -m benchmarks.ring_allreduce OUT.json   (repository root)

Each size is timed as the mean of 2 to 10 calls after one warm-up call, between barriers, and the
slowest rank's time is kept; a warm-up slower than SLOW_SECONDS is kept as the time instead.
busbw = size / time * 2(P-1)/P. Both rings are checked first (every element
of a buffer of ones must come out as P). The library is timed from C++ (MPI_Allreduce) and from mpi4py
(comm.Allreduce), the same MPI call.
"""
import datetime
import json
import os
import platform
import sys
import tempfile

import hpcdl

from hpcdl_course.solution_modules import module

RANKS = 4
SIZES_BYTES = [2**k for k in range(10, 27, 2)]  # 1 KB to 64 MB
BATCH_BYTES = 2**24  # each size is timed over about this many bytes, in 2 to 10 calls
SLOW_SECONDS = 0.5  # a first call slower than this is the measurement (the library takes minutes at 64 MB)

PY_TIMING = '''
import time
import numpy as np
from mpi4py import MPI
from ring_allreduce import ring_allreduce


SLOW = %g


def reps(nbytes):
    return max(2, min(10, %d // nbytes))


def timed(comm, fn, nbytes):
    comm.Barrier()
    start = time.perf_counter()
    fn()
    first = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    if first > SLOW:  # a call this slow is timed once: its warm-up
        return first
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(reps(nbytes)):
        fn()
    return comm.allreduce((time.perf_counter() - start) / reps(nbytes), op=MPI.MAX)


def run(rank, size, sizes_bytes):
    comm = MPI.COMM_WORLD
    ones = np.ones(1001)
    assert np.all(ring_allreduce(comm, ones) == size), "the Python ring's sum is wrong"
    seconds = {"Python ring (mpi4py)": [], "comm.Allreduce (mpi4py)": []}
    for nbytes in sizes_bytes:
        x = np.zeros(nbytes // 8)
        out = np.empty_like(x)
        seconds["Python ring (mpi4py)"].append(timed(comm, lambda: ring_allreduce(comm, x), nbytes))
        seconds["comm.Allreduce (mpi4py)"].append(timed(comm, lambda: comm.Allreduce(x, out), nbytes))
    return seconds
''' % (SLOW_SECONDS, BATCH_BYTES)

CPP_TIMING = r'''
#include <algorithm>
#include <cstdio>
#include <cstdlib>

static double timed(int reps, MPI_Comm comm, void (*fn)(std::vector<double>&, std::vector<double>&),
                    std::vector<double>& x, std::vector<double>& y) {
    MPI_Barrier(comm);
    double first_start = MPI_Wtime();
    fn(x, y);
    double first = MPI_Wtime() - first_start, slowest_first;
    MPI_Allreduce(&first, &slowest_first, 1, MPI_DOUBLE, MPI_MAX, comm);
    if (slowest_first > SLOW_SECONDS) return slowest_first;  // a call this slow is timed once: its warm-up
    MPI_Barrier(comm);
    const double start = MPI_Wtime();
    for (int i = 0; i < reps; ++i) fn(x, y);
    double mine = (MPI_Wtime() - start) / reps, slowest;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    return slowest;
}

static void ring(std::vector<double>& x, std::vector<double>&) { ring_allreduce(x, MPI_COMM_WORLD); }

static void library(std::vector<double>& x, std::vector<double>& y) {
    MPI_Allreduce(x.data(), y.data(), static_cast<int>(x.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::vector<double> ones(1001, 1.0);
    ring_allreduce(ones, MPI_COMM_WORLD);
    const bool right = std::all_of(ones.begin(), ones.end(), [&](double v) { return v == size; });
    if (rank == 0) std::printf("check %s\n", right ? "ok" : "wrong");
    for (int a = 1; a < argc; ++a) {
        const long nbytes = std::atol(argv[a]);
        const int reps = static_cast<int>(std::max(2L, std::min(10L, BATCH_BYTES / nbytes)));
        std::vector<double> x(nbytes / 8, 0.0), y(nbytes / 8);
        const double t_ring = timed(reps, MPI_COMM_WORLD, ring, x, y);
        const double t_library = timed(reps, MPI_COMM_WORLD, library, x, y);
        if (rank == 0) std::printf("time %ld %.9g %.9g\n", nbytes, t_ring, t_library);
    }
    MPI_Finalize();
    return 0;
}
'''.replace("BATCH_BYTES", f"{BATCH_BYTES}L").replace("SLOW_SECONDS", f"{SLOW_SECONDS}")


def busbw_gbps(nbytes: int, seconds: float, ranks: int = RANKS) -> float:
    return nbytes / seconds * 2 * (ranks - 1) / ranks / 1e9


def python_seconds(solution) -> dict:
    with tempfile.TemporaryDirectory(prefix="hpcdl-ring-bench-") as tmp:
        with open(os.path.join(tmp, "ring_allreduce.py"), "w") as f:
            f.write(solution.RING_ALLREDUCE_PY)
        with open(os.path.join(tmp, "ring_timing.py"), "w") as f:
            f.write(PY_TIMING)
        return hpcdl.ranks.mpi_call(os.path.join(tmp, "ring_timing.py"), "run", RANKS, args=(SIZES_BYTES,),
                                    timeout=600, echo=False)[0]


def cpp_seconds(solution) -> dict:
    program = hpcdl.build.mpi_program("ring_allreduce_bench", solution.RING_CPP + CPP_TIMING)
    output = hpcdl.ranks.mpi(program, RANKS, args=SIZES_BYTES, timeout=1500, echo=False)[0]
    assert "check ok" in output, f"the C++ ring's sum is wrong:\n{output}"
    rows = [line.split()[1:] for line in output.splitlines() if line.startswith("time ")]
    return {"C++ ring": [float(r[1]) for r in rows], "MPI_Allreduce (C++)": [float(r[2]) for r in rows]}


def ratios_at_largest(busbw: dict) -> dict:
    """Each ring's busbw at the largest size over the library's, called from C++ and from mpi4py."""
    largest = {name: values[-1] for name, values in busbw.items()}
    return {f"{ring} / {library}": largest[ring] / largest[library]
            for ring in ("C++ ring", "Python ring (mpi4py)")
            for library in ("MPI_Allreduce (C++)", "comm.Allreduce (mpi4py)")}


def machine() -> dict:
    import mpi4py
    import numpy
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    mpich = hpcdl.processes.output_of([hpcdl.processes.find_program("mpichversion")], timeout=60)[1]
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{cpu}, {os.cpu_count()} cores, no GPU", "python": platform.python_version(),
            "numpy": numpy.__version__, "mpi4py": mpi4py.__version__,
            "mpi": " ".join(mpich.split()[:3]) if mpich else "unknown",
            "command": "PYTHONPATH=autograder .venv/bin/python -m benchmarks.ring_allreduce OUT.json",
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "mpich_device_collectives": os.environ.get("MPIR_CVAR_DEVICE_COLLECTIVES",
                                                       "none (hpcdl.ranks: more ranks than cores)"
                                                       if RANKS > (os.cpu_count() or 1) else "default"),
            "timing": f"mean of 2 to 10 calls (about {BATCH_BYTES >> 20} MB per size) after one warm-up, between "
                      f"barriers, slowest rank; a warm-up slower than {SLOW_SECONDS} s is the measurement itself; "
                      "zero-filled float64 buffers"}


def main(out_path: str) -> None:
    solution = module("06_ring_allreduce")
    seconds = python_seconds(solution) | cpp_seconds(solution)
    busbw = {name: [busbw_gbps(b, t) for b, t in zip(SIZES_BYTES, times)] for name, times in seconds.items()}
    results = {**machine(), "ranks": RANKS, "sizes_bytes": SIZES_BYTES, "seconds": seconds, "busbw_gbps": busbw,
               "at_64MB": ratios_at_largest(busbw)}
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    print(f"{'bytes':>10} " + " ".join(f"{name:>24}" for name in busbw))
    for i, nbytes in enumerate(SIZES_BYTES):
        print(f"{nbytes:>10} " + " ".join(f"{values[i]:>20.3f} GB/s" for values in busbw.values()))
    print("at 64 MB, busbw ratios:", json.dumps(results["at_64MB"]))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
