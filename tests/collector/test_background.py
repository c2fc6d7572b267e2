"""Metrics threads run at a lower CPU priority than the stream's, and only they do."""
from __future__ import annotations

import os
import threading

from collector.background import NICENESS, lower_thread_priority


def test_only_the_calling_thread_is_lowered():
    seen = {}

    def work():
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        seen["ok"] = lower_thread_priority()
        seen["delta"] = os.getpriority(os.PRIO_PROCESS, tid) - before

    main_before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen["ok"] and seen["delta"] == min(NICENESS, 19 - main_before)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main_before
