# bench/: benchmarks; never run by `make check`.
