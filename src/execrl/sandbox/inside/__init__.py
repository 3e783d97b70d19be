"""What runs inside the sandbox. Standard library only, and nothing else of execrl: these processes
fork once per test, so what they import is paid for on every fork.

  zygote.py    the sandboxed process: a loop over the grader's requests, one forked child per test,
               cleanup of every process and file after each
  child.py     the forked child: limits, a uid of its own, then the program (Python in-process, anything
               else exec'd); in the assert and check forms, it answers the checker's calls
  checker.py   the child that runs trusted test code (asserts, check functions) against stubs of the program
  protocol.py  message framing and the plain-data codec, shared with the grading process
"""
