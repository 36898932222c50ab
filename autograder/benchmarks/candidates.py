"""Candidates of a sweep (label -> (function, whether its result is checked)), sorted into those that run."""
from hpcdl import check


def runnable(found: dict, args: tuple, expected) -> tuple:
    """(the candidates that compile, run and, where checked, give `expected` for `args`, one call each;
    {label: why not} for the others)."""
    kept, failed = {}, {}
    for label, (fn, checked) in found.items():
        try:
            problem = check.compare(fn(*args), expected) if checked else None
        except Exception as error:  # a configuration that does not fit or compile: said, then left out
            problem = f"{type(error).__name__}: {str(error)[:300]}"
        if problem is None:
            kept[label] = (fn, checked)
        else:
            failed[label] = problem
    return kept, failed
