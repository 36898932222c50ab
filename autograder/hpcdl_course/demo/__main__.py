"""make demo: the capstone pipeline (train, compress, infer) from the solutions; see hpcdl_course/demo/__init__.py."""
import argparse
import pathlib
import sys
import time

from .. import paths
from . import config as config_, pipeline, report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcdl_course.demo", description=__doc__)
    parser.add_argument("--setting", choices=sorted(config_.PRESETS), default="full",
                        help="full: make demo's model (a few minutes on 2 cores); small: the test suite's")
    parser.add_argument("--out", type=pathlib.Path, default=paths.work() / "demo-pipeline",
                        help="where the plots, the summary and the two model files go (default: "
                             "autograder/work/demo-pipeline, or under HPCDL_WORK)")
    parser.add_argument("--steps", type=int, help="at most this many training steps (default: the setting's)")
    parser.add_argument("--train-seconds", type=float,
                        help="training stops after this many seconds (default: the setting's, 150 in full)")
    parser.add_argument("--kernels", choices=["auto", "on", "off"], default="auto",
                        help="the notebooks' Triton kernels: auto = on a GPU only; on = also in the CPU interpreter "
                             "(slow: tiny settings only)")
    args = parser.parse_args(argv)
    config = config_.preset(args.setting, steps=args.steps, train_seconds=args.train_seconds)
    started = time.perf_counter()
    summary = pipeline.run(config, args.out, {"auto": None, "on": True, "off": False}[args.kernels], args.setting)
    print()
    print(report.table(summary))
    print(f"\n{time.perf_counter() - started:.0f} s; wrote {args.out}/loss_curve.png, summary.txt, summary.json")
    return 0 if summary["passed"] else 1


sys.exit(main())
