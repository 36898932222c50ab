"""The worker runs answer cells as IPython would for what kernels need: on a GPU, Triton's JIT reads
each kernel's source with inspect.getsource, which the CPU interpreter does not need."""
import inspect

from hpcdl_grader.worker import run_source


def test_functions_defined_in_a_cell_have_their_source():
    namespace = {}
    run_source("def twice(x):\n    return 2 * x\n", "<cell twice>", namespace)
    assert inspect.getsource(namespace["twice"]) == "def twice(x):\n    return 2 * x\n"
    assert namespace["twice"](3) == 6


def test_a_cell_run_again_shows_its_new_source():
    namespace = {}
    run_source("def f():\n    return 1\n", "<cell f>", namespace)
    run_source("def f():\n    return 2\n", "<cell f>", namespace)
    assert "return 2" in inspect.getsource(namespace["f"])


AUTOTUNED_CELL = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
@triton.jit
def block_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.zeros((BLOCK,), dtype=tl.int32) + BLOCK, mask=offsets < n)


def blocks(n):
    out = torch.empty(n, dtype=torch.int32)
    block_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](out, n)
    return out
'''


def test_a_checked_call_runs_the_first_configuration_without_tuning():
    import hpcdl  # noqa: F401 (first: Triton's interpreter on a CPU)
    from triton.runtime.autotuner import Autotuner

    from hpcdl_grader.worker import Worker

    tuned_run = Autotuner.run
    worker = Worker()
    assert worker.run_cells([{"id": "a", "source": AUTOTUNED_CELL, "answer": True}])["errors"] == {}
    for checked in (True, False):
        reply = worker.call({"name": "blocks", "args": [50], "checked": checked, "kernels": ["block_kernel"]})
        assert reply["result"].tolist() == [16] * 50  # the first configuration, on every launch
        if checked:
            assert len(reply["launches"]["block_kernel"]) == 1
    assert worker.namespace["block_kernel"].cache == {}  # nothing was timed or kept as tuned
    assert worker.namespace["block_kernel"].configs[1].kwargs == {"BLOCK": 32}  # both still there
    assert Autotuner.run is tuned_run
