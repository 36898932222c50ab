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
