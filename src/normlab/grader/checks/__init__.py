"""One module per lab; each defines ``LAB`` (a :class:`normlab.grader.core.Lab`)."""
