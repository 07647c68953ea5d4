"""The security boundary of ``normlab grade``, in one wing.

* ``limits``    -- one object that owns every limit (time, memory, processes, sizes);
* ``wire``      -- the only wire format between the grader and a submission's process;
* ``files``     -- opening and removing what a child could have touched, never by name twice;
* ``processes`` -- making sure every process a submission starts dies with it;
* ``sandbox``   -- the parent's side: start a child (fresh, forked or under bubblewrap), talk to it;
* ``worker``    -- the child's side: run the notebook's cells, answer calls;
* ``forkserver``-- hands out fresh children from a process that has imported NumPy and PyTorch;
* ``workspace`` -- outside the sandbox: a private folder with a total, every other mount read-only;
* ``hidden``    -- under the sandbox, what a NumPy lab's notebook sees where PyTorch was.

Nothing in the child decides a grade: the parent validates every field of every reply by type,
compares results itself, and establishes "from scratch" from the notebook's source
(``normlab.grader.trap``) and, under the sandbox, from an interpreter that cannot import
PyTorch for a NumPy lab (``Lab.torch``).
"""
