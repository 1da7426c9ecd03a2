"""The JSON objects among a text file's lines (the peers' and benches' JSON-lines output, where
other lines are logs): every line that starts with `{` and parses, in order. The summaries in
scripts/gpu.sh read their files through it (`sys.path.insert(0, "scripts")`: they run from the
repository root)."""
import json


def rows(path, must=None):
    """The parsed lines of `path` that start with `{` (and contain `must`, if given); a line
    that does not parse is skipped. A missing file raises, as open() does."""
    out = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{") and (must is None or must in line):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out
