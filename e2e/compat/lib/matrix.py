#!/usr/bin/env python3
"""Builds the "Client matrix" table of docs/compatibility.md from run.sh result files.

run.sh with COMPAT_RESULTS_DIR=DIR leaves DIR/<client>-<target>.txt (the PASS/FAIL lines).
  matrix.py DIR                      print the markdown table
  matrix.py DIR --update FILE        replace the text between the client-matrix markers in FILE
                                     (appending a "Client matrix" section if there are none)
"""
import re
import sys
from pathlib import Path

BEGIN, END = "<!-- client-matrix:begin -->", "<!-- client-matrix:end -->"
CLIENTS = [("go", "go-nsq 1.1.0"), ("python", "pynsq 0.9.1"), ("node", "nsqjs 0.13.0")]
TARGETS = ["rustqueued", "nsqd"]
LINE = re.compile(r"^(PASS|FAIL) (\S+) \d+ms(?:: (.*))?$")


def load(results):
    """{(client, scenario): {target: (status, why)}} in first-seen scenario order."""
    table, order = {}, []
    for client, _ in CLIENTS:
        for target in TARGETS:
            f = results / ("%s-%s.txt" % (client, target))
            if not f.exists():
                continue
            for line in f.read_text().splitlines():
                m = LINE.match(line)
                if not m:
                    continue
                key = (client, m.group(2))
                if key not in table:
                    table[key] = {}
                    order.append(key)
                table[key][target] = (m.group(1), m.group(3) or "")
    return table, order


def render(results):
    table, order = load(results)
    out = ["| client | scenario | rustqueued | nsqd v1.3.0 |", "|---|---|---|---|"]
    names = dict(CLIENTS)
    totals = {t: [0, 0] for t in TARGETS}
    for client, scenario in order:
        cells = []
        for t in TARGETS:
            status, why = table[(client, scenario)].get(t, ("not run", ""))
            if status == "PASS":
                totals[t][0] += 1
            elif status == "FAIL":
                totals[t][1] += 1
            cells.append(status.lower() if status != "FAIL" else "**fail**")
        out.append("| %s | %s | %s |" % (names[client], scenario, " | ".join(cells)))
    out.append("")
    out.append("Totals: " + "; ".join("%s %d passed, %d failed" % (t, p, f)
                                      for t, (p, f) in totals.items()))
    return "\n".join(out)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    text = render(Path(sys.argv[1]))
    if len(sys.argv) == 4 and sys.argv[2] == "--update":
        doc = Path(sys.argv[3])
        old = doc.read_text() if doc.exists() else ""
        block = "%s\n%s\n%s" % (BEGIN, text, END)
        if BEGIN in old and END in old:
            new = old[:old.index(BEGIN)] + block + old[old.index(END) + len(END):]
        else:
            new = old.rstrip("\n") + ("\n\n" if old else "") + "## Client matrix\n\n" + block + "\n"
        doc.write_text(new)
    else:
        print(text)


if __name__ == "__main__":
    main()
