"""Timing shared by the side-by-side scripts in bench/peers."""
import time


def timed(f, repeat):
    """Best wall time of `repeat` calls of f, and the last call's result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = f()
        best = min(best, time.perf_counter() - t0)
    return best, result
