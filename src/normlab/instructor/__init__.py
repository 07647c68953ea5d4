"""What an instructor reads or sends: the gradebook and feedback (``report``), the LMS files
(``lms``, ``exports``, ``gradescope``), Canvas (``canvas``), the class's views (``classreport``,
``similarity``) and ``normlab report``'s commands (``commands``). It imports the grading engine
(``normlab.grader``), which never imports it (``tests/test_layering.py``)."""
