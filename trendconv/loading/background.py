"""Work of the build's end run on a thread of its own while the loader goes on (a sync, a copy): the two overlap
where each spends its time in the kernel or in C without the GIL."""

from __future__ import annotations

import threading


class Background(threading.Thread):
    """FUNCTION(*ARGS) on a thread named NAME, started at once; `wait` joins it and raises what it raised, which is
    not lost: an error fsync reports is reported once only."""

    def __init__(self, name: str, function, *args) -> None:
        super().__init__(name=name, daemon=True)
        self._call, self._args, self.error = function, args, None
        self.start()

    def run(self) -> None:
        try:
            self._call(*self._args)
        except BaseException as exc:  # noqa: BLE001 - raised by `wait`, on the thread that waits
            self.error = exc

    def wait(self) -> None:
        self.join()
        if self.error is not None:
            error, self.error = self.error, None
            raise error
