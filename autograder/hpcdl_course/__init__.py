"""Instructor tools for HPC-DL: build notebooks from their text sources, release them with nbgrader,
and grade a folder of submissions into the gradebook. Learners do not need this package."""
