"""Helpers shared by the tests (and the benchmarks' live server): import them as
``tests.support.<module>``."""
