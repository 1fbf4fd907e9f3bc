"""One long durable run to profile: the worker's path from the model's answer to the
committed entry and back, with a zero-cost model and tool (benchmarks/fakes.py).

    .venv/bin/py-spy record --format speedscope -o step.json -- \
        .venv/bin/python benchmarks/profile_step.py --steps 3000
    .venv/bin/python benchmarks/profile_step.py --cprofile step.prof

Runs one warm-up run, then the profiled one (`--runs` more), on a scratch SQLite file
(`--url` for another database). py-spy samples only what is on the CPU by default, so its
flame graph is the CPU's; `--cprofile PATH` profiles the runs in-process instead and writes
pstats to PATH, every thread's calls together: a durable run's loop runs on a thread of its
own (runner/core/loop_host.py), which a profile of the calling thread alone would miss.
docs/profiles/ keeps the graphs of the write path (docs/performance/step.md).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import resource
import threading
import time
from types import FrameType
from typing import Any

import common
import fakes

from runner import Runner


class EveryThread:
    """cProfile for this thread and every thread started while it is on: a profile each
    (one profiler object serves one thread), merged into one pstats file at the end. On
    before the warm-up, whose run starts the threads the profiled runs reuse (the spare
    threads, the watcher); `clear` then forgets what the warm-up cost."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []

    def start(self) -> None:
        threading.setprofile(self._begin)  # each new thread's first event starts its own
        self._begin()

    def clear(self) -> None:
        for profile in self.profiles:
            profile.clear()

    def stop_and_dump(self, path: str) -> None:
        threading.setprofile(None)
        for profile in self.profiles:
            profile.create_stats()  # disables it, in whichever thread it ran
        merged = pstats.Stats(self.profiles[0])
        for profile in self.profiles[1:]:
            merged.add(profile)
        merged.dump_stats(path)

    def _begin(self, _frame: FrameType | None = None, _event: str = "", _arg: Any = None) -> None:
        profile = cProfile.Profile()
        self.profiles.append(profile)
        profile.enable()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--steps", type=int, default=2000, help="steps per run (default 2000)")
    p.add_argument("--runs", type=int, default=1, help="profiled runs (default 1)")
    p.add_argument("--url", help="the database (default: a scratch SQLite file)")
    p.add_argument("--dir", help="where the scratch SQLite file goes")
    p.add_argument("--cprofile", metavar="PATH", help="profile in-process, pstats to PATH")
    options = p.parse_args()
    with common.scratch_folder(options.dir) as folder:
        url = options.url or common.sqlite_url(folder, "profile", "")
        runner = Runner(url, lease_seconds=600)
        try:
            profile = EveryThread() if options.cprofile else None
            if profile is not None:
                profile.start()
            runner.run(fakes.make_agent(), fakes.task(50))  # warm-up
            if profile is not None:
                profile.clear()
            cpu, usage = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
            for _ in range(options.runs):
                result = runner.run(fakes.make_agent(), fakes.task(options.steps))
                assert result.stop_reason == "final", result
            if profile is not None:
                profile.stop_and_dump(options.cprofile)
            cpu, after = time.process_time() - cpu, resource.getrusage(resource.RUSAGE_SELF)
            entries = options.runs * (2 * options.steps)
            user, system = after.ru_utime - usage.ru_utime, after.ru_stime - usage.ru_stime
            voluntary = (after.ru_nvcsw - usage.ru_nvcsw) / entries
            involuntary = (after.ru_nivcsw - usage.ru_nivcsw) / entries
            print(
                f"{entries} entries, {cpu / entries * 1e6:.1f} us of CPU per entry"
                f" (user {user / entries * 1e6:.1f}, system {system / entries * 1e6:.1f});"
                f" context switches per entry: {voluntary:.2f} voluntary,"
                f" {involuntary:.2f} involuntary"
            )
        finally:
            runner.close()


if __name__ == "__main__":
    main()
