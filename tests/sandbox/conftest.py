import pytest

from execrl.sandbox import Grader, Limits

FAST = Limits(timeout_s=1.0, memory_mb=512, output_mb=4)


@pytest.fixture(scope="session")
def grader():
    with Grader(num_workers=2, limits=FAST) as g:
        yield g


@pytest.fixture
def solo():
    """A grader with one worker, so that consecutive programs share it."""
    with Grader(num_workers=1, limits=FAST) as g:
        yield g


def stdio(inputs, outputs):
    return {"inputs": list(inputs), "outputs": list(outputs)}


ONE = stdio(["\n"], ["ok\n"])  # a program that must print exactly "ok"
