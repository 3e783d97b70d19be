"""`execrl eval`'s grading while sampling runs: where the generator hands each completion in as it
ends (on a GPU: RolloutEngine.streams), its program goes to the sandbox at once, on at most
`grading_share` of the sandbox's workers (half by default: each grade's Python work takes the
interpreter's lock from the decode loop; bench/README.md, "`execrl eval` grading while it samples");
the programs still waiting when sampling ends, and every other, are graded after it on all the
workers. Each program is graded on its own, so the results are those of grading them all after
sampling."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from execrl.rewards import Sample
from execrl.rewards.outcome import grade_job, graded_in_sandbox
from execrl.sandbox import Grader


class EarlyGrading:
    """Programs graded as their samples are handed in (give), then the rest (finish)."""

    def __init__(self, grader: Grader, share: float):
        self.grader = grader
        self.most = grader.share(share)  # workers while sampling
        self.pool = ThreadPoolExecutor(self.most, thread_name_prefix="eval-grading") if self.most else None
        self.given: dict[tuple[int, int], tuple[Sample, Future | None]] = {}  # (problem, sample) -> it, its grade

    def give(self, key: tuple[int, int], sample: Sample) -> None:
        """Sample `key` (problem i, sample j) is in: its program starts grading when a worker is free."""
        job = grade_job(sample) if graded_in_sandbox(sample) else None
        self.given[key] = (sample, None if job is None else self.pool.submit(self.grader.grade, *job))

    def sample(self, key: tuple[int, int]) -> Sample | None:
        """The sample handed in as `key`, if it was."""
        given = self.given.get(key)
        return None if given is None else given[0]

    def finish(self, samples: dict[tuple[int, int], Sample], progress=None) -> int:
        """Every sample's grade in (samples: all of them, by key): those handed in and started keep
        their grade, the rest are graded now on every worker. Returns how many were graded by the
        time sampling ended."""
        started, late, done_early = [], [], 0
        for key, s in samples.items():
            future = self.given.get(key, (None, None))[1]
            if future is not None and not future.cancel():  # (cancel: not started, so graded with the rest)
                started.append((s, future))
                done_early += future.done()
            elif graded_in_sandbox(s):
                late.append(s)
        self.close()
        jobs = [grade_job(s) for s in late]
        for s, result in zip(late, self.grader.grade_many(jobs, on_done=(lambda *_: progress()) if progress else None)):
            s.result = result
        for s, future in started:
            s.result = future.result()
            if progress:
                progress()
        return done_early

    def close(self) -> None:
        """No more grading while sampling: what has not started never will (sampling failed, or finish took it)."""
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
