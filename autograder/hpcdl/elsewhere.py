"""Functions that live in another process.

At grading time the test cells do not call the learner's functions: they call stand-ins for the
functions in the grading worker (the hpcdl_grader package, which a learner never needs). A stand-in
is an `Elsewhere`: hpcdl.check asks it to run a check's steps where the function lives, and
hpcdl.speed asks it to time the function by the checker's clock, hpcdl.memory to read its process's
resident memory from outside. In the lab every function is a
plain Python function and this module is not used.
"""


class Elsewhere:
    """A function that runs in another process."""

    def invoke(self, args, kernels=(), *, skip=False):
        """hpcdl.check.invoke's steps, run where the function lives: (result, launches, modified),
        launches being {kernel: [the sorted dtypes of its tensor arguments, one list per launch]}."""
        raise NotImplementedError

    def alone_on_the_card(self):
        """A context in which nothing of the function's process runs on the card: for yardsticks."""
        raise NotImplementedError

    def seconds_per_call(self, make_args, reference, name: str) -> tuple:
        """(seconds per call, how they were measured): fresh inputs from make_args() per call, each output
        checked against reference(*args) when reference is given."""
        raise NotImplementedError

    def resident_bytes(self) -> int:
        """Resident bytes of the processes where the function lives, read from the kernel outside them."""
        raise NotImplementedError
