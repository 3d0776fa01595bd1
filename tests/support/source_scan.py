"""Static scans of retimer's source: where a module touches files."""

from __future__ import annotations

import ast

FILE_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "glob", "rglob", "iterdir", "mkdir",
              "is_file", "is_dir", "exists", "stat", "unlink", "listdir", "scandir", "walk", "savefig", "utime"}


def file_io_calls(tree: ast.AST) -> list[int]:
    """Lines that call a file-system function (`open`, `Path.read_text`, `glob`, ...)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in FILE_CALLS:
                lines.append(node.lineno)
    return lines
