"""hpcdl_course.cpp_stubs: C++ solution regions are released as C++ that compiles."""
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat", reason="the instructor tools (nbgrader) are not installed")
pytest.importorskip("nbgrader", reason="the instructor tools (nbgrader) are not installed")

from nbgrader.preprocessors import ClearSolutions  # noqa: E402
from traitlets.config.loader import PyFileConfigLoader  # noqa: E402

import capabilities  # noqa: E402
from hpcdl import build, ranks  # noqa: E402
from hpcdl_course.cpp_stubs import CPP_STUB, ClearSolutionsWithCpp, replace_cpp_regions  # noqa: E402

RING_CPP_CELL = '''RING_CPP = r"""
#include <mpi.h>
#include <stdexcept>

void ring_allreduce(double* x, int n, MPI_Comm comm) {
    // BEGIN SOLUTION
    int size;
    MPI_Comm_size(comm, &size);
    // END SOLUTION
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    double x[3] = {1, 2, 3};
    ring_allreduce(x, 3, MPI_COMM_WORLD);
    MPI_Finalize();
}
"""'''

MIXED_CELL = '''HELPER_PY = r"""
def helper(x):
    ### BEGIN SOLUTION
    return 2 * x
    ### END SOLUTION
"""
KERNEL_CPP = r"""
int twice(int x) {
    // BEGIN SOLUTION
    return 2 * x;
    // END SOLUTION
}
"""'''


def solution_cell(source: str, grade_id: str):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata.nbgrader = {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": 3,
                              "solution": True, "task": False}
    return cell


def release(*cells, preprocessor=ClearSolutionsWithCpp):
    nb = nbformat.v4.new_notebook(cells=list(cells))
    nb.metadata.kernelspec = {"name": "python3", "language": "python", "display_name": "Python 3"}
    released, _ = preprocessor().preprocess(nb, {})
    return [cell.source for cell in released.cells]


def test_cpp_region_becomes_an_indented_cpp_stub():
    (source,) = release(solution_cell(RING_CPP_CELL, "ring"))
    assert "MPI_Comm_size" not in source and "BEGIN SOLUTION" not in source
    stub = "\n".join("    " + line for line in CPP_STUB.splitlines())
    assert f"void ring_allreduce(double* x, int n, MPI_Comm comm) {{\n{stub}\n}}" in source
    assert source.startswith('RING_CPP = r"""') and "int main" in source


def test_python_and_cpp_regions_in_one_cell_each_get_their_own_stub():
    (source,) = release(solution_cell(MIXED_CELL, "mixed"))
    assert "    # YOUR CODE HERE\n    raise NotImplementedError()" in source
    assert '    throw std::runtime_error("not implemented");' in source
    assert "2 * x" not in source


def test_why_clear_solutions_is_replaced_rather_than_preceded():
    # Alone, it puts its Python stub into the C++ ...
    (source,) = release(solution_cell(RING_CPP_CELL, "ring"), preprocessor=ClearSolutions)
    assert "    # YOUR CODE HERE\n    raise NotImplementedError()\n}" in source
    # ... and after a step that stubbed the C++ it finds no region, so it replaces the whole cell.
    stubbed, _ = replace_cpp_regions(RING_CPP_CELL, CPP_STUB)
    (source,) = release(solution_cell(stubbed, "ring"), preprocessor=ClearSolutions)
    assert source == "# YOUR CODE HERE\nraise NotImplementedError()"


def test_cpp_region_outside_a_solution_cell_is_refused():
    with pytest.raises(RuntimeError, match="non-solution cell"):
        release(nbformat.v4.new_code_cell(RING_CPP_CELL))


def test_unterminated_region_is_refused():
    with pytest.raises(RuntimeError, match="without `// END SOLUTION`"):
        replace_cpp_regions("int f() {\n  // BEGIN SOLUTION\n  return 1;\n}", CPP_STUB)


def test_course_config_puts_it_in_clear_solutions_place():
    autograder = pathlib.Path(__file__).parents[1]
    config = PyFileConfigLoader("nbgrader_config.py", path=str(autograder)).load_config()
    steps = config.GenerateAssignment.preprocessors
    assert ClearSolutionsWithCpp in steps and ClearSolutions not in steps
    assert steps.index(ClearSolutionsWithCpp) == 3  # after LockCells, as nbgrader orders ClearSolutions


@capabilities.mpi_cxx
def test_released_stub_compiles_and_says_not_implemented():
    (source,) = release(solution_cell(RING_CPP_CELL, "ring"))
    namespace = {}
    exec(source, namespace)  # the cell as the learner gets it: it defines RING_CPP
    program = build.mpi_program("ring_stub", namespace["RING_CPP"])
    with pytest.raises(ranks.RanksFailed, match="(?s)SIGABRT.*not implemented"):
        ranks.mpi(program, 1, timeout=60, echo=False)
