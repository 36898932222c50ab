"""Deterministic shards of a submissions folder: which students the k-th of n Slurm tasks grades.

Students, in name order, are dealt round-robin to shards 1..n, so every task that scans the same folder
computes the same split, each student is in exactly one shard, and shard sizes differ by one at most. A
student's submissions stay together: one task grades all of them.
"""


def parse(text: str) -> tuple:
    """'K/N' -> (k, n) with 1 <= k <= n; ValueError with what is wrong otherwise."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes K/N, two whole numbers (got {text!r})") from None
    if not 1 <= k <= n:
        raise ValueError(f"--shard K/N needs 1 <= K <= N (got {text!r})")
    return k, n


def of(found: list, k: int, n: int) -> list:
    """The submissions (submissions.Submission) of the students in shard k of n."""
    students = sorted({sub.student for sub in found})
    mine = set(students[k - 1::n])
    return [sub for sub in found if sub.student in mine]
