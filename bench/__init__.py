"""The benchmarks, each run as `python -m bench.NAME`; the last line it prints is JSON."""
