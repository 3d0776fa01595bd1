"""retimer's tests. A package so its shared support code (proxy, upstream, fixture_streams, ...)
is importable as `tests.proxy` etc. from the checkout, by the tests and by bench alike."""
