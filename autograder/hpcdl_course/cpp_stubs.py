"""Release C++ solution regions as C++ stubs that compile.

An answer whose code must be a C++ file keeps it in a Python string in the answer cell, with the
solution between `// BEGIN SOLUTION` and `// END SOLUTION`. nbgrader's ClearSolutions would put
its Python stub (`raise NotImplementedError()`) there, which is not C++. A separate step before it
would not do either: once the C++ regions are stubbed, ClearSolutions finds no region in the cell
and replaces the whole cell, string and all, with its stub. So ClearSolutionsWithCpp stubs the C++
regions and then does ClearSolutions' own work, in ClearSolutions' place in
GenerateAssignment.preprocessors (see nbgrader_config.py).
"""
import re

from nbgrader.preprocessors import ClearSolutions
from traitlets import Unicode

# Compiles as the body of any function, whatever it returns; hpcdl.build's headers bring <stdexcept>,
# a plain C++ file needs `#include <stdexcept>`. Learners see "not implemented" when it runs.
CPP_STUB = '// YOUR CODE HERE\nthrow std::runtime_error("not implemented");'


def replace_cpp_regions(source: str, stub: str, begin="BEGIN SOLUTION", end="END SOLUTION") -> tuple:
    """(source with each `// BEGIN SOLUTION` ... `// END SOLUTION` region replaced by `stub`,
    indented like the BEGIN line; whether any region was replaced)."""
    out, inside, replaced = [], False, False
    for line in source.split("\n"):
        comment = line.lstrip().startswith("//")
        if comment and begin in line:
            if inside:
                raise RuntimeError(f"nested `// {begin}` in:\n{source}")
            inside = replaced = True
            indent = re.match(r"\s*", line).group(0)
            out.extend(indent + stub_line for stub_line in stub.split("\n"))
        elif comment and end in line and inside:
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise RuntimeError(f"`// {begin}` without `// {end}` in:\n{source}")
    return "\n".join(out), replaced


class ClearSolutionsWithCpp(ClearSolutions):
    """ClearSolutions that releases `// BEGIN SOLUTION` regions with a C++ stub."""

    cpp_stub = Unicode(CPP_STUB, help="The C++ that replaces a // BEGIN SOLUTION ... // END SOLUTION region"
                       ).tag(config=True)

    def _replace_solution_region(self, cell, language):
        cpp_replaced = False
        if cell.cell_type == "code":
            cell.source, cpp_replaced = replace_cpp_regions(cell.source, self.cpp_stub, self.begin_solution_delimeter,
                                                            self.end_solution_delimeter)
        # Always run ClearSolutions' own pass: it handles the Python regions of the same cell.
        return super()._replace_solution_region(cell, language) or cpp_replaced
