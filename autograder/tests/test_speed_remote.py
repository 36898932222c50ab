"""The checker's timing of a worker's function (hpcdl.speed at grading time), run on this machine's device:
the clock stops only when an element of every timed output has arrived, those elements are checked against
the reference, and what a batch costs beyond its calls is measured on a twin worker that runs no learner code."""
import pytest
import torch

from hpcdl import check
from hpcdl_grader import clock, remote

import workers

CELLS = '''
import torch

def add(x, y):
    return x + y

_first = {}

def memoised(x, y):
    return _first.setdefault(tuple(x.shape), x + y)

def transposed(x, y):
    return (x + y).t()

class Adder:
    def forward(self, x, y):
        return x + y

class Lazy(torch.Tensor):
    """Looks like the output; an element read before the rest would be all a lazy answer computes."""

def lazy(x, y):
    return (x + y).as_subclass(Lazy)

def tail_undone(x, y):
    """Right but for the last 1% of its elements (which stay zero): the first element is right."""
    out = x + y
    out.view(-1)[-(out.numel() // 100):] = 0
    return out

def zeros_like_softmax(x):
    """Each element of a softmax of 16 x 8192 float16 lies within float16's atol of zero, but no row sums to 1."""
    return torch.zeros_like(x)

def reshaped(x, y):
    return (x + y).reshape(-1)

from torch.overrides import TorchFunctionMode

SEEN = []

class Watcher(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        SEEN.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))

def start_watching():
    Watcher().__enter__()

def seen():
    return list(SEEN)

def forget():
    SEEN.clear()

def big_tensors():
    import gc
    return sum(1 for o in gc.get_objects() if type(o) is torch.Tensor and o.numel() >= 1 << 18)
'''


@pytest.fixture(scope="module")
def worker():
    w = workers.started(CELLS)
    yield w
    w.stop()


def inputs(shape=(37, 53)):
    g = check.generator(check.new_seed())
    return check.random_tensor(shape, generator=g), check.random_tensor(shape, generator=g)


def test_the_empty_batch_is_timed_on_one_twin_worker_without_learner_code(worker):
    clock._twins.clear()
    empty = clock.empty_batches(worker, inputs, 3)
    first, second = next(empty), next(empty)
    empty.close()
    assert 0 < first < 10 and 0 < second < 10 and len(clock._twins) == 1
    twin = clock.twin_worker(worker)
    assert twin is not worker
    with pytest.raises(KeyError, match="add"):  # the learner's cells never ran there
        twin.request({"op": "call", "name": "add", "args": list(inputs())}, what="add on the twin")
    next(clock.empty_batches(worker, inputs, 3))
    assert len(clock._twins) == 1  # started once


def test_a_twin_that_died_starts_again_with_its_functions(worker):
    twin = clock.twin_worker(worker)
    twin.kill()
    assert not twin.alive()
    empty = clock.empty_batches(worker, inputs, 3)
    assert 0 < next(empty) < 10 and twin.alive()
    empty.close()


def test_an_honest_function_is_timed_and_its_elements_check_out(worker):
    seconds, how = clock.seconds_per_call(worker, {"name": "add"}, inputs, torch.add, "add")
    assert seconds > 0 and "calls a batch" in how


def test_elements_are_read_in_row_major_order_of_any_layout(worker):
    sets = [inputs((5, 7)) for _ in range(3)]
    picked = worker.request({"op": "run_timed", "name": "transposed", "sets": sets, "positions": [0, 1, 36]},
                            what="batch")["picked"]
    expected = [(x + y).t().reshape(-1)[p] for (x, y), p in zip(sets, [0, 1, 1])]
    assert torch.equal(picked, torch.stack(expected).cpu())


def test_methods_of_objects_in_the_worker_are_timed_too(worker):
    adder = remote.RemoteCallable(worker, "Adder")()  # an object that cannot travel comes back as a handle
    method = remote.RemoteCallable(worker, handle=adder._handle, attr="forward", label="Adder().forward")
    assert clock.batch_elapsed(worker, method._target(), inputs, torch.add, "Adder().forward", 3)[0] > 0


def test_a_result_reused_across_timed_calls_fails(worker):
    with pytest.raises(check.CheckFailed, match="wrong on the timed calls"):
        clock.batch_elapsed(worker, {"name": "memoised"}, inputs, torch.add, "memoised", 3)


def test_every_output_is_checked_at_positions_drawn_after_the_batch(worker, monkeypatch):
    """The element the worker picks inside the clock (here the first, which is right) proves the work was done
    in time; positions drawn once the reply has come find the 1% of every output that was not."""
    monkeypatch.setattr(clock.random, "randrange", lambda *a: 0)
    with pytest.raises(check.CheckFailed, match="tail_undone is wrong on timed call 1 of a batch .checked at "
                                                "positions drawn after the timing.: [0-9]+ of 4096 elements"):
        clock.batch_elapsed(worker, {"name": "tail_undone"}, lambda: inputs((256, 512)), torch.add, "tail_undone", 3)
    with pytest.raises(check.CheckFailed, match="returned torch.float32 .131072,., expected torch.float32 .256, 512."):
        clock.batch_elapsed(worker, {"name": "reshaped"}, lambda: inputs((256, 512)), torch.add, "reshaped", 3)


def test_rows_are_checked_whole_where_each_element_is_within_tolerance(worker):
    def logits():
        return (check.random_tensor((16, 8192), torch.float16, generator=check.generator(check.new_seed())),)

    def softmax(x):
        return torch.softmax(x.float(), -1).to(torch.float16)

    with pytest.raises(check.CheckFailed, match="in 16 whole rows checked: 16 of 16 rows are wrong as a whole"):
        clock.batch_elapsed(worker, {"name": "zeros_like_softmax"}, logits, softmax, "zeros_like_softmax", 3)
    assert clock.batch_elapsed(worker, {"name": "add"}, lambda: inputs((16, 8192)), torch.add, "add", 3)[0] > 0


def test_a_reply_to_the_sampling_that_does_not_fit_fails_the_batch():
    expected = [((2, 3), torch.float32, torch.zeros(4), 0)]
    for reply in [{}, {"values": None, "shapes": [], "dtypes": []},
                  {"values": [torch.zeros(4)], "shapes": [[2, 3]], "dtypes": ["torch.float32"], "extra": 1}
                  | {"values": [torch.zeros(4), torch.zeros(4)]},
                  {"values": ["x"], "shapes": [[2, 3]], "dtypes": ["torch.float32"]},
                  {"values": [torch.zeros(5)], "shapes": [[2, 3]], "dtypes": ["torch.float32"]},
                  {"values": [torch.zeros(4)], "shapes": [[3, 2]], "dtypes": ["torch.float32"]},
                  {"values": [torch.zeros(4)], "shapes": [[2, 3]], "dtypes": ["torch.float16"]},
                  {"values": [torch.ones(4)], "shapes": [[2, 3]], "dtypes": ["torch.float32"]}]:
        assert clock._sample_problem(reply, expected, "f"), reply
    assert clock._sample_problem({"values": [torch.zeros(4)], "shapes": [[2, 3]], "dtypes": ["torch.float32"]},
                                 expected, "f") is None


def test_a_tensor_subclass_is_refused_as_a_timed_output(worker):
    with pytest.raises(TypeError, match="not a plain torch.Tensor"):
        clock.batch_elapsed(worker, {"name": "lazy"}, lambda: inputs((1 << 10,)), torch.add, "lazy", 3)


def test_no_learner_mode_sees_a_timed_batch_drawn(worker):
    remote.RemoteCallable(worker, "start_watching")()
    remote.RemoteCallable(worker, "forget")()
    big = [inputs((1 << 18,)) for _ in range(3)]  # past wire.RECIPE_MIN_BYTES: the worker redraws them itself
    worker.request({"op": "run_timed", "name": "add", "sets": big, "positions": [0, 1, 2]}, what="batch")
    seen = remote.RemoteCallable(worker, "seen")()
    assert seen and not {"uniform_", "rand", "empty", "empty_like"} & set(seen), seen


def test_a_timed_batch_exists_in_the_worker_only_once_the_clock_runs(worker):
    """Inputs arrive with the timed request itself: after the card is woken, before the clock starts, the
    worker holds no input of a batch for a thread of the learner's to start on."""
    big = [inputs((1 << 18,)) for _ in range(3)]
    worker.request({"op": "run_timed", "name": "add", "sets": big, "positions": [0, 1, 2]}, what="batch")
    assert remote.RemoteCallable(worker, "big_tensors")() >= 6
    worker.request({"op": "wake", "wake_s": 0}, what="wake")
    assert remote.RemoteCallable(worker, "big_tensors")() == 0


@pytest.mark.parametrize("twin_ms, pairs", [(1.0, 5), (30.0, clock.NOISY_REPEATS)])
def test_pairs_go_on_where_drawing_the_inputs_costs_more_than_the_work(monkeypatch, twin_ms, pairs):
    """Learner's batches of 10 ms more than the twin's: 5 pairs where the twin's take 1 ms, 15 where they take 30."""
    learner = iter([0.03, 0.03] + [twin_ms / 1e3 + 0.01] * 20)

    def twins(worker, make_args, calls):
        while True:
            yield twin_ms / 1e3

    monkeypatch.setattr(clock, "batch_elapsed", lambda *args: (next(learner), 1 << 20))
    monkeypatch.setattr(clock, "empty_batches", twins)
    seconds, how = clock.seconds_per_call(None, {"name": "f"}, None, None, "f")
    assert seconds == pytest.approx(0.01 / clock.calls_per_batch(0.03 / clock.BATCH_CALLS, 1 << 20))
    assert f"the median of {pairs} pairs" in how


def test_one_measurement_serves_every_yardstick_of_a_workload(monkeypatch):
    """A speed cell that compares one function with several yardsticks measures it once per workload: the same
    name, reference and inputs (shapes, dtypes, how they are drawn; not their seeds) reuse it, anything else
    is measured again, and so is everything once the next cell begins."""
    measured = []
    remote.forget_measurements()

    def fake_clock(worker, target, make_args, reference, name):
        measured.append(name)
        return 1e-3 * len(measured), "checker's clock"

    monkeypatch.setattr(clock, "seconds_per_call", fake_clock)
    fn = remote.RemoteCallable(None, "softmax")

    def draws(rows, low=-1.0):
        return lambda: (check.random_tensor((rows, 8), generator=check.generator(check.new_seed()), low=low),)

    name = "softmax at 4 x 8"
    first = fn.seconds_per_call(draws(4), torch.softmax, name)
    again = fn.seconds_per_call(draws(4), torch.softmax, name)
    assert again[0] == first[0] and "the measurement above" in again[1] and len(measured) == 1
    for other in [(draws(5), torch.softmax, name), (draws(4, low=-20.0), torch.softmax, name),
                  (draws(4), torch.log_softmax, name), (draws(4), torch.softmax, "softmax, another workload")]:
        fn.seconds_per_call(*other)
    assert len(measured) == 5
    remote.forget_measurements()
    assert "the measurement above" not in fn.seconds_per_call(draws(4), torch.softmax, name)[1]
    assert len(measured) == 6

    class Unhashable:  # a reference object whose class compares by value
        __hash__ = None

        def __call__(self, x):
            return torch.softmax(x, -1)

    reference = Unhashable()
    fn.seconds_per_call(draws(4), reference, name)
    assert "the measurement above" in fn.seconds_per_call(draws(4), reference, name)[1]
    assert len(measured) == 7
