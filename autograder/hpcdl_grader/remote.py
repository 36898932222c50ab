"""The checker's side of grading: a worker process that runs the learner's code, and proxies for
what that code defined.

The checker runs the test cells with these proxies in place of the learner's functions, kernels
and objects. Calling a proxy sends the arguments to the worker (worker.py) and returns what came
back, decoded without running any of the worker's code (wire.py). A crash or hang of the worker
fails the check that was waiting for it, and the next request starts a fresh worker.
"""
import os
import signal
import subprocess
import threading

from hpcdl import memory, processes
from hpcdl.check import CheckFailed
from hpcdl.device import DEVICE
from hpcdl.elsewhere import Elsewhere
from hpcdl.guard import OutOfBounds

from . import clock, wire

OUTPUT_LIMIT = 64 << 10  # bytes of the learner's printed output kept for the instructor
DRAIN_WAIT = 5.0  # seconds stop() and kill() wait for the last of a worker's output to be read
MAX_STARTS = 4


class WorkerFailed(CheckFailed):
    """The worker died, hung or broke the protocol while running the learner's code."""


class RemoteError(Exception):
    """An exception raised by the learner's code in the worker; subclasses carry its type's name."""


def _exception(reply: dict) -> Exception:
    """The worker's exception, made here from its type's name and message as the lab makes a child
    process's (processes.rebuild_exception): a builtin type stays itself (a TORCH_CHECK's RuntimeError
    from an isolated extension call is a RuntimeError in both), any other name becomes a subclass of
    RemoteError and processes.ChildError of that name. hpcdl's guard's OutOfBounds is the one exception."""
    name, message = str(reply.get("error", "Exception")), str(reply.get("message", ""))
    if name == "OutOfBounds":
        e = OutOfBounds(message)
        e.hint = reply.get("hint", "")
        return e
    return processes.rebuild_exception(name, message, bases=(RemoteError, processes.ChildError))


class WorkerProcess:
    """One worker process at a time; `command` starts it (inside the sandbox when grading)."""

    def __init__(self, command: list, env: dict | None = None, timeout: float = 600, on_start=None,
                 preexec_fn=None):
        self.command, self.env, self.timeout, self.on_start = command, env, timeout, on_start
        self.preexec_fn = preexec_fn
        self.proc = None
        self.output = bytearray()
        self.output_dropped = 0
        self.drains = []  # the threads reading workers' output, until stop() or kill() has waited for them
        self.events = []  # what went wrong with workers, for the instructor
        self.starts, self.broken = 0, None

    # -- process ------------------------------------------------------------------------------------
    def start(self):
        """Start a worker. One that could not get through its start (the answer cells hung or killed
        it) is not started again: every later request fails at once with the first failure."""
        if self.broken:
            raise WorkerFailed(self.broken)
        if self.starts >= MAX_STARTS:
            self.broken = f"the process running your code failed {self.starts} times; not started again"
            raise WorkerFailed(self.broken)
        self.starts += 1
        self.proc = processes.start(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=self.env, preexec_fn=self.preexec_fn)
        drain = threading.Thread(target=self._drain, args=(self.proc.stderr,), daemon=True)
        drain.start()
        self.drains.append(drain)
        if self.on_start:
            try:
                self.on_start(self)
            except WorkerFailed as e:
                self.broken = str(e)
                raise

    def _drain(self, stream):
        while chunk := stream.read(1 << 16):
            room = OUTPUT_LIMIT - len(self.output)
            self.output += chunk[:max(room, 0)]
            self.output_dropped += max(len(chunk) - max(room, 0), 0)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """Let the worker finish (kill it after 5 s); return once what it printed has been read."""
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
            self.proc = None
        self._join_drains()

    def kill(self):
        proc = self.proc  # the request timer's thread kills while the request may be dropping self.proc
        if proc is not None:
            if proc.poll() is None:  # not reaped yet: its pid is still its own, and its tree can be walked
                processes.kill_trees([proc.pid])
            else:
                processes.kill_group(proc.pid)
            proc.wait()
        self._join_drains()

    def _join_drains(self):
        """Wait (DRAIN_WAIT at most) until the output of every worker that has exited is read to its end:
        the process's exit does not mean its last bytes have left the pipe for self.output. A process the
        worker left behind may hold the pipe open past that; its output is then read as it comes."""
        waiting, self.drains = list(self.drains), []
        for drain in waiting:
            drain.join(DRAIN_WAIT)

    # -- requests -----------------------------------------------------------------------------------
    def encode(self, message: dict) -> bytes:
        """A request as request() sends it: encoded ahead, it costs nothing inside the clock."""
        return wire.encode(message, _handle_ref, side="checker")

    def request(self, message: dict | bytes, *, what: str, timeout: float | None = None) -> dict:
        """Send one request (or one made by encode) and wait for its reply; raise the learner's exception if it
        raised."""
        if not self.alive():
            self.start()
        timeout = timeout or self.timeout
        timed_out = threading.Event()

        def expire():
            timed_out.set()
            self.kill()

        timer = threading.Timer(timeout, expire)
        timer.start()
        try:
            self.proc.stdin.write(message if isinstance(message, bytes) else self.encode(message))
            self.proc.stdin.flush()
            reply = wire.receive(self.proc.stdout, DEVICE, handle_to=lambda ref: RemoteObject(self, ref),
                                 side="checker")
        except (EOFError, BrokenPipeError, OSError, wire.ProtocolError) as e:
            proc = self.proc
            code = proc.wait() if proc is not None else None
            self.proc = None
            if timed_out.is_set():
                problem = (f"{what} did not finish within {timeout:g} s (a hang, a deadlock or a very slow kernel?); "
                           f"its process was stopped")
            elif isinstance(e, wire.ProtocolError):
                self.kill()
                problem = f"{what}: the worker sent a malformed reply ({e})"
            else:
                problem = f"the process running your code {processes.exit_reason(code)} during {what}"
            self.events.append(problem)
            raise WorkerFailed(problem) from None
        finally:
            timer.cancel()
        if not reply.get("ok"):
            raise _exception(reply)
        return reply

    def processes(self) -> list:
        """The worker and every process it started (in the sandbox, orphans stay its descendants)."""
        if not self.alive():
            return []
        return [self.proc.pid, *sorted(processes.descendants([self.proc.pid]))]

    def pause(self) -> list:
        """Stop every process of the worker (so it cannot load the GPU while the checker measures)."""
        paused = self.processes()
        for pid in paused:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
        return paused

    def resume(self, paused: list) -> None:
        for pid in paused:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass

    def printed(self) -> str:
        text = self.output.decode(errors="replace")
        if self.output_dropped:
            text += f"\n[... {self.output_dropped} more bytes of output dropped]"
        return text


_measured = {}  # this cell's measurements: (worker, target, name, reference, workload) -> ((seconds, how), reference)


def forget_measurements() -> None:
    """A new cell begins: whatever it measures, it measures again."""
    _measured.clear()


def _identity(reference):
    """The reference itself where it can be a dict key (a function), else the object's id (a callable object
    whose class defines __eq__ without __hash__): a speed cell must not fail on its reference's class. The
    cache holds the reference too, so that its id cannot pass to another object while the entry lives."""
    try:
        hash(reference)
    except TypeError:
        return id(reference)
    return reference


class RemoteCallable(Elsewhere):
    """A function, class or callable object defined by the learner's code, living in the worker."""

    def __init__(self, worker: WorkerProcess, name: str | None = None, handle: int | None = None,
                 label: str | None = None, attr: str | None = None):
        self._worker, self._name, self._handle, self._attr = worker, name, handle, attr
        self.__name__ = label or name or "object"

    def _target(self) -> dict:
        t = {"name": self._name} if self._handle is None else {"handle": self._handle}
        return {**t, "attr": self._attr} if self._attr else t

    def __call__(self, *args, **kwargs):
        reply = self._worker.request({"op": "call", **self._target(), "args": list(args), "kwargs": kwargs},
                                     what=f"{self.__name__}()")
        return reply["result"]

    def invoke(self, args, kernels=(), *, skip=False):
        """check.invoke's steps, run in the worker: poisoned allocations, watched kernels."""
        names = [k.__name__ for k in kernels]
        reply = self._worker.request({"op": "call", **self._target(), "args": list(args), "checked": True,
                                      "kernels": names, "skip": skip}, what=f"{self.__name__}()")
        launches = reply.get("launches") if isinstance(reply.get("launches"), dict) else {}
        logs = {n: _launch_log(launches.get(n)) for n in names}
        modified = [int(i) for i in reply.get("modified") or [] if isinstance(i, int)]
        return reply["result"], logs, modified

    def alone_on_the_card(self):
        return clock.alone_on_the_card(self._worker)

    def seconds_per_call(self, make_args, reference, name: str) -> tuple:
        """clock.seconds_per_call, measured once for each workload of a cell: a speed cell that sets one
        measurement beside several yardsticks (03's softmax beside the copy speed, torch.softmax and the naive
        softmax) does not pay the card's time for it again. The answer is the same measurement, checked as it
        was. The next cell measures again (forget_measurements)."""
        key = (id(self._worker), repr(self._target()), name, _identity(reference), clock.workload(make_args()))
        if key in _measured:
            seconds, how = _measured[key][0]
            return seconds, f"{how}; the measurement above, compared again"
        answer = clock.seconds_per_call(self._worker, self._target(), make_args, reference, name)
        _measured[key] = answer, reference
        return answer

    def resident_bytes(self) -> int:
        """The worker's resident set and that of every process it started, read here from /proc: nothing the
        learner's code runs can lower it short of freeing the memory."""
        return sum(memory.status_bytes(pid) for pid in self._worker.processes())

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        reply = self._worker.request({"op": "get", **self._target(), "attr": attr},
                                     what=f"{self.__name__}.{attr}")
        return reply["result"]

    def __repr__(self):
        return f"<{self.__name__} in the grading worker>"


class RemoteObject(RemoteCallable):
    """An object the learner's code returned or defined that cannot travel as plain data."""

    def __init__(self, worker, ref):
        super().__init__(worker, handle=ref, label="object")


class RemoteKernel:
    """A Triton kernel in the worker: checks name it to have its launches watched there."""

    def __init__(self, name: str):
        self.__name__ = name

    def __repr__(self):
        return f"<Triton kernel {self.__name__} in the grading worker>"


def _launch_log(value) -> list:
    """A kernel's launches as the worker reported them ([dtype names] per launch); anything else is none."""
    if not isinstance(value, list):
        return []
    return [[d for d in launch if isinstance(d, str)] for launch in value if isinstance(launch, list)]


def _handle_ref(obj) -> int:
    """What a proxy becomes when it is sent back to the worker as an argument."""
    if isinstance(obj, RemoteCallable) and obj._handle is not None and not obj._attr:
        return obj._handle
    raise TypeError(f"{obj!r} cannot be sent to the worker")
