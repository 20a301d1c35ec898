"""Reading cuobjdump -sass listings, for tools/sass_diff.py and
tools/sass_waits.py (module.sass from TestDumpReplayModule)."""

import re

FUNC = re.compile(r"\s*Function : (\S+)")
INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")


def functions(path):
    """The instructions of each function in a cuobjdump -sass listing, by
    function name, each with its runs of whitespace made one space."""
    out, cur = {}, None
    with open(path) as f:
        for line in f:
            m = FUNC.match(line)
            if m:
                cur = m.group(1)
                out[cur] = []
                continue
            m = INSN.search(line)
            if cur is not None and m:
                out[cur].append(re.sub(r"\s+", " ", m.group(1)))
    return out
