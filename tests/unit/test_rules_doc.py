"""docs/rules.md defines every rule id the repository cites (``L-CLAIM-3``, ``W-SIG-1..3``, ``X-TASK``), each
entry links the code that implements it and the tests that check it, and every link of the page leads
somewhere: the file exists, a ``#anchor`` names a heading of that file, a ``file::test`` names a test in it.
The same holds for the links of docs/decisions/ and CONTRIBUTING.md, and for the files and tests they
name in backticks (``tests/db/test_executor_claim.py::test_claim_order...``), except in a decision's
**History** (which names what is gone). No database."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

RULES = ROOT / "docs" / "rules.md"
# where ids are cited: every source, test and document folder, and the top-level documents
SCANNED = [
    "app",
    "actors",
    "web",
    "schemas",
    "ledgerflow",
    "migrations",
    "tests",
    "docs",
    "bench",
    "chaos",
    "examples",
]
TOP_LEVEL = ["README.md", "CONTRIBUTING.md", "pyproject.toml", "Procfile", "gunicorn.conf.py"]
TEXT_SUFFIXES = {".py", ".md", ".html", ".js", ".css", ".toml", ".txt", ".mako", ".ini", ".cfg", ".json"}
# an id, optionally followed by more numbers of its section: L-PAUSE-1..4, L-EFFECT-3, -4, W-SIG-4/5
# (a comma list needs the dash, so "W-ERR-1, 2 tasks" cites W-ERR-1 only)
CITATION = re.compile(r"\b([LWX]-[A-Z]+)(?:-(\d+)((?:(?:\.\.|–|/)\d+|,\s*-\d+)*))?\b")
MORE = re.compile(r"(\.\.|–|/|,\s*-)(\d+)")
DEFINITION = re.compile(r"^#{3,4} ([LWX]-[A-Z]+(?:-\d+)?)\b", re.M)
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
DOCS = [
    RULES,
    *sorted((ROOT / "docs" / "decisions").glob("*.md")),
    ROOT / "docs" / "decisions.md",
    ROOT / "CONTRIBUTING.md",
]
NAMED_PATH = re.compile(
    r"`((?:app|actors|web|schemas|ledgerflow|migrations|tests|bench|chaos|examples|docs)/[\w./-]+?)(?:::(\w+))?`"
)
PART = re.compile(r"\n\s*\n|\n(?=\*\*[A-Z][\w ]*\.\*\*)")
CODE_LINK_ROOTS = ("app/", "actors/", "web/", "schemas/", "ledgerflow/", "migrations/")


def cited_ids(text: str) -> set[str]:
    """Every id a text cites, ranges and lists expanded."""
    ids: set[str] = set()
    for m in CITATION.finditer(text):
        section, first, rest = m.group(1), m.group(2), m.group(3) or ""
        if first is None:
            ids.add(section)
            continue
        numbers = [int(first)]
        for op, n in MORE.findall(rest):
            numbers += range(numbers[-1] + 1, int(n) + 1) if op in ("..", "–") else [int(n)]
        ids |= {f"{section}-{n}" for n in numbers}
    return ids


def scanned_files() -> Iterator[Path]:
    for name in TOP_LEVEL:
        if (ROOT / name).is_file():
            yield ROOT / name
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in TEXT_SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                yield path


def defined_ids() -> set[str]:
    return set(DEFINITION.findall(RULES.read_text()))


def entries() -> dict[str, str]:
    """Each defined id and the text of its entry (up to the next heading)."""
    text = RULES.read_text()
    heads = list(re.finditer(r"^#{2,4} .*$", text, re.M))
    out: dict[str, str] = {}
    for i, h in enumerate(heads):
        m = DEFINITION.match(h.group(0))
        if m:
            end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
            out[m.group(1)] = text[h.end() : end]
    return out


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown text."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for title in re.findall(r"^#{1,6} (.+?)\s*$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(markdown: str) -> list[tuple[str, str]]:
    """(text, target) of every link of a Markdown text into this repository."""
    return [
        (text, target)
        for text, target in LINK.findall(markdown)
        if not target.startswith(("http", "mailto:"))
    ]


def defines(path: Path, name: str) -> bool:
    """Whether a Python file defines ``name`` (a function, a class or a module-level name)."""
    pattern = rf"^\s*(?:(?:async\s+)?def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\b"
    return bool(re.search(pattern, path.read_text(), re.M))


def resolve(base: Path, target: str) -> tuple[Path, str]:
    file, _, anchor = target.partition("#")
    return ((base.parent / file).resolve() if file else base), anchor


def test_the_citation_pattern_expands_ranges_and_lists() -> None:
    pause = {"L-PAUSE-1", "L-PAUSE-2", "L-PAUSE-3", "L-PAUSE-4"}
    assert cited_ids("see L-PAUSE-1..4 and W-SIG-4/5") == pause | {"W-SIG-4", "W-SIG-5"}
    claims = {"L-CLAIM-1", "L-CLAIM-2", "L-CLAIM-6", "L-CLAIM"}
    assert cited_ids("(L-CLAIM-1, -2, -6; L-CLAIM table)") == claims
    assert cited_ids("W-START-1..3, X-TASK") == {"W-START-1", "W-START-2", "W-START-3", "X-TASK"}
    assert cited_ids("W-ERR-1, 2 tasks; W-AUDIT") == {"W-ERR-1", "W-AUDIT"}
    assert cited_ids("the header X-Idempotency-Key, SPEC.md") == set()


def test_every_cited_rule_id_is_defined() -> None:
    defined = defined_ids()
    missing: dict[str, list[str]] = {}
    for path in scanned_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for rule in cited_ids(text) - defined:
            missing.setdefault(rule, []).append(str(path.relative_to(ROOT)))
    assert missing == {}, f"rule ids cited but not defined in docs/rules.md: {missing}"


def test_every_entry_links_its_code_and_its_tests() -> None:
    problems = []
    for rule, body in entries().items():
        if "**Not built.**" in body:
            continue
        targets = [resolve(RULES, t)[0].relative_to(ROOT).as_posix() for _, t in links(body)]
        if not any(t.startswith(CODE_LINK_ROOTS) for t in targets):
            problems.append(f"{rule}: no link to the code that implements it")
        if not any(t.startswith("tests/") for t in targets):
            problems.append(f"{rule}: no link to a test that checks it")
    assert problems == []


def test_the_page_defines_each_id_once() -> None:
    ids = DEFINITION.findall(RULES.read_text())
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_somewhere(doc: Path) -> None:
    broken = []
    for text, target in links(doc.read_text()):
        path, anchor = resolve(doc, target)
        if not path.exists():
            broken.append(f"{target}: no such file")
            continue
        if anchor and path.suffix == ".md" and anchor not in anchors(path.read_text()):
            broken.append(f"{target}: no heading with that anchor")
        if "::" in text and path.suffix == ".py" and not defines(path, text.split("::", 1)[1]):
            broken.append(f"{text}: no such test in {path.relative_to(ROOT)}")
    assert broken == [], f"{doc.relative_to(ROOT)}: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_named_in_backticks_exists(doc: Path) -> None:
    """``app/ledger/pool.py``, ``tests/x.py::test_y`` and ``app/ledger/drain.drain`` (module + name) must
    exist; a decision's **History** names what is gone and is not checked."""
    missing = []
    for part in PART.split(doc.read_text()):
        if part.lstrip().startswith("**History.**"):
            continue
        for path_text, name in NAMED_PATH.findall(part):
            shown = f"{path_text}::{name}" if name else path_text
            path = ROOT / path_text
            if not path.exists() and "." in path.name and path.suffix != ".py":
                module, _, name = path_text.rpartition(".")  # a module and a name in it
                path = ROOT / f"{module}.py"
            if not path.exists() or (name and path.suffix == ".py" and not defines(path, name)):
                missing.append(shown)
    assert missing == [], f"{doc.relative_to(ROOT)} names what does not exist: {missing}"
