"""Given material of the capstone (notebook 10) and of `make demo`: a small byte-level language model and its text.

No exercise lives here: `model` is a GPT-2-shaped decoder whose softmax and first MLP layer are pluggable, `corpus`
reads Python's own standard-library source.
"""
