"""Citations stay honest: every "<doc>.md §N[.M]" and "<doc>.md Qn" names a document of the repository and a
section or quirk it has, and the format documents keep the section numbers code comments rely on.

A bare "§N" or "Qn" in code names no document and is refused; in a Markdown file it means that file itself.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCANNED_DIRS = ("trendconv", "tests", "benchmarks", "docs")
SCANNED_FILES = ("README.md", "CHANGELOG.md", "setup.py", "pyproject.toml")
SUFFIXES = (".py", ".c", ".h", ".md", ".toml")
# This file's own tests hold deliberately broken citations.
NOT_SCANNED = ("tests/test_docs.py",)

# A web address ending in .md is not a repository document: matched first, then left alone.
DOCUMENT = re.compile(r"([a-z][a-z+.-]*://[^\s)]*?\.md|(?<![\w/.-])(?:\.{1,2}/|[\w-]+/)*[\w.-]+\.md)\b")
REFERENCE = re.compile(r"§\s?(\d+(?:\.\d+)*)|\bQ(\d+)\b")
HEADING = re.compile(r"#{1,6}\s+(\d+(?:\.\d+)*)\.?\s")
QUIRK = re.compile(r"- \*\*Q(\d+)\.")


def citation_problems(repo: Path) -> list[str]:
    """One line per citation that names no document, a document not in REPO, or a section or quirk it lacks."""
    repo = repo.resolve()
    problems = []
    for path in scanned_files(repo):
        relative = path.relative_to(repo).as_posix()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            problems += line_problems(repo, path, f"{relative}:{number}", line)
    return problems


def scanned_files(repo: Path) -> list[Path]:
    files = [repo / name for name in SCANNED_FILES if (repo / name).is_file()]
    for directory in SCANNED_DIRS:
        if (repo / directory).is_dir():
            files += [path for path in sorted((repo / directory).rglob("*")) if path.suffix in SUFFIXES]
    return [path for path in files if path.is_file() and path.relative_to(repo).as_posix() not in NOT_SCANNED]


def line_problems(repo: Path, path: Path, where: str, line: str) -> list[str]:
    documents, problems = cited_documents(repo, path, where, line)
    for match in REFERENCE.finditer(line):
        reference = f"§{match[1]}" if match[1] else f"Q{match[2]}"
        before = [document for position, document in documents if position < match.start()]
        if not before and path.suffix != ".md":
            problems.append(f"{where}: {reference} names no document (write e.g. 'docs/dump-format.md {reference}')")
            continue
        document = before[-1] if before else path  # a Markdown file's bare reference is to itself
        if document is not None and reference not in anchors(document):
            problems.append(f"{where}: {document.relative_to(repo).as_posix()} has no {reference}")
    return problems


def cited_documents(repo: Path, path: Path, where: str, line: str) -> tuple[list, list[str]]:
    """(position, resolved path) of each document the line names, None for a web address or a missing one."""
    documents, problems = [], []
    for match in DOCUMENT.finditer(line):
        resolved = None if "://" in match[1] else resolve(repo, path, match[1])
        if resolved is None and "://" not in match[1]:
            problems.append(f"{where}: {match[1]} is not in the repository")
        documents.append((match.start(), resolved))
    return documents, problems


def resolve(repo: Path, path: Path, written: str) -> Path | None:
    """A cited document: from the repository root, from the citing file's directory, or in docs/."""
    for base in (repo, path.parent, repo / "docs"):
        candidate = (base / written).resolve()
        if candidate.is_file() and candidate.is_relative_to(repo):
            return candidate
    return None


def anchors(document: Path) -> set[str]:
    """The §-numbers of a document's numbered headings and the Q-numbers of its quirk list."""
    found = set()
    for line in document.read_text(errors="replace").splitlines():
        if heading := HEADING.match(line):
            found.add(f"§{heading[1]}")
        elif quirk := QUIRK.match(line):
            found.add(f"Q{quirk[1]}")
    return found


def test_every_citation_in_the_repository_exists():
    problems = citation_problems(REPO)
    assert not problems, "citations to fix:\n" + "\n".join(problems)


def test_bad_citations_are_named_with_file_and_line(tmp_path):
    write(
        tmp_path / "docs" / "format.md", "# Format\n\n## 1. One\n\n### 1.2 Detail\n\n## 9. Quirks\n\n- **Q1. Odd.**\n"
    )
    write(tmp_path / "docs" / "notes.md", "See §1 and Q1.\nAs [format.md](format.md) §1.2 and Q1 say; not §3.\n")
    write(
        tmp_path / "trendconv" / "code.py",
        '"""Rules of docs/format.md §1-§1.2, quirk docs/format.md Q1."""\n'
        "# §1: which document?\n"
        "# docs/format.md §1.3 and docs/format.md Q2\n"
        "# spec/format-notes.md §4, then Q7\n"
        "# see https://example.org/x.md §5 (a web page, not a repository document)\n",
    )
    write(tmp_path / "tests" / "check.c", "/* (Q3) */\n")
    assert citation_problems(tmp_path) == [
        "trendconv/code.py:2: §1 names no document (write e.g. 'docs/dump-format.md §1')",
        "trendconv/code.py:3: docs/format.md has no §1.3",
        "trendconv/code.py:3: docs/format.md has no Q2",
        "trendconv/code.py:4: spec/format-notes.md is not in the repository",
        "tests/check.c:1: Q3 names no document (write e.g. 'docs/dump-format.md Q3')",
        "docs/notes.md:1: docs/notes.md has no §1",
        "docs/notes.md:1: docs/notes.md has no Q1",
        "docs/notes.md:2: docs/format.md has no §3",
    ]


def test_links_relative_to_the_citing_file_and_self_references_are_found(tmp_path):
    write(tmp_path / "README.md", "[guide](docs/guide.md#usage), [results](benchmarks/RESULTS.md)\n")
    write(tmp_path / "benchmarks" / "RESULTS.md", "numbers\n")
    write(tmp_path / "benchmarks" / "report.py", '(HERE / "RESULTS.md").write_text(text)  # RESULTS.md\n')
    write(tmp_path / "docs" / "guide.md", "# Guide\n\n## 2. Usage\n\nAs §2 says; [results](../benchmarks/RESULTS.md)\n")
    write(tmp_path / "tests" / "t.py", "# guide.md §2, docs/guide.md §2\n")
    assert citation_problems(tmp_path) == []


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# The numbering code comments cite; it follows the team's reference notes section for section.
DUMP_SECTIONS = [
    *("§0", "§1", "§1.1", "§1.2", "§1.3", "§1.4", "§1.5", "§1.6", "§2", "§2.1", "§2.2", "§2.3", "§2.4"),
    *("§3", "§3.1", "§3.2", "§3.3", "§3.4", "§3.5", "§4", "§5", "§5.1", "§5.2", "§6", "§7"),
    *("§8", "§8.1", "§8.2", "§8.3", "§8.4", "§8.5", "§8.6", "§8.7", "§9", "§10"),
]
MONITOR_SECTIONS = [
    *("§1", "§2", "§2.1", "§2.2", "§2.3", "§2.4", "§2.5", "§3", "§3.1", "§3.2", "§3.3"),
    *("§4", "§4.1", "§4.2", "§4.3", "§4.4", "§4.5", "§5", "§6", "§7", "§8", "§9", "§10", "§11", "§12", "§13", "§14"),
]
TREND_DB_SECTIONS = ["§1", "§2", "§3", "§4", "§4.1", "§4.2", "§5", "§6", "§7", "§7.1"]


def headings(name: str) -> list[str]:
    lines = (REPO / "docs" / name).read_text().splitlines()
    return [f"§{match[1]}" for line in lines if (match := HEADING.match(line))]


def quirks(name: str) -> list[str]:
    lines = (REPO / "docs" / name).read_text().splitlines()
    return [f"Q{match[1]}" for line in lines if (match := QUIRK.match(line))]


def test_the_format_documents_keep_their_section_numbers():
    assert headings("dump-format.md") == DUMP_SECTIONS
    assert headings("monitor-format.md") == MONITOR_SECTIONS
    assert headings("trend-db.md") == TREND_DB_SECTIONS


def test_the_quirk_lists_are_numbered_without_gaps():
    assert quirks("dump-format.md") == [f"Q{number}" for number in range(1, 36)]
    assert quirks("monitor-format.md") == [f"Q{number}" for number in range(1, 18)]
