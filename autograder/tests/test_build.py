"""hpcdl.build: C++ extensions and MPI programs built in a child process, cached by source.

One extension is built for the whole module (a build takes ~30 s here): a right and a wrong add, a
function that segfaults, one that says which process it runs in, one that throws what C++ code throws (TORCH_CHECK and its kinds, standard
exceptions), and one released as the C++ stub learners get. Broken sources are chosen
to fail fast (a missing header stops the compiler at once).
"""
import os
import shutil
import sys
import time
import uuid

import pytest
import torch

import capabilities
from leftovers import no_leftovers, pids_holding  # noqa: F401  (no_leftovers: a fixture)
from hpcdl import build, check, isolation
from hpcdl.build import BuildFailed, CompileError
from hpcdl.isolation import IsolatedFailure

TOY_CPP = r'''
#include <unistd.h>

torch::Tensor add_upto(torch::Tensor a, torch::Tensor b, int64_t stop_early) {
    TORCH_CHECK(a.sizes() == b.sizes() && a.dtype() == torch::kFloat32 && b.dtype() == torch::kFloat32,
                "a and b must be float32 tensors of the same shape");
    auto x = a.contiguous().cpu(), y = b.contiguous().cpu();
    auto out = torch::zeros_like(x);
    const float* px = x.data_ptr<float>();
    const float* py = y.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < out.numel() - stop_early; ++i) po[i] = px[i] + py[i];
    return out.to(a.device());
}

torch::Tensor add(torch::Tensor a, torch::Tensor b) { return add_upto(a, b, 0); }

torch::Tensor add_wrong(torch::Tensor a, torch::Tensor b) { return add_upto(a, b, 1); }  // misses the last

void crash() { *reinterpret_cast<volatile int*>(8) = 1; }

int64_t pid() { return getpid(); }

struct ShapeError : std::exception {
    const char* what() const noexcept override { return "a shape error of the learner's own"; }
};

void throws(int64_t kind) {  // what C++ code raises, as Python sees it
    TORCH_CHECK(kind != 0, "a and b must have one shape, got kind ", kind);    // RuntimeError
    TORCH_CHECK_VALUE(kind != 1, "kind must not be 1");                       // ValueError
    TORCH_CHECK_INDEX(kind != 2, "index 2 is out of range");                  // IndexError
    TORCH_CHECK_TYPE(kind != 3, "expected a float32 tensor");                 // TypeError
    if (kind == 4) throw std::invalid_argument("torch's handler makes this RuntimeError");
    if (kind == 5) throw std::out_of_range("and this, where pybind11 alone made IndexError");
    if (kind == 6) throw ShapeError();                                        // RuntimeError
}

torch::Tensor scale(torch::Tensor a, double factor) {
    // YOUR CODE HERE
    throw std::runtime_error("not implemented");
}
'''  # scale's body is the stub that hpcdl_course.cpp_stubs releases
FUNCTIONS = ["add", "add_wrong", "crash", "pid", "scale", "throws"]
FAST = ("-O0",)  # these tests measure nothing: compile as fast as possible


@pytest.fixture(scope="module")
def toy():
    return build.extension("toy", TOY_CPP, functions=FUNCTIONS, extra_cflags=FAST)


def make_inputs(shape, dtype, generator):
    return (check.random_tensor(shape, dtype, generator=generator),
            check.random_tensor(shape, dtype, generator=generator))


CASES = [((37,), torch.float32), ((5, 7), torch.float32)]


@capabilities.cxx
def test_right_add_passes_the_check_and_wrong_add_fails_it(toy):
    check.outputs(toy.add, torch.add, make_inputs, CASES)
    with pytest.raises(check.CheckFailed, match="add_wrong"):
        check.outputs(toy.add_wrong, torch.add, make_inputs, CASES)


@capabilities.cxx
def test_same_source_is_not_built_again(toy, capsys):
    again = build.extension("toy", TOY_CPP, functions=FUNCTIONS, extra_cflags=FAST)
    assert again.path == toy.path and again.path.exists()
    assert "built" not in capsys.readouterr().out


@capabilities.cxx
def test_released_stub_compiles_and_says_not_implemented(toy):
    with pytest.raises(RuntimeError, match="not implemented"):
        toy.scale(torch.ones(3), 2.0)


@capabilities.cxx
def test_isolated_call_returns_the_result_from_a_child(toy, shared_servers):
    a, b = torch.arange(5.0), torch.full((5,), 0.5)
    assert torch.equal(toy.isolated("add")(a, b), a + b)


@pytest.fixture
def fresh_servers(no_leftovers):
    """No extension process before the test, and none left after it (they carry the test's token)."""
    isolation.stop_servers()
    yield
    isolation.stop_servers()


@pytest.fixture(scope="module")
def shared_servers():
    """Extension processes shared by several tests (as by a notebook's cells), none left after them."""
    token = uuid.uuid4().hex
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HPCDL_TEST_TOKEN", token)
        isolation.stop_servers()
        yield
        isolation.stop_servers()
    deadline = time.monotonic() + 2
    while pids_holding(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_holding(token) == []


@capabilities.cxx
def test_segfault_in_an_isolated_call_fails_that_call_only(toy, fresh_servers):
    with pytest.raises(IsolatedFailure, match=r"toy\.crash\(\) was killed by SIGSEGV \(Segmentation fault\): a "
                                              r"read or write of memory it does not own") as failure:
        toy.isolated("crash")()
    assert "the next call starts a fresh one" in str(failure.value)
    assert torch.equal(toy.add(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))  # this process lives on
    assert torch.equal(toy.isolated("add")(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))  # a fresh one


@capabilities.cxx
def test_isolated_calls_share_one_process_per_extension(toy, fresh_servers):
    pid = toy.isolated("pid")()
    assert pid != os.getpid()
    again = build.extension("toy", TOY_CPP, functions=FUNCTIONS, extra_cflags=FAST)  # a cell run again
    assert again.isolated("pid")() == toy.isolated("pid")() == pid
    with pytest.raises(RuntimeError):
        toy.isolated("throws")(0)
    assert toy.isolated("pid")() == pid, "an exception does not cost the process"
    with pytest.raises(IsolatedFailure):
        toy.isolated("crash")()
    assert toy.isolated("pid")() not in (pid, os.getpid())


@capabilities.cxx
@pytest.mark.parametrize("kind, expected", [(0, RuntimeError), (1, ValueError), (2, IndexError), (3, TypeError),
                                            (4, RuntimeError), (5, RuntimeError), (6, RuntimeError)])
def test_isolated_call_raises_what_the_call_here_raises(toy, kind, expected, shared_servers):
    with pytest.raises(expected) as here:
        toy.throws(kind)
    with pytest.raises(expected) as there:
        toy.isolated("throws")(kind)
    assert type(there.value) is type(here.value) is expected
    assert str(there.value) == str(here.value)  # TORCH_CHECK's message, as this process would show it
    assert there.value.__notes__ == ["raised by toy.throws() in a child process"]


@capabilities.cxx
def test_check_raises_sees_a_torch_check_through_an_isolated_call(toy, shared_servers):
    a, b = torch.ones(3), torch.ones(4)
    check.raises(toy.isolated("add"), (a, b), RuntimeError, because="for a and b of different shapes")
    with pytest.raises(check.CheckFailed, match="raised RuntimeError for a and b of different shapes; expected "
                                                "IsolatedFailure"):
        check.raises(toy.isolated("add"), (a, b), IsolatedFailure, because="for a and b of different shapes")
    with pytest.raises(RuntimeError, match="a and b must be float32 tensors of the same shape"):
        toy.isolated("add")(a, b)
    with pytest.raises(TypeError, match="incompatible function arguments"):  # pybind11's, as here
        toy.isolated("add")(a, "not a tensor")


@capabilities.cxx
@pytest.mark.skipif(not sys.platform.startswith("linux") or not shutil.which("g++"), reason="needs Linux and g++")
def test_extension_runs_on_torchs_cxx_runtime_whatever_the_compiler_links(tmp_path, monkeypatch, shared_servers):
    """A compiler that links a static libstdc++ (the lent GPU image's g++ wrapper did) gave the extension a copy of
    the C++ runtime whose streams are never set up: a TORCH_CHECK message lost its numbers here ("odd length") and
    crashed the process there. hpcdl.build links the libstdc++ that torch runs with instead."""
    static = tmp_path / "g++"
    static.write_text(f'#!/bin/sh\nexec {shutil.which("g++")} -static-libstdc++ "$@"\n')
    static.chmod(0o755)
    monkeypatch.setenv("CXX", str(static))
    source = 'torch::Tensor f(torch::Tensor q) { TORCH_CHECK(q.numel() % 2 == 0, "odd length ", q.numel()); return q; }'
    ext = build.extension("static_runtime", source, functions=["f"], extra_cflags=FAST)
    with pytest.raises(RuntimeError) as raised:
        ext.isolated("f")(torch.zeros(3))
    assert str(raised.value) == "odd length 3"
    assert build.cxx_runtime() and "libstdc++" in build.cxx_runtime()[0]


@capabilities.cxx
def test_compile_error_shows_the_compilers_lines_only(capfd):
    source = 'torch::Tensor f(torch::Tensor a) { return a; }\n#include "no_such_header.h"\n'
    with pytest.raises(CompileError) as failure:
        build.extension("broken", source, functions=["f"], extra_cflags=FAST)
    message = str(failure.value)
    assert "broken.cpp:2:10: fatal error: no_such_header.h: No such file or directory" in message
    assert '#include "no_such_header.h"' in message  # the learner's own line, quoted by the compiler
    assert "ninja" not in message and "-I" not in message and len(message.splitlines()) < 10
    assert capfd.readouterr().err == ""  # stderr would cost a grade cell its points


@capabilities.cxx
def test_hung_compiler_is_stopped_and_leaves_nothing(tmp_path, no_leftovers):
    fifo = tmp_path / "never_written"
    os.mkfifo(fifo)  # the compiler blocks opening it for reading
    with pytest.raises(BuildFailed, match="did not finish within 5 s"):
        build.extension("stuck", f'#include "{fifo}"\n', functions=[], extra_cflags=FAST, timeout=5)
    stuck = [p for p in build.cache_root().glob("stuck-*")]
    assert stuck and not any((p / "lock").exists() for p in stuck)


def test_names_must_be_identifiers():
    with pytest.raises(ValueError, match="C\\+\\+ identifier"):
        build.extension("int4-pack", "", functions=["pack"])


@capabilities.mpi_cxx
def test_mpi_program_syntax_error_quotes_the_line():
    source = "#include <mpi.h>\nint main() {\n    int x = 1\n    return x;\n}\n"
    with pytest.raises(CompileError) as failure:
        build.mpi_program("typo", source)
    message = str(failure.value)
    assert "typo.cpp:4:5: error: expected" in message and "    4 |     return x;" in message


def test_compiler_errors_keep_the_first_errors_and_count_the_rest():
    log = "\n".join(["[1/2] c++ -MMD -I/very/long/include/path -c x.cpp", "x.cpp: In function 'int f()':"]
                    + [f"x.cpp:{i}:1: error: problem {i}\n    {i} | code\n      | ^" for i in range(1, 6)]
                    + ["ninja: build stopped: subcommand failed."])
    shown = build.compiler_errors(log, max_errors=2)
    assert shown.splitlines()[0] == "x.cpp: In function 'int f()':"
    assert "problem 1" in shown and "problem 2" in shown and "problem 3" not in shown
    assert shown.endswith("... and 3 more error lines") and "ninja" not in shown and "-I" not in shown
