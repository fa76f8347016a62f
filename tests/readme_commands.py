"""README.md's command blocks, read the same way by tests/test_readme.py and by .ci/run.

Every fenced ```sh and ```python block of the README is a command block. A ```sh block holds one
command per line (a trailing backslash continues it). The two commands of "Set up" install the
package: .ci/run runs them as written in a fresh virtual environment
(`python3 tests/readme_commands.py install` and `... test` print them); test_readme.py runs every
other block as written. A command whose line ends in `# GPU` needs a GPU build and a GPU.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
SETUP_SECTION = "Set up"
GPU_MARK = re.compile(r"#\s*GPU\s*$")
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    lang: str        # "sh" or "python"
    text: str        # the block's lines, as written
    line: int        # README line of the opening fence (1-based)
    section: str     # the "## " heading above it

    @property
    def id(self) -> str:
        return f"{self.section.lower().replace(' ', '-')}:{self.line}"

    def commands(self) -> list[str]:
        """An sh block's commands: its lines, continuations joined, blank lines dropped."""
        out, current = [], ""
        for raw in self.text.splitlines():
            current += raw
            if current.endswith("\\"):
                current = current[:-1] + " "
                continue
            if current.strip():
                out.append(current.strip())
            current = ""
        if current.strip():
            out.append(current.strip())
        return out


def blocks(readme: Path = README) -> list[Block]:
    """Every fenced block of the README (a fence without a language is an error: say sh or python)."""
    found: list[Block] = []
    section, lang, start, body = "", None, 0, []
    for n, line in enumerate(readme.read_text(encoding="utf-8").splitlines(), 1):
        fence = _FENCE.match(line)
        if lang is None and line.startswith("## "):
            section = line[3:].strip()
        elif lang is None and fence:
            lang, start, body = fence.group(1), n, []
            if lang not in ("sh", "python"):
                raise ValueError(f"README.md:{n}: a code block must be ```sh or ```python, got {lang!r}")
        elif lang is not None and line.startswith("```"):
            found.append(Block(lang, "\n".join(body), start, section))
            lang = None
        elif lang is not None:
            body.append(line)
    if lang is not None:
        raise ValueError(f"README.md:{start}: code block never closed")
    return found


def setup_commands(readme: Path = README) -> dict[str, str]:
    """The "Set up" section's two commands: {"install": ..., "test": ...}."""
    cmds = [c for b in blocks(readme) if b.section == SETUP_SECTION for c in b.commands()]
    if len(cmds) != 2 or not cmds[0].startswith("pip install . ") or not cmds[1].startswith('pip install ".[test]"'):
        raise ValueError(f"README.md's {SETUP_SECTION!r} must hold two commands, `pip install . && ...` "
                         f"and `pip install \".[test]\" && ...`; found {cmds}")
    return {"install": cmds[0], "test": cmds[1]}


if __name__ == "__main__":
    print(setup_commands()[sys.argv[1]])
