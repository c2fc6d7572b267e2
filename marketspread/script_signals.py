"""SIGTERM and SIGINT reach a script run in this process as they would under `python job.py`.

Python runs a signal's handler in the main thread, but only between bytecodes: the kernel
may deliver a process-wide signal to any thread (py4j's, the metrics writer's), and a
main thread blocked in a py4j call (`query.awaitTermination()`) would then wait for ever.
So the signals' numbers also go to a wake-up pipe (`signal.set_wakeup_fd`), and a small
thread reading it sends the main thread a signal of its own (`NUDGE`, handled by doing
nothing): the blocked call returns EINTR, Python runs the pending handler there, and
its exception unwinds the script through its `finally` blocks.

SIGINT raises KeyboardInterrupt, SIGTERM SystemExit(143), which no `except Exception:` of
the script swallows. Before raising, `on_interrupt()` runs in the main thread: the
interrupted call may have left a connection mid-answer (py4j's pinned connection of the
main thread, which the script's `query.stop()` in its `finally` would wait on for ever),
and the caller drops it there. A second SIGTERM ends the process at once, as without a
handler. Once the script is done, `flushing()` turns both into a note
of the exit code, so the monitors' last writes are not cut short.

>>> signals = ScriptSignals().install()
>>> try: run_the_script()
... finally: signals.flushing(); flush(); signals.uninstall()
"""
from __future__ import annotations

import logging
import os
import signal
import threading

log = logging.getLogger(__name__)

PASSED = (signal.SIGTERM, signal.SIGINT)
NUDGE = signal.SIGRTMIN + 5 if hasattr(signal, "SIGRTMIN") else None     # Linux: an unused real-time signal


class ScriptSignals:
    """Install, then `flushing()` once the script returned, then `uninstall()`."""

    def __init__(self, on_interrupt=None):
        self.on_interrupt = on_interrupt
        self.received: int | None = None            # a signal that came while flushing
        self._previous: dict[int, object] = {}
        self._pipe: tuple[int, int] | None = None
        self._previous_fd = -1
        self._thread: threading.Thread | None = None

    def install(self) -> "ScriptSignals":
        """Pass SIGTERM on as SystemExit; wake a main thread blocked in a call. No-op off the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return self
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:     # not ignored by our parent
            self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_int)
        self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._on_term)
        if NUDGE is None:
            return self
        self._previous[NUDGE] = signal.signal(NUDGE, lambda signum, frame: None)
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._pipe = (r, w)
        self._previous_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._wake_main, args=(r, threading.main_thread().ident),
                                        name="watch-signals", daemon=True)
        self._thread.start()
        return self

    def _on_term(self, signum, frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        log.info("watch: SIGTERM: stopping the script")
        self._interrupting()
        raise SystemExit(128 + signum)

    def _on_int(self, signum, frame) -> None:
        self._interrupting()
        raise KeyboardInterrupt

    def _interrupting(self) -> None:
        if self.on_interrupt is not None:
            try:
                self.on_interrupt()
            except Exception:
                log.exception("watch: preparing the script's interruption failed")

    @staticmethod
    def _wake_main(r: int, main_ident: int) -> None:
        while True:
            try:
                data = os.read(r, 64)
            except OSError:
                return
            if not data:
                return
            if any(b in PASSED for b in data):
                try:
                    signal.pthread_kill(main_ident, NUDGE)
                except (OSError, ValueError):
                    return

    def flushing(self) -> None:
        """The script is done: SIGTERM and SIGINT now only set the exit code."""
        if threading.current_thread() is not threading.main_thread():
            return

        def note(signum, frame):
            signal.signal(signum, signal.SIG_DFL)     # a second one ends the process
            self.received = signum

        for sig in PASSED:
            if signal.getsignal(sig) in (self._on_term, self._on_int):
                signal.signal(sig, note)

    def uninstall(self) -> None:
        """Put back the handlers and the wake-up fd this replaced."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in self._previous.items():
            if previous is not None:
                signal.signal(sig, previous)
        self._previous.clear()
        if self._pipe is not None:
            signal.set_wakeup_fd(self._previous_fd)
            r, w = self._pipe
            os.close(w)
            if self._thread is not None:
                self._thread.join(2)
            os.close(r)
            self._pipe = None
