"""`make demo`: the capstone pipeline (notebook 10) as the instructor runs it, built from the solutions.

Phase 1 trains a small byte-level decoder-only language model on Python's own standard-library source with
two data-parallel ranks; phase 2 quantizes its linear layers to INT4 and saves them as safetensors; phase 3
loads that file, measures perplexity on held-out text and generates text, beside the fp32 model. Each piece
comes from an earlier notebook's solution where that notebook exists (`pieces.py`), else from a plain PyTorch
stand-in; the summary says which.

    python -m hpcdl_course.demo [--setting full|small] [--out FOLDER]
"""
