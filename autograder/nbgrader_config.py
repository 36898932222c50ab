"""nbgrader configuration for HPC-DL.

The road: solutions/ (sources with solutions and hidden tests) -> course/ (released notebooks)
-> <work>/submitted -> <work>/autograded -> <work>/feedback, grades in <work>/gradebook.db.
<work> is autograder/work unless HPCDL_WORK names another folder (the test suite uses a temporary one).
"""
import os

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import ClearHiddenTests, GetGrades

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
work = os.path.abspath(os.path.join(root, os.environ.get("HPCDL_WORK", "autograder/work")))

c.CourseDirectory.root = root
c.CourseDirectory.course_id = "hpcdl"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "course"
c.CourseDirectory.submitted_directory = os.path.join(work, "submitted")
c.CourseDirectory.autograded_directory = os.path.join(work, "autograded")
c.CourseDirectory.feedback_directory = os.path.join(work, "feedback")
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(work, "gradebook.db")
# Notebook text sources (they hold solutions) and the answer fixtures stay out of the release.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.nb.py", "answers.toml"]

# Triton compiles, autotuning and C++ builds take far longer than nbgrader's default 30 s per cell.
c.Execute.timeout = 900
# A warning or compiler message on stderr must not turn a passing grade cell into 0: only errors count.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"[\s\S]"
# Feedback shows failures, not the hidden tests' source.
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
