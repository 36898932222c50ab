"""The grading protocol: what runs a learner's answers apart from the checks that grade them.

Learners never need this package (the learner repository leaves it out). When an instructor grades,
the trusted checker (hpcdl_course.checker) runs the test cells with stand-ins (remote.py) for what the
answer cells defined; the answer cells run in a worker process in the sandbox (worker.py), the two talk
through wire.py, and the checker's own clock (clock.py) times the worker's functions.

The checks themselves are hpcdl's, the same in the lab and when graded: hpcdl.elsewhere is the one
place where they meet a stand-in.
"""
