#!/usr/bin/env python3
"""Builds the judge's data tables from pinned inputs only.

    python3 judge/data/generate.py           # rewrites df.tsv and lexicon.tsv
    python3 judge/data/generate.py --check   # exits 1 if they differ from what it computes

The inputs are two files of Debian 12 ("bookworm", 12.15) named by their
SHA-256 (SOURCES.md): its English package descriptions and its amd64
package list. They are fetched by hash from deb.debian.org (then
archive.debian.org) into $AGENTMESH_JUDGE_INPUTS (default
~/.cache/agentmesh-judge-inputs) and checked against the hash before use;
nothing else of the machine is read. Python's standard library only.

Writes, beside this file:
  df.tsv       document frequencies of the judge's words (the tokenizer of
               judge/src/text.rs: split on - _ / . ', light stemming, stop
               words dropped) over the packages' descriptions, one document
               a package; words in at least 3 documents; the first line is
               the number of documents.
  lexicon.tsv  the packages of three ecosystems as Debian ships them:
               crates (librust-NAME-dev), Python (python3-NAME) and Node
               (node-NAME): name, ecosystem, direct dependencies of the same
               ecosystem (comma-separated), one-line description.
The hand-written files (known.tsv, thesaurus.txt, ambiguous.txt, stop.txt)
are inputs, not outputs.
"""
import hashlib
import lzma
import os
import re
import sys
import urllib.request
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = "dists/bookworm/main"
INPUTS = [
    ("Translation-en.xz", f"{BASE}/i18n/by-hash/SHA256/",
     "a3d4a0bfd8e9242810b0885eda7c1a6e05dac15b333ddbaab03ba56f2dfa4bf0"),
    ("Packages.xz", f"{BASE}/binary-amd64/by-hash/SHA256/",
     "9e0b5aabb2465b3d2e7a7fe27f9913846277833f7a2826e7767acccff5b588c5"),
]
MIRRORS = ["http://deb.debian.org/debian/", "http://archive.debian.org/debian/"]
STOP = set(open(os.path.join(HERE, "stop.txt")).read().split())


def fetch(name, path, sha):
    cache = os.environ.get("AGENTMESH_JUDGE_INPUTS") or os.path.expanduser(
        "~/.cache/agentmesh-judge-inputs")
    os.makedirs(cache, exist_ok=True)
    local = os.path.join(cache, f"{sha}-{name}")
    if os.path.exists(local):
        data = open(local, "rb").read()
        if hashlib.sha256(data).hexdigest() == sha:
            return data
    errors = []
    for m in MIRRORS:
        try:
            data = urllib.request.urlopen(m + path + sha, timeout=120).read()
        except Exception as e:  # noqa: BLE001 - the next mirror may have it
            errors.append(f"{m}: {e}")
            continue
        if hashlib.sha256(data).hexdigest() != sha:
            errors.append(f"{m}: hash differs")
            continue
        with open(local + ".part", "wb") as f:
            f.write(data)
        os.replace(local + ".part", local)
        return data
    sys.exit(f"could not fetch {name} ({sha}): " + "; ".join(errors))


def stanzas(text):
    for block in text.split("\n\n"):
        fields, key = {}, None
        for line in block.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line
            elif ":" in line:
                key, _, v = line.partition(":")
                fields[key] = v.strip()
        if fields:
            yield fields


def final_e(s):
    return s[:-1] if s.endswith("e") and len(s) - 1 > 3 else s


def stem(w):
    s = w
    for suf in ("ing", "ed", "es", "s"):
        if len(w) > len(suf) + 3 and w.endswith(suf):
            s = w[: -len(suf)]
            break
    return final_e(s)


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


ECOSYSTEMS = [
    ("rust", re.compile(r"^librust-([a-z0-9][a-z0-9-]*?)(?:-[0-9][0-9.]*)?-dev$")),
    ("python", re.compile(r"^python3-([a-z0-9][a-z0-9.-]*)$")),
    ("node", re.compile(r"^node-([a-z0-9][a-z0-9.-]*)$")),
]


def ecosystem_name(pkg, feature_ok=False):
    if "+" in pkg:  # a crate's feature package (librust-tokio+full-dev)
        if not feature_ok:
            return None
        pkg = re.sub(r"\+[^-]*", "", pkg)
    for eco, pat in ECOSYSTEMS:
        m = pat.match(pkg)
        if m:
            return eco, m.group(1)
    return None


def compute():
    trans = lzma.decompress(fetch(*INPUTS[0])).decode("utf-8", "replace")
    packages = lzma.decompress(fetch(*INPUTS[1])).decode("utf-8", "replace")
    df = Counter()
    docs = 0
    for s in stanzas(trans):
        d = s.get("Description-en")
        if d:
            docs += 1
            df.update(set(words(d.replace("\n .\n", "\n"))))
    lex = {}
    for s in stanzas(packages):
        named = ecosystem_name(s.get("Package", ""))
        if not named:
            continue
        eco, name = named
        deps = set()
        for alt in re.split(r"[,|]", s.get("Depends", "")):
            dep = ecosystem_name(alt.strip().split(" ")[0].split(":")[0], True)
            if dep and dep[0] == eco and dep[1] != name:
                deps.add(dep[1])
        desc = " ".join(s.get("Description", "").split("\n")[0].split())[:200]
        e = lex.setdefault((name, eco), (set(), desc))
        e[0].update(deps)
    df_text = f"{docs}\n" + "".join(
        f"{w}\t{n}\n" for w, n in sorted(df.items()) if n >= 3 and len(w) <= 40)
    seen = {}
    for (name, eco) in sorted(lex):
        seen.setdefault(name, eco)  # a name in two ecosystems: the first
    lex_text = "".join(
        f"{name}\t{eco}\t{','.join(sorted(lex[(name, eco)][0]))}\t{lex[(name, eco)][1]}\n"
        for name, eco in sorted(seen.items()))
    return {"df.tsv": df_text, "lexicon.tsv": lex_text}


def main():
    out = compute()
    if "--check" in sys.argv:
        stale = [n for n, t in out.items()
                 if not os.path.exists(os.path.join(HERE, n))
                 or open(os.path.join(HERE, n)).read() != t]
        if stale:
            sys.exit(f"judge/data: {', '.join(stale)} differ from what generate.py computes "
                     "from the pinned inputs; run python3 judge/data/generate.py and commit")
        print("judge/data: df.tsv and lexicon.tsv are what the pinned inputs give")
        return
    for n, t in out.items():
        with open(os.path.join(HERE, n), "w") as f:
            f.write(t)
    print(f"{out['df.tsv'].count(chr(10)) - 1} words, "
          f"{out['lexicon.tsv'].count(chr(10))} packages", file=sys.stderr)


if __name__ == "__main__":
    main()
