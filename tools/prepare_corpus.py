#!/usr/bin/env python3
"""Prepare the King James Bible corpus of the shipped models (models/).

The text comes from Debian's bible-kjv-text package (the KJV of 1611, whose
copyright has expired; the Debian packaging says so in its copyright file),
read with the package's own `bible` program, which decompresses its data
file. Standard library only; needs apt-get and dpkg-deb (Debian/Ubuntu).

    python3 tools/prepare_corpus.py --out .corpus

writes (the folder should be git-ignored; it travels to the GPU machine as a
carried path):

    .corpus/kjv-train.txt   chapters for training (1130 of 1189)
    .corpus/kjv-valid.txt   held-out chapters for choosing a checkpoint (29)
    .corpus/kjv-test.txt    held-out chapters for the reported perplexity (30)
    .corpus/manifest.json   package versions, sha256 of the files, counts

The split is by whole chapter, in Bible order: chapter number k (0-based over
the whole Bible) goes to test if k % 40 == 17, to valid if k % 40 == 37, and to
train otherwise. Each chapter is written as

    <Book> <chapter>
    <blank line>
    one verse per line (no verse numbers)

and chapters are separated by one blank line. The test split is shipped as
models/kjv-test.txt so that CI can score the shipped models.

--deb-dir DIR uses bible-kjv_*.deb and bible-kjv-text_*.deb already in DIR
instead of downloading them with `apt-get download`.
"""

import argparse
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

BOOKS = [
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth",
    "1 Samuel", "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra",
    "Nehemiah", "Esther", "Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon",
    "Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos",
    "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah",
    "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians",
    "2 Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians", "1 Thessalonians",
    "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon", "Hebrews", "James",
    "1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude", "Revelation",
]

SPLIT_PERIOD = 40
TEST_SLOT = 17
VALID_SLOT = 37


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def fetch_debs(tmp, deb_dir):
    if deb_dir is None:
        deb_dir = os.path.join(tmp, "debs")
        os.makedirs(deb_dir)
        subprocess.run(["apt-get", "download", "bible-kjv", "bible-kjv-text"], cwd=deb_dir, check=True)
    debs = {}
    for name in ("bible-kjv", "bible-kjv-text"):
        found = sorted(glob.glob(os.path.join(deb_dir, "%s_*.deb" % name)))
        if not found:
            sys.exit("no %s_*.deb in %s" % (name, deb_dir))
        debs[name] = found[-1]
    return debs


def read_bible(tmp, debs):
    root = os.path.join(tmp, "root")
    for deb in debs.values():
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    prog = os.path.join(root, "usr", "bin", "bible")
    lib = os.path.join(root, "usr", "lib")
    # -f turns pretty-printing off: one "Ge1:1 text" line per verse.
    out = subprocess.run([prog, "-f", "-p", lib, "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         stdin=subprocess.DEVNULL)
    return out.stdout.decode("ascii"), root


def chapters(raw):
    """[(book name, chapter number, [verse texts])] in Bible order."""
    out = []
    abbrevs = []
    cur = None
    for line in raw.splitlines():
        m = re.match(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$", line)
        if not m:
            sys.exit("unexpected line from bible: %r" % line[:80])
        ab, ch, vs, text = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4).strip()
        if not abbrevs or abbrevs[-1] != ab:
            abbrevs.append(ab)
        key = (len(abbrevs) - 1, ch)
        if cur is None or cur[0] != key:
            cur = (key, [])
            out.append(cur)
        if vs != len(cur[1]) + 1:
            sys.exit("verse %s%d:%d out of order" % (ab, ch, vs))
        cur[1].append(" ".join(text.split()))
    if len(abbrevs) != len(BOOKS):
        sys.exit("found %d books, want %d" % (len(abbrevs), len(BOOKS)))
    return [(BOOKS[b], ch, verses) for (b, ch), verses in out], abbrevs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (git-ignored)")
    ap.add_argument("--deb-dir", help="folder with bible-kjv_*.deb and bible-kjv-text_*.deb (default: apt-get download)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        debs = fetch_debs(tmp, args.deb_dir)
        raw, _ = read_bible(tmp, debs)
        versions = {}
        for name, deb in debs.items():
            v = subprocess.run(["dpkg-deb", "-f", deb, "Version"], check=True, capture_output=True, text=True)
            versions[name] = {"version": v.stdout.strip(), "file": os.path.basename(deb), "sha256": sha256(deb)}
    chs, abbrevs = chapters(raw)
    splits = {"train": [], "valid": [], "test": []}
    for k, (book, ch, verses) in enumerate(chs):
        text = "%s %d\n\n%s\n" % (book, ch, "\n".join(verses))
        slot = k % SPLIT_PERIOD
        name = "test" if slot == TEST_SLOT else "valid" if slot == VALID_SLOT else "train"
        splits[name].append((book, ch, text))
    manifest = {
        "source": "Debian package bible-kjv-text (King James Version, 1611; copyright expired), "
                  "decompressed with the bible program of package bible-kjv",
        "packages": versions,
        "rule": "whole chapters in Bible order; chapter k (0-based) -> test if k %% %d == %d, valid if "
                "k %% %d == %d, else train" % (SPLIT_PERIOD, TEST_SLOT, SPLIT_PERIOD, VALID_SLOT),
        "format": "'<Book> <chapter>', a blank line, one verse per line; chapters separated by a blank line",
        "chapters": len(chs),
        "verses": sum(len(v) for _, _, v in chs),
        "abbreviations": abbrevs,
        "files": {},
    }
    for name, items in splits.items():
        path = os.path.join(args.out, "kjv-%s.txt" % name)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(t for _, _, t in items))
        manifest["files"][os.path.basename(path)] = {
            "chapters": len(items),
            "bytes": os.path.getsize(path),
            "words": sum(len(t.split()) for _, _, t in items),
            "sha256": sha256(path),
            "first": "%s %d" % items[0][:2],
            "list": ["%s %d" % (b, c) for b, c, _ in items] if name != "train" else None,
        }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    for fn, info in manifest["files"].items():
        print("%-16s %4d chapters %8d bytes %7d words" % (fn, info["chapters"], info["bytes"], info["words"]))


if __name__ == "__main__":
    main()
