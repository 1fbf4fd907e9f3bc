"""One long durable run to profile: the worker's path from the model's answer to the
committed entry and back, with a zero-cost model and tool (benchmarks/fakes.py).

    .venv/bin/py-spy record --format speedscope -o step.json -- \
        .venv/bin/python benchmarks/profile_step.py --steps 3000
    .venv/bin/python benchmarks/profile_step.py --cprofile step.prof

Runs one warm-up run, then the profiled one (`--runs` more), on a scratch SQLite file
(`--url` for another database). py-spy samples only what is on the CPU by default, so its
flame graph is the CPU's; `--cprofile PATH` profiles the runs in-process instead and writes
pstats to PATH. docs/profiles/ keeps the graphs of the write path (docs/performance.md).
"""

from __future__ import annotations

import argparse
import cProfile
import resource
import time

import common
import fakes

from runner import Runner


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
            runner.run(fakes.make_agent(), fakes.task(50))  # warm-up
            profile = cProfile.Profile() if options.cprofile else None
            cpu, usage = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
            if profile is not None:
                profile.enable()
            for _ in range(options.runs):
                result = runner.run(fakes.make_agent(), fakes.task(options.steps))
                assert result.stop_reason == "final", result
            if profile is not None:
                profile.disable()
                profile.dump_stats(options.cprofile)
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
