"""hpcdl-course: the instructor's commands (make notebooks / release / grade call these)."""
import argparse
import dataclasses
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile

from . import sandbox
from . import answers, class_run, grade, gradebook, notebooks, paths, prebuild, release, submissions, summary_plot
from . import distribute, shards, slurm
from . import scaffold


def cmd_build(args) -> int:
    stale = notebooks.build_all(check_only=args.check)
    for p in stale:
        print(f"{'stale' if args.check else 'wrote'}: {p.relative_to(paths.ROOT)}")
    return 1 if args.check and stale else 0


def cmd_release(args) -> int:
    for a in release.release(args.assignments or None):
        print(f"released course/{a}")
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def cmd_grade(args) -> int:
    wanted = [a for given in args.assignment or [] for a in given.split(",") if a]
    unknown = [a for a in wanted if a not in paths.assignments()]
    if unknown:
        print(f"error: no assignment {', '.join(unknown)} (known: {', '.join(paths.assignments())})", file=sys.stderr)
        return 2
    try:
        jobs = None if args.jobs in (None, "", "auto") else int(args.jobs)
        if jobs is not None and jobs < 1:
            raise ValueError
    except ValueError:
        print(f"error: --jobs must be a whole number of at least 1, or auto (got {args.jobs!r})", file=sys.stderr)
        return 2
    shard = None
    if args.shard:
        try:
            shard = shards.parse(args.shard)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if args.submissions is None:
            print("error: --shard grades a folder of submissions: name it", file=sys.stderr)
            return 2
    folder = args.submissions
    if folder is None:
        # The demo has a work folder and gradebook of its own, and starts from a fresh release.
        os.environ["HPCDL_WORK"] = str(paths.work() / "demo")
        if os.environ.pop("GRADEBOOK_URL", None):
            print("The demo grades into a gradebook of its own: GRADEBOOK_URL is not used")
        prebuild.make_removable()
        shutil.rmtree(paths.work(), ignore_errors=True)
        folder = paths.work() / "submissions"
        with tempfile.TemporaryDirectory(prefix="hpcdl-demo-release-") as released:
            for a in paths.assignments():
                release.generate(a, released)
            answers.write_demo(folder, released)
        print(f"No submissions folder given: grading the demo submissions in {folder}")
    # SIGTERM (a scheduler's end of a job) stops the run as Ctrl-C does: what is not finished is reported so.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        results = grade.grade_folder(folder, wanted or None, jobs=jobs, resume=args.resume, shard=shard)
    except class_run.Stopped:
        print(f"error: the run was stopped; what it did not finish is \"not graded\" in "
              f"{paths.work() / 'grades.csv'}: grade the folder again with RESUME=1 (--resume) to finish it",
              file=sys.stderr)
        return 130
    except grade.NothingToGrade as e:
        if e.results:
            print(grade.table(e.results))
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (submissions.BadSubmissionsFolder, grade.GradingSetupError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print()
    # The table's notes column also says which cells this machine could not grade (speed cells without a GPU).
    print(grade.table([dataclasses.replace(r, problems=r.problems + grade.notes(r)) for r in results]))
    if shard:  # one task of an array: the CSVs and the class summary are grade-collect's, once all have run
        print(f"\nshard {shard[0]}/{shard[1]} done; gradebook: {gradebook.shown_url()}; after the whole array: "
              f"make grade-collect")
        return 0
    summary = grade.cell_summary(results)
    if summary:
        print("\nEach graded cell in this run: how many submissions passed it (full points)\n" + summary)
        plotted = summary_plot.plot(grade.cell_counts(results), paths.work() / "class-summary.png")
        print(f"(as a plot: {plotted})")
    earlier = sum(r.earlier_run for r in results)
    if earlier:
        print(f"\n{earlier} submission(s) were graded by an earlier run and not again (RESUME=1)")
    changed = grade.changes(results)
    regraded = sum(r.earlier is not None for r in results)
    if regraded:
        print(f"\nRe-graded {regraded} submission(s) (earlier copies and their scores in {paths.work() / 'replaced'}); "
              f"{len(changed)} changed" + (":" if changed else ""))
        for line in changed:
            print(f"  {line}")
    work = paths.work()
    print(f"\ngradebook: {gradebook.shown_url()}\ngrades CSV: {work / 'grades.csv'}\n"
          f"grades per cell: {work / 'grades-by-cell.csv'}\nfeedback: {work / 'feedback'}")
    return 0


def cmd_grade_slurm(args) -> int:
    try:
        job = slurm.submit(args.submissions, args.shards, assignments=[a for given in args.assignment or []
                                                                         for a in given.split(",") if a],
                           partition=args.partition, gpus=args.gpus, time_limit=args.time, cpus=args.cpus,
                           jobs=args.jobs, resume=args.resume, extra=args.sbatch_arg or [])
    except (slurm.SlurmError, submissions.BadSubmissionsFolder, grade.GradingSetupError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except grade.NothingToGrade as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"submitted Slurm job array {job} ({args.shards} task(s), one shard each; logs in {slurm.folder()}); "
          f"when it has run: make grade-collect")
    print(job)
    return 0


def cmd_grade_collect(args) -> int:
    try:
        job = slurm.collect()
    except slurm.SlurmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    work = paths.work()
    if shutil.which("squeue"):
        queued = subprocess.run(["squeue", "-h", "-j", job["job"]], capture_output=True, text=True, timeout=60)
        if queued.returncode == 0 and queued.stdout.strip():
            print(f"warning: job {job['job']} is still in the queue (squeue): collect again once it has ended")
    for student, assignment in job["missed"]:
        print(f"not graded: {submissions.printable(student)} / {assignment} (no task of job {job['job']} "
              f"finished it: grade-slurm RESUME=1 grades only those)")
    print(f"job {job['job']}: {len(job['missed'])} submission(s) not graded\ngradebook: {gradebook.shown_url()}\n"
          f"grades CSV: {work / 'grades.csv'}\ngrades per cell: {work / 'grades-by-cell.csv'}\n"
          f"feedback: {work / 'feedback'}")
    return 1 if job["missed"] else 0


def cmd_distribute(args) -> int:
    try:
        written = distribute.build(args.target)
        done = distribute.commit(args.target) if args.git else None
    except distribute.DistributeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    target = pathlib.Path(args.target).resolve()
    print(f"wrote the learner distribution to {target} ({len(written)} files):")
    for p in written:
        print(f"  {p.as_posix()}")
    if done:
        print(done)
    return 0


def cmd_new(args) -> int:
    try:
        created = scaffold.create(args.name)
    except scaffold.ScaffoldError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    built = notebooks.target(created[0])
    built.write_text(notebooks.serialize(notebooks.build(created[0])))
    for p in [*created, built]:
        print(f"wrote: {p.relative_to(paths.SOLUTIONS.parent)}")
    print(f"Next: replace the placeholder exercise in {created[0].name} and its answers in answers.toml, "
          f"then `make notebooks`, `make release` and `make test`.")
    return 0


def cmd_check_sandbox(args) -> int:
    """Show what a submission's code can see while it is graded."""
    secrets = [paths.work(), paths.work() / "gradebook.db", paths.SOLUTIONS, paths.ROOT / "autograder" / "hpcdl_course",
               pathlib.Path.home()] + [pathlib.Path(p).resolve() for p in args.paths]
    try:
        print(f"sandbox: {sandbox.mode()}")
        seen = sandbox.probe(secrets)
    except sandbox.SandboxUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"runs as uid {seen['uid']}; network: {'REACHABLE' if seen['network'] else 'none'}; "
          f"GPU: {seen['gpu'] or 'none'}{' (computes)' if seen.get('gpu_works') else ''}; hpcdl from {seen['hpcdl']}; "
          f"a Triton kernel: {seen['triton']}")
    for path, visible in seen["can_read"].items():
        print(f"  {'VISIBLE' if visible else 'hidden '}  {path}")
    exposed = [p for p, v in seen["can_read"].items() if v] + (["the network"] if seen["network"] else [])
    return 1 if exposed or seen["triton"] != "works" else 0


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
    p.add_argument("--assignment", action="append", help="grade only this assignment (repeatable, or "
                                                         "comma-separated); default: those the folder holds")
    p.add_argument("--jobs", default="auto", help="submissions graded at once: a number, or auto (the default: one "
                                                  "per core; on a GPU machine one per GPU, never more)")
    p.add_argument("--resume", action="store_true", help="leave alone each submission an earlier run graded to its "
                                                         "end, as handed in now (same notebooks, same timestamp)")
    p.add_argument("--shard", help="K/N: grade only the students of the K-th of N shards (1 <= K <= N), into "
                                    "assignments released earlier; no CSV (a Slurm task of grade-slurm)")
    p.set_defaults(run=cmd_grade)
    p = sub.add_parser("grade-slurm", help="release, then submit a Slurm job array: each task grades one shard "
                                           "into the GRADEBOOK_URL server")
    p.add_argument("submissions", help="SUBMISSIONS/<student>/<assignment>/<notebook>.ipynb, on a shared filesystem")
    p.add_argument("--shards", type=int, required=True, help="tasks in the array, one shard of the students each")
    p.add_argument("--assignment", action="append", help="grade only this assignment (as for grade)")
    p.add_argument("--partition", default="", help="Slurm partition (default: the cluster's default)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs per task, --gres=gpu:N (0: none)")
    p.add_argument("--time", default="04:00:00", help="time limit per task (sbatch --time)")
    p.add_argument("--cpus", type=int, default=4, help="CPUs per task (sbatch --cpus-per-task)")
    p.add_argument("--jobs", default="auto", help="submissions graded at once in a task (auto: one per GPU)")
    p.add_argument("--resume", action="store_true", help="as for grade: not again what was graded to its end")
    p.add_argument("--sbatch-arg", action="append", help="one more sbatch option, e.g. --account=course")
    p.set_defaults(run=cmd_grade_slurm)
    p = sub.add_parser("grade-collect", help="after grade-slurm's array: grades.csv and grades-by-cell.csv from the "
                                             "gradebook, and what no task graded")
    p.set_defaults(run=cmd_grade_collect)
    p = sub.add_parser("distribute", help="write the learner distribution: course/, hpcdl, env/, binder/, "
                                          "no solutions")
    p.add_argument("target", nargs="?", default=distribute.DEFAULT_TARGET,
                   help="an empty or new folder, or an earlier distribution (default: dist/learner)")
    p.add_argument("--git", action="store_true", help="commit it in its own git repository (made if missing)")
    p.set_defaults(run=cmd_distribute)
    p = sub.add_parser("check-sandbox", help="show what a submission's code can see while it is graded")
    p.add_argument("paths", nargs="*", help="more paths that must stay hidden (e.g. the submissions folder)")
    p.set_defaults(run=cmd_check_sandbox)
    p = sub.add_parser("new", help="start a new assignment in solutions/NAME/ from the standard arc")
    p.add_argument("name", help="two digits, an underscore and a lower-case name, e.g. 05_int4_packing")
    p.set_defaults(run=cmd_new)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except release.ReleaseFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
