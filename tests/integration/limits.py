"""How long a test waits for the agent before it calls the wait a failure.

A limit says "this is broken", not "this is fast": speed is measured in
bench/. Under valgrind the agent runs tens of times slower, and more again
on a machine that is busy with other work, so ctest's valgrind entry sets
GPULET_TIME_SCALE and every wait here is multiplied by it. A passing test
never waits for a limit, so a generous one costs nothing."""
import os

SCALE = float(os.environ.get("GPULET_TIME_SCALE") or 1)


def limit(seconds):
    """seconds, scaled for the build and machine the tests run on."""
    return seconds * SCALE
