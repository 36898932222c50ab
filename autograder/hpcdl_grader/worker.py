"""The grading worker: runs a learner's answer cells in a sandbox and answers the checker's requests.

At grading time (`make grade`) the answer cells never run beside the tests. This process runs
them, alone, and the trusted checker process calls what they defined over a pipe (wire.py):
it sends inputs, gets outputs back, and judges them itself. Nothing here decides a grade; code
in this process may be hostile, so the checker trusts only what it can verify.

Run as `python -m hpcdl_grader.worker`: requests arrive on stdin and replies leave on stdout; the
learner's own prints go to stderr, which the checker keeps (up to a limit) for the instructor.
"""
import contextlib
import os
import sys
import traceback


def _protocol_streams():
    """Keep the pipe to the checker for ourselves; the learner's prints go to stderr."""
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    replies = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return requests, replies


def run_source(source: str, filename: str, namespace: dict):
    """exec source as if it came from a file named filename. Triton's JIT (outside its CPU interpreter)
    reads a kernel's source with inspect.getsource, which finds it only through linecache, as it
    does for IPython's cells."""
    import linecache

    # mtime None: linecache.checkcache keeps the entry although no such file exists.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), namespace)


def _plain_output(out):
    """out, if it is a plain tensor with elements; else TypeError."""
    import torch

    if type(out) is not torch.Tensor or out.numel() == 0:
        # A subclass could compute only the elements that are read and defer the rest past the clock.
        raise TypeError(f"a timed call returned {type(out).__name__}, not a plain torch.Tensor with elements")
    return out


def _element(out, position: int):
    """out's element number position (modulo its size) in row-major order, as a 0-d tensor."""
    index, position = [], position % _plain_output(out).numel()
    for size in reversed(out.shape):
        position, at = divmod(position, size)
        index.append(at)
    return out[tuple(reversed(index))]


@contextlib.contextmanager
def first_configuration_only():
    """Within it, a Triton autotuner runs its first configuration that compiles on this card, without timing
    the others. A correctness check needs a right result, not the fastest configuration, and tuning again at
    every new shape of a check (each one compiling and timing every configuration) cost most of a GPU grading's
    seconds. Timed batches (run_timed) tune as usual; every configuration must give the right result, and the
    clock checks the outputs of the one it picks."""
    from triton.runtime import autotuner, errors

    tuned_run = autotuner.Autotuner.run
    unfit = tuple(getattr(errors, n) for n in ("OutOfResources", "PTXASError") if hasattr(errors, n))

    def run(tuner, *args, **kwargs):
        configs = tuner.configs
        try:
            for i, config in enumerate(configs):
                tuner.configs = [config]
                try:
                    return tuned_run(tuner, *args, **kwargs)
                except unfit:  # too large for this card: the tuner would have skipped it too
                    if i == len(configs) - 1:
                        raise
        finally:
            tuner.configs = configs

    autotuner.Autotuner.run = run
    try:
        yield
    finally:
        autotuner.Autotuner.run = tuned_run


class Worker:
    def __init__(self):
        import torch

        from hpcdl import check, device, launches, speed

        from . import wire

        self.torch, self.check, self.launches, self.speed, self.wire = torch, check, launches, speed, wire
        self.device = device.DEVICE
        self.namespace = {"__name__": "__main__"}
        self.objects = {}  # ref -> object kept here for the checker
        self.sets, self.outputs = [], []

    # -- values that travel -------------------------------------------------------------------------
    def handle_of(self, obj) -> int:
        ref = id(obj)
        self.objects[ref] = obj
        return ref

    def handle_to(self, ref: int):
        if ref not in self.objects:
            raise KeyError(f"no object {ref} in the worker")
        return self.objects[ref]

    def target(self, request):
        """The object a request names: a global of the notebook or a handle."""
        if "handle" in request:
            return self.handle_to(request["handle"])
        return self.namespace[request["name"]]

    def describe(self, obj):
        """How the checker should see an answer name."""
        if hasattr(obj, "run") and hasattr(obj, "arg_names"):
            return {"kind": "kernel"}
        if isinstance(obj, type(sys)):
            return {"kind": "module"}
        if callable(obj):
            return {"kind": "callable"}
        try:
            self.wire.encode({"v": obj}, side="worker")
            return {"kind": "value", "value": obj}
        except TypeError:
            return {"kind": "object", "value": self.wire.Handle(self.handle_of(obj))}

    # -- requests -----------------------------------------------------------------------------------
    def run_cells(self, cells):
        """Run the notebook's code cells in order; report what each answer cell defined."""
        errors, names = {}, {}
        for cell in cells:
            before = dict(self.namespace)
            try:
                run_source(cell["source"], f"<cell {cell['id']}>", self.namespace)
            except BaseException as e:  # a learner's cell may raise anything, SystemExit included
                if isinstance(e, KeyboardInterrupt):
                    raise
                errors[cell["id"]] = f"{type(e).__name__}: {str(e)[:300]}"
            if cell["answer"]:
                for name, obj in self.namespace.items():
                    if not name.startswith("__") and (name not in before or before[name] is not obj):
                        names[name] = cell["id"]
        return {"errors": errors,
                "names": {n: {**self.describe(self.namespace[n]), "cell": c} for n, c in names.items()
                          if n in self.namespace}}

    def kernels_named(self, names):
        found = []
        for n in names:
            k = self.namespace.get(n)
            if not (hasattr(k, "run") and hasattr(k, "arg_names")):
                raise LookupError(f"{n} is not a Triton kernel here")
            found.append(k)
        return found

    def callee(self, request):
        """The function a call names: a global or a handle, or a method of one (`attr`)."""
        fn = self.target(request)
        return getattr(fn, request["attr"]) if request.get("attr") else fn

    def call(self, request):
        """A call of the checks (not timed): autotuners run one configuration (first_configuration_only)."""
        fn = self.callee(request)
        args, kwargs = request.get("args", ()), request.get("kwargs", {})
        with first_configuration_only():
            if not request.get("checked"):
                return {"result": fn(*args, **kwargs)}
            result, launches, modified = self.check.invoke(
                (lambda *a: fn(*a, **kwargs)), args, self.kernels_named(request.get("kernels", [])),
                skip=request.get("skip", False))
        return {"result": result, "launches": launches, "modified": modified}

    def get(self, request):
        return {"result": getattr(self.target(request), request["attr"])}

    def wake(self, request):
        """Drop the last batch and wake the card, just before the checker starts its clock."""
        self.sets, self.outputs = [], []
        self.speed.wake_the_card(float(request.get("wake_s", 0)))
        self.synchronize()
        return {}

    def run_timed(self, request):
        """Call the function once per argument set of the request, whose inputs were drawn as the request was
        decoded, after the checker's clock started: no code of the learner's has seen them before. Reply with
        one element of each output, at the positions the checker drew: reading them waits for the work (the
        checker checks them later)."""
        fn = self.callee(request)
        self.sets = list(request["sets"])
        self.outputs = [fn(*args) for args in self.sets]
        picked = [_element(self.outputs[i], position) for i, position in enumerate(request.get("positions", []))]
        self.synchronize()
        return {"picked": self.torch.stack(picked).cpu() if picked else None}

    def sample(self, request):
        """Each output of the last timed batch at the flat row-major positions the checker drew after the batch
        (modulo its size), with its shape and dtype."""
        positions = list(request["positions"])
        if len(positions) != len(self.outputs):
            raise ValueError(f"{len(positions)} lists of positions for {len(self.outputs)} outputs")
        values, shapes, dtypes = [], [], []
        for out, at in zip(self.outputs, positions):
            flat = _plain_output(out).reshape(-1)
            values.append(flat[at.to(flat.device) % flat.numel()])
            shapes.append(list(out.shape))
            dtypes.append(str(out.dtype))
        return {"values": values, "shapes": shapes, "dtypes": dtypes}

    def synchronize(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def quiet(self):
        """A context in which none of the learner's code runs as a side effect of the worker's own torch calls:
        no torch function or dispatch mode, no tensor subclass's __torch_function__, no profile or trace hook.
        Every request is decoded in it, so no learner code runs while a timed batch's inputs are drawn."""
        import contextlib

        from torch.utils._python_dispatch import _disable_current_modes

        stack = contextlib.ExitStack()
        stack.enter_context(self.torch._C.DisableTorchFunction())
        stack.enter_context(_disable_current_modes())
        sys.setprofile(None)
        sys.settrace(None)
        return stack

    def serve(self, requests, replies):
        ops = {"run_cells": lambda r: self.run_cells(r["cells"]), "call": self.call, "get": self.get,
               "wake": self.wake, "run_timed": self.run_timed, "sample": self.sample}
        while True:
            try:
                with self.quiet():
                    request = self.wire.receive(requests, self.device, self.handle_to, side="worker")
            except EOFError:
                return
            if request.get("op") == "exit":
                return
            try:
                reply = {"ok": True, **ops[request["op"]](request)}
            except BaseException as e:
                if isinstance(e, KeyboardInterrupt):
                    raise
                reply = {"ok": False, "error": type(e).__name__, "message": str(e)[:2000],
                         "hint": str(getattr(e, "hint", "") or "")[:500],
                         "where": "".join(traceback.format_exception_only(type(e), e))[-500:]}
            try:
                self.wire.send(replies, reply, self.handle_of, side="worker")
            except TypeError as e:
                self.wire.send(replies, {"ok": False, "error": "TypeError", "message": str(e)}, side="worker")


def main():
    requests, replies = _protocol_streams()
    Worker().serve(requests, replies)
    sys.stdout.flush()
    os._exit(0)  # do not wait for threads a learner's code may have left running


if __name__ == "__main__":
    main()
