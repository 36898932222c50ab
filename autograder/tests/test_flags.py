"""The instructor's review flags, without grading: the GPU-only cheats are flagged where they tamper
(test_cheats grades them on a GPU run only), and no reference answer is flagged."""
import pathlib
import tomllib

import pytest

from hpcdl_course import answers, flags, paths

CHEATS = tomllib.loads((pathlib.Path(__file__).parent / "cheats.toml").read_text())["cheat"]
GPU_CHEATS = [c for c in CHEATS if c.get("gpu")]


@pytest.mark.parametrize("cheat", GPU_CHEATS, ids=lambda c: c["name"])
def test_gpu_cheat_is_flagged_where_it_tampers(cheat):
    found = [why for cell_id, source in cheat["cells"].items() for why in flags.review(cell_id, source, set())]
    assert bool(found) == bool(cheat.get("flagged")), found


@pytest.mark.parametrize("assignment", paths.assignments())
def test_reference_answers_are_not_flagged(assignment):
    found = [why for cell_id, source in answers.solution_sources(assignment).items()
             for why in flags.review(cell_id, source, set())]
    assert not found


def test_reaching_for_the_graders_machinery_is_flagged():
    for source in ("import hpcdl_grader.worker", "from hpcdl_grader import remote",
                   "from hpcdl_grader.wire import Encoder", "from hpcdl import elsewhere", "w = hpcdl.isolation.Server", "g = (lambda: (yield))()\ncaller = g.gi_frame.f_back"):
        assert flags.review("answer", source, set()), source
    assert not flags.review("answer", "import hpcdl\nx = hpcdl.check.random_tensor((3,), None)", set())


def test_code_in_a_file_string_is_reviewed():
    rank_file = 'RING_PY = """\nimport os\nimport sys\n\ndef ring(comm, x):\n    return sys._getframe(1)\n"""'
    found = flags.review("ring", rank_file, set())
    assert len(found) == 2 and all("file RING_PY" in why for why in found), found
    assert not flags.review("ring", 'RING_PY = """\nimport numpy as np\n"""\nAXPY_CPP = "int main() { return 0; }"', set())
