"""Held-out prompts: the first function signatures with a one-line docstring in the held-out
files (stage 1's heldout.jsonl, file order), as `def …:\n    \"\"\"…\"\"\"\n`.

Usage: heldout_prompts.py HELDOUT_JSONL N > prompts.json
"""
import json
import re
import sys

PATTERN = re.compile(r'^(def [A-Za-z_]\w*\([^)\n]*\)(?: -> [^:\n]+)?:\n    """[^"\n]{8,100}"""\n)', re.M)


def main():
    path, n = sys.argv[1], int(sys.argv[2])
    out, seen = [], set()
    for line in open(path):
        doc = json.loads(line)
        for m in PATTERN.finditer(doc["text"]):
            name = m.group(1).split("(")[0]
            if name in seen:
                continue
            seen.add(name)
            out.append({"file": doc["name"], "prompt": m.group(1)})
            break  # one per file
        if len(out) == n:
            break
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
