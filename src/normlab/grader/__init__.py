"""The grader: one engine (``core``), two doors (``notebook.check`` and ``grade``)."""
