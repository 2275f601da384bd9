#!/usr/bin/env python3
"""splice.py FILE NAME PART [--check]: replace the text between the markers
<!-- NAME:begin --> and <!-- NAME:end --> in FILE with the contents of PART.
With --check, change nothing and exit 1 when FILE is not up to date."""
import sys

path, name, part = sys.argv[1:4]
check = "--check" in sys.argv[4:]
text = open(path).read()
begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
if begin not in text or end not in text:
    sys.exit(f"{path}: markers {begin} ... {end} not found")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
new = head + begin + "\n" + open(part).read() + end + tail
if check:
    sys.exit(0 if new == text else 1)
open(path, "w").write(new)
