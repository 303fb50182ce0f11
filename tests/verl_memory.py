"""At most two verl runs alive at once on the CI machine, whichever pytest-xdist workers start them.

A verl CPU run holds about 7 GB in its 15 processes (the real LM's run more). In CI, the real-LM run beside the toy
module's ran the 24 GB machine out of memory: Ray's memory monitor killed workers, and verl waited on their requests
until the test's timeout. So a phase that keeps two runs alive (the toy module's killed attempts beside its pipeline)
holds this lock, and so does a module's run that may start beside another module's (the real-LM run); a module's
single run beside its own module's needs none.
"""

import contextlib
from collections.abc import Iterator

from filelock import FileLock


@contextlib.contextmanager
def one_more_verl_run(tmp_path_factory) -> Iterator[None]:
    shared = tmp_path_factory.getbasetemp().parent  # one directory for every worker of the session
    with FileLock(str(shared / "verl_runs.lock")):
        yield
