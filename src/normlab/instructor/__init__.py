"""What an instructor reads or sends: the gradebook and feedback (``report``), the LMS files
(``lms``, ``exports``, ``gradescope``), Canvas (``canvas``), the class's views (``classreport``,
``similarity``) and ``normlab report``'s commands (``commands``)."""
