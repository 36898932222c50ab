"""hpcdl-course: the instructor's commands (make notebooks / release / grade call these)."""
import argparse
import shutil
import sys

from . import answers, grade, notebooks, paths, release, submissions


def cmd_build(args) -> int:
    stale = notebooks.build_all(check_only=args.check)
    for p in stale:
        print(f"{'stale' if args.check else 'wrote'}: {p.relative_to(paths.ROOT)}")
    return 1 if args.check and stale else 0


def cmd_release(args) -> int:
    for a in release.release(args.assignments or None):
        print(f"released course/{a}")
    return 0


def cmd_grade(args) -> int:
    folder = args.submissions
    if folder is None:
        folder = paths.work() / "demo-submissions"
        shutil.rmtree(folder, ignore_errors=True)
        answers.write_demo(folder)
        print(f"No submissions folder given: grading the demo submissions in {folder}")
    try:
        results = grade.grade_folder(folder, args.assignment or None)
    except (submissions.BadSubmissionsFolder, grade.GradingSetupError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print()
    print(grade.table(results))
    work = paths.work()
    print(f"\ngradebook: {work / 'gradebook.db'}\ngrades CSV: {work / 'grades.csv'}\nfeedback: {work / 'feedback'}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="hpcdl-course", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="write solutions/*/*.ipynb from their .nb.py text")
    p.add_argument("--check", action="store_true", help="only list notebooks that are out of date; exit 1 if any")
    p.set_defaults(run=cmd_build)
    p = sub.add_parser("release", help="regenerate course/ from solutions/ with nbgrader")
    p.add_argument("assignments", nargs="*")
    p.set_defaults(run=cmd_release)
    p = sub.add_parser("grade", help="autograde a folder of submissions into the gradebook")
    p.add_argument("submissions", nargs="?", help="SUBMISSIONS/<student>/<assignment>/<notebook>.ipynb; "
                                                  "default: the demo submissions")
    p.add_argument("--assignment", action="append", help="grade only this assignment (repeatable)")
    p.set_defaults(run=cmd_grade)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except release.ReleaseFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
