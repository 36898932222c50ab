"""One submission's autograde and feedback in one process: nbgrader's own command-line applications, one
after the other. A second `python -m nbgrader` would import Python, nbgrader and nbconvert again: about
3 s of a core per submission.

    python -m hpcdl_course.nbgrader_steps ASSIGNMENT STUDENT [--not-graded-here]

run from autograder/ (nbgrader_config.py) by grade.autograde, through nbgrader_run.nbgrader. Exit status:
0, or nbgrader_run's AUTOGRADE_FAILED and FEEDBACK_FAILED or-ed; the feedback step's log follows
FEEDBACK_MARK on stderr.
--not-graded-here: the speed cells' failures become "not graded here" before the feedback is written.
"""
import sys
import traceback

from jupyter_core.application import NoStart
from nbgrader.apps import AutogradeApp, GenerateFeedbackApp
from nbgrader.apps.nbgraderapp import NbGraderApp

from .nbgrader_run import AUTOGRADE_FAILED, FEEDBACK_FAILED, FEEDBACK_MARK


def nbgrader_step(*argv: str) -> bool:
    """`nbgrader ARGV` in this process, as its command line runs it; whether it succeeded."""
    for app in (NbGraderApp, AutogradeApp, GenerateFeedbackApp):  # singletons: a step must not reuse the last
        app.clear_instance()
    try:
        app = NbGraderApp.instance()
        app.initialize(list(argv))
        app.start()
    except NoStart:  # how a Jupyter application says that its subcommand ran (launch_instance catches it too)
        return True
    except SystemExit as e:
        return e.code in (None, 0)
    except Exception:  # noqa: BLE001  (said on stderr, where grade.autograde reads it)
        traceback.print_exc()
        return False
    return True


def main(argv=None) -> int:
    from . import grade, paths

    assignment, student, *options = sys.argv[1:] if argv is None else argv
    status = 0
    if not nbgrader_step("autograde", assignment, "--student", student, "--force"):
        status |= AUTOGRADE_FAILED
    autograded = paths.work() / "autograded" / student / assignment
    if autograded.exists():
        if "--not-graded-here" in options:
            grade.mark_not_graded_here(autograded)
        print(FEEDBACK_MARK, file=sys.stderr, flush=True)
        if not nbgrader_step("generate_feedback", assignment, "--student", student, "--force"):
            status |= FEEDBACK_FAILED
    return status


if __name__ == "__main__":
    sys.exit(main())
