"""README's first-workflow section (issue 45): its Python snippet is the example's code, line for line
(it said `TaskWorker(client)`, so a script written from it waited ~10 s for its last long poll at exit),
and its second shell follows a changed PORT (LEDGERFLOW_URL) and DATABASE_URL."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Your first workflow")
    return text[start : text.index("\n## ", start + 1)]


def _code(line: str) -> str:
    """A line's code without its comment (the snippet may explain a line in other words)."""
    return line.split("  #")[0].strip()


def _imports(lines: list[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for line in lines:
        m = re.fullmatch(r"from (\S+) import (.+)", line)
        if m:
            out.setdefault(m[1], set()).update(n.strip() for n in m[2].split(","))
    return out


def test_the_snippet_is_the_examples_code():
    section = _section()
    [snippet] = re.findall(r"```python\n(.*?)```", section, re.S)
    example = [_code(line) for line in (ROOT / "examples" / "first_workflow.py").read_text().splitlines()]
    lines = [_code(line) for line in snippet.splitlines() if _code(line)]
    missing = [line for line in lines if line not in example and not line.startswith("from ")]
    assert missing == []
    imported, available = _imports(lines), _imports(example)
    assert all(names <= available.get(module, set()) for module, names in imported.items())
    assert "TaskWorker(client, wait_seconds=1)" in snippet


def test_the_second_shell_follows_port_and_database_url():
    section = _section()
    shell = re.findall(r"```sh\n(.*?)```", section, re.S)[0]
    assert "export LEDGERFLOW_URL=http://127.0.0.1:${PORT:-5000}" in shell
    assert shell.index("LEDGERFLOW_URL") < shell.index("first_workflow.py")
    assert "`DATABASE_URL`" in section and "`PORT`" in section
