"""The timing benchmarks and the soak, run from the checkout as modules: `python -m bench.run`,
`python -m bench.soak`. They import the tests' support code as the `tests` package."""
