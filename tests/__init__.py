"""retimer's tests. A package so its shared support code (proxy, upstream, fixture_streams, ...)
is importable as `tests.support.proxy` etc. from the checkout, by the tests and by bench alike."""
