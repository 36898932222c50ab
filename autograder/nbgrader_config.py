"""nbgrader configuration for HPC-DL.

The road: solutions/ (sources with solutions and hidden tests) -> course/ (released notebooks)
-> <work>/submitted -> <work>/autograded -> <work>/feedback, grades in <work>/gradebook.db.
<work> is autograder/work unless HPCDL_WORK names another folder (the test suite uses a temporary one).
"""
import os

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearHiddenTests, GetGrades, IgnorePattern,
                                    LimitOutput, SaveAutoGrades)

from hpcdl_course.gradebook import serialize_sqlite_transactions
from hpcdl_course.trusted_execute import TrustedExecute

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

# HPCDL_COURSE_ROOT: another course root (its solutions/ and course/), as in hpcdl_course/paths.py.
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
root = os.path.abspath(os.environ.get("HPCDL_COURSE_ROOT") or repo)
work = os.path.abspath(os.path.join(root, os.environ.get("HPCDL_WORK", "autograder/work")))

c.CourseDirectory.root = root
c.CourseDirectory.course_id = "hpcdl"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "course"
c.CourseDirectory.submitted_directory = os.path.join(work, "submitted")
c.CourseDirectory.autograded_directory = os.path.join(work, "autograded")
c.CourseDirectory.feedback_directory = os.path.join(work, "feedback")
# GRADEBOOK_URL names a database server (postgresql://...); SQLite in the work folder otherwise. Parallel
# grading runs several nbgrader processes on it at once: SQLite's transactions then wait for each other
# (hpcdl_course/gradebook.py).
c.CourseDirectory.db_url = os.environ.get("GRADEBOOK_URL") or "sqlite:///" + os.path.join(work, "gradebook.db")
serialize_sqlite_transactions()
# Notebook text sources (they hold solutions) and the answer fixtures stay out of the release.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.nb.py", "answers.toml"]

# Due dates: c.HpcdlGrade.due_dates maps an assignment to when it is due, in any form nbgrader reads
# ("2025-03-01 17:00:00 Europe/Berlin", an ISO time; no zone: UTC), here or in nbgrader's other configuration
# files (~/.jupyter/nbgrader_config.py). `make grade` records each in the gradebook (nbgrader's own
# `db assignment add --duedate`) before it grades that assignment; nbgrader then compares each submission's
# timestamp.txt with it: a later one is late (grades.csv's `late`), and LateSubmissionPlugin.penalty_method
# decides what that costs (nbgrader's default "none": nothing; "zero": every point). An assignment left out
# keeps the due date the gradebook has, if any.
# c.HpcdlGrade.due_dates = {"02_roofline": "2025-03-01 17:00:00 UTC"}
# c.LateSubmissionPlugin.penalty_method = "zero"

# Triton compiles, autotuning and C++ builds take far longer than nbgrader's default 30 s per cell.
c.Execute.timeout = 900
# A warning or compiler message on stderr must not turn a passing grade cell into 0: only errors count.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"[\s\S]"
# Autograding never runs a test beside the learner's code: TrustedExecute takes the place of nbgrader's
# Execute (hpcdl_course/trusted_execute.py). The rest of nbgrader's list is unchanged.
c.Autograde.autograde_preprocessors = [TrustedExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
                                       SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
c.TrustedExecute.timeout = float(os.environ.get("HPCDL_NOTEBOOK_TIMEOUT", 3600))
# Feedback shows failures, not the hidden tests' source.
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
# Feedback opens with a table of the graded cells by name, points and verdict (autograder/feedback/); the rest
# of the page is nbgrader's own template, found beside nbgrader as nbgrader itself would find it.
import nbgrader  # noqa: E402

c.HTMLExporter.template_name = "hpcdl_feedback"
c.HTMLExporter.template_file = "hpcdl_feedback.html.j2"
c.HTMLExporter.extra_template_basedirs = [
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "feedback"),
    os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader", "templates")]
# Instructors and learners open feedback pages in a browser: nothing a learner wrote may run there.
# nbconvert's own switch cleans HTML, markdown and SVG outputs and leaves out JavaScript outputs and widget
# views; nbgrader's template renders markdown cells without it, so the course's template passes every
# cell's HTML, as rendered, through nbconvert's sanitizer (bleach): the tags markdown and nbconvert write are
# kept, any other tag (<script>, <iframe>, <svg>, <object>, <style>, ...) is shown as text, attributes other
# than those below are dropped (no on...=), and links and images keep only http, https, mailto, relative
# or #anchor addresses (no javascript:, no data:).
from nbconvert.preprocessors.sanitize import SanitizeHTML  # noqa: E402

c.HTMLExporter.sanitize_html = True
_FEEDBACK_TAGS = ["a", "abbr", "acronym", "b", "blockquote", "br", "caption", "cite", "code", "col", "colgroup",
                  "dd", "del", "details", "dfn", "div", "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3",
                  "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "samp",
                  "small", "span", "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead",
                  "tr", "u", "ul", "var"]
_FEEDBACK_ATTRIBUTES = {"*": ["class", "id", "title"], "a": ["href", "name"], "img": ["src", "alt", "width", "height"],
                        "ol": ["start"], "span": ["style"], "td": ["style", "colspan", "rowspan"],
                        "th": ["style", "colspan", "rowspan"]}
_FEEDBACK_STYLES = ["color", "background-color", "font-weight", "font-style", "text-decoration", "text-align"]
c.HTMLExporter.filters = {"hpcdl_sanitize": SanitizeHTML(
    tags=_FEEDBACK_TAGS, attributes=_FEEDBACK_ATTRIBUTES, styles=_FEEDBACK_STYLES, strip=False).sanitize_html_tags}

# --- C++ answers (hpcdl_course/cpp_stubs.py) ---
# A `// BEGIN SOLUTION` ... `// END SOLUTION` region is released as a C++ stub that compiles. The
# preprocessor takes ClearSolutions' place: nbgrader's list is otherwise unchanged.
from nbgrader.converters import GenerateAssignment  # noqa: E402
from nbgrader.preprocessors import ClearSolutions  # noqa: E402

from hpcdl_course.cpp_stubs import ClearSolutionsWithCpp  # noqa: E402

c.GenerateAssignment.preprocessors = [ClearSolutionsWithCpp if p is ClearSolutions else p
                                      for p in GenerateAssignment.class_traits()["preprocessors"].default()]
