"""The `retimer` command, grouped by what it serves: the proxy's start (`proxy`), the launchers
(`launch`), `demo`, `study`, and what reads records (`records`); `main` dispatches."""
