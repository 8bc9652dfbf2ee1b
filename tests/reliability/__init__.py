"""The reliability harness: no acknowledged finding or ledger entry is lost, doubled or made up.

Three scenarios, each a module that can run quick (CI) or full (by hand):

* ``powerloss``: an in-process ``os`` shim records every write, fsync, rename and directory fsync
  of a workload, then builds every crash state its durability model allows and recovers each one;
* ``failpoints``: every named failpoint x each fault (SIGKILL, ENOSPC, EIO, EACCES, EROFS, once or
  persistent) x learn, resume, sync and ledger append, then the normal recovery;
* ``soak``: processes learning concurrently on one store and across stores, killed at random
  instants and resumed, for a bounded time.

``python -m tests.reliability [--quick]`` prints one table of all three (see docs/RELIABILITY.md).
"""
