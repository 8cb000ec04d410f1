#!/usr/bin/env python3
"""Builds the judge's data from the package metadata on a developer's machine.

    python3 node/src/bus/judge/build_data.py

Writes, beside this file:
  lexicon.tsv  one package a line: name, ecosystem, its direct dependencies
               (comma-separated) and its one-line description, from
               ~/.cargo/registry/src/*/*/Cargo.toml, the Python distributions'
               METADATA files and npm's bundled package.json files.
  df.tsv       document frequencies of the judge's words (the same tokenizer
               as judge/text.rs: split on - _ / . ', light stemming, stop words
               dropped) over those packages' READMEs, manifests and metadata,
               keeping words seen in at least 3 documents; the first line is
               the number of documents.
The hand-written files (known.tsv, thesaurus.txt, ambiguous.txt) are not
touched. Nothing here runs at build or run time: the outputs are committed.
"""
import glob
import json
import os
import re
import sys
import tomllib
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
CARGO = os.path.expanduser("~/.cargo/registry/src/*/*/")
PYTHON = os.path.expanduser("~/.pyenv/versions/*/lib/python3*/site-packages/*.dist-info/METADATA")
NPM = "/usr/lib/node_modules/npm/node_modules"

STOP = set(open(os.path.join(HERE, "stop.txt")).read().split())


def stem(w):
    for suf in ("ing", "ed", "es", "s"):
        if len(w) > len(suf) + 3 and w.endswith(suf):
            return w[: -len(suf)]
    return w


def words(text):
    out = []
    for tok in re.findall(r"[a-z0-9][a-z0-9_.+/\-']*[a-z0-9+]|[a-z0-9]", text.lower()):
        tok = tok.replace("'s", "")
        numeric = re.fullmatch(r"[0-9.]+", tok) is not None
        parts = [tok] if numeric else re.split(r"[-_/.']", tok)
        for p in parts:
            if not p or p in STOP or re.fullmatch(r"[0-9.x]+", p):
                continue
            out.append(stem(p))
        if len(parts) > 1 and not numeric:
            out.append(tok)
    return out


def main():
    lex = {}
    docs = []

    def add(name, eco, deps, desc):
        n = name.lower().replace("_", "-")
        if not n:
            return
        e = lex.setdefault(n, {"eco": eco, "deps": set(), "desc": ""})
        e["deps"] |= {d.lower().replace("_", "-") for d in deps if d}
        desc = " ".join((desc or "").split())
        if len(desc) > len(e["desc"]):
            e["desc"] = desc[:200]

    for d in sorted(glob.glob(CARGO)):
        text = ""
        for f in ("README.md", "readme.md", "README"):
            if os.path.exists(d + f):
                text += open(d + f, errors="ignore").read()[:6000]
                break
        try:
            raw = open(d + "Cargo.toml", errors="ignore").read()
            text += raw[:3000]
            t = tomllib.loads(raw)
        except Exception:
            docs.append(text)
            continue
        docs.append(text)
        p = t.get("package", {})
        deps = []
        for sec in ("dependencies", "build-dependencies"):
            for k, v in t.get(sec, {}).items():
                deps.append(v.get("package", k) if isinstance(v, dict) else k)
        for tg in t.get("target", {}).values():
            for k, v in tg.get("dependencies", {}).items():
                deps.append(v.get("package", k) if isinstance(v, dict) else k)
        desc = p.get("description", "")
        add(p.get("name", ""), "rust", deps, desc if isinstance(desc, str) else "")
    for m in sorted(glob.glob(PYTHON)):
        raw = open(m, errors="ignore").read()
        docs.append(raw[:8000])
        name, desc, deps = None, "", []
        for line in raw.splitlines():
            if not line.strip():
                break
            if line.startswith("Name:"):
                name = line[5:].strip()
            elif line.startswith("Summary:"):
                desc = line[8:].strip()
            elif line.startswith("Requires-Dist:") and "extra ==" not in line:
                deps.append(re.split(r"[ ;<>=!\[(~]", line[14:].strip())[0])
        if name:
            add(name, "python", deps, desc)
    for pj in sorted(glob.glob(NPM + "/**/package.json", recursive=True)):
        try:
            t = json.load(open(pj))
        except Exception:
            continue
        if not isinstance(t, dict) or "name" not in t or "version" not in t:
            continue
        add(t["name"], "node", list(t.get("dependencies") or {}), t.get("description") or "")
    for p in sorted(glob.glob(NPM + "/*/package.json")) + sorted(glob.glob(NPM + "/*/README.md")):
        docs.append(open(p, errors="ignore").read()[:6000])

    with open(os.path.join(HERE, "lexicon.tsv"), "w") as f:
        for n in sorted(lex):
            e = lex[n]
            desc = e["desc"].replace("\t", " ")
            f.write(f"{n}\t{e['eco']}\t{','.join(sorted(e['deps']))}\t{desc}\n")
    df = Counter()
    for d in docs:
        df.update(set(words(d)))
    with open(os.path.join(HERE, "df.tsv"), "w") as f:
        f.write(f"{len(docs)}\n")
        for w, n in sorted(df.items()):
            if n >= 3 and len(w) <= 40:
                f.write(f"{w}\t{n}\n")
    print(f"{len(lex)} packages, {len(docs)} documents", file=sys.stderr)


if __name__ == "__main__":
    main()
