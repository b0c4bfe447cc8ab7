#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the relative links of the repository's Markdown files.

Fails (exit status 1, one line per problem) when a link in a tracked .md file
  - points at a file or directory that does not exist,
  - points outside the repository (../.. past the root, or an absolute path),
  - names an anchor (#heading) that the target Markdown file (or the file itself) does not have.
Links with a scheme (https:, mailto:, ...) are not checked. Code blocks and inline code are skipped.
Anchors follow GitHub's rule: lower case, punctuation dropped, spaces to '-', '-1', '-2' for repeats.

Usage: ops/ci/check_links.py [--root DIR] [FILE.md ...]     (default: every .md file git tracks)
       ops/ci/check_links.py --self-test
Exit status: 0 all links resolve, 1 broken links, 2 usage error.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target "title") and ![alt](target); the target may be wrapped in <...>.
INLINE_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def slug(text):
    """Returns GitHub's anchor for a heading text (before de-duplication)."""
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = text.replace("`", "").lower()
    out = []
    for ch in text:
        if ch.isalnum() or ch in "-_":
            out.append(ch)
        elif ch == " ":
            out.append("-")
    return "".join(out)


def markdown_lines(path):
    """Yields (line number, raw text, text without inline code) of the lines outside fenced code blocks."""
    in_fence = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = FENCE.match(line)
            if m:
                if in_fence is None:
                    in_fence = m.group(1)
                elif m.group(1) == in_fence:
                    in_fence = None
                continue
            if in_fence is None:
                yield number, line, INLINE_CODE.sub("", line)


def anchors_of(path, cache):
    """Returns the set of anchors a Markdown file defines (headings and <a name/id>)."""
    if path not in cache:
        found, seen = set(), {}
        for _, raw, line in markdown_lines(path):
            h = HEADING.match(raw)
            if h:
                base = slug(h.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
            found.update(HTML_ANCHOR.findall(line))
        cache[path] = found
    return cache[path]


def links_of(path):
    """Yields (line number, raw target) for every link in a Markdown file."""
    for number, _, line in markdown_lines(path):
        for m in INLINE_LINK.finditer(line):
            yield number, m.group(1)
        m = REFERENCE_DEF.match(line)
        if m:
            yield number, m.group(1)


def check_file(root, path, cache):
    """Returns the problems of one file as 'file:line: message' strings."""
    problems = []
    rel = os.path.relpath(path, root)
    for number, raw in links_of(path):
        target = raw[1:-1] if raw.startswith("<") and raw.endswith(">") else raw
        if not target or SCHEME.match(target):
            continue
        where = f"{rel}:{number}"
        file_part, _, anchor = target.partition("#")
        file_part = urllib.parse.unquote(file_part)
        anchor = urllib.parse.unquote(anchor)
        if file_part.startswith("/"):
            problems.append(f"{where}: absolute link '{target}' (use a path relative to the file)")
            continue
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if os.path.relpath(resolved, root).startswith(".."):
            problems.append(f"{where}: link '{target}' points outside the repository")
            continue
        if not os.path.exists(resolved):
            problems.append(f"{where}: link '{target}': {os.path.relpath(resolved, root)} does not exist")
            continue
        if anchor and resolved.endswith(".md") and os.path.isfile(resolved):
            if anchor.lower() not in anchors_of(resolved, cache):
                problems.append(f"{where}: link '{target}': no heading with anchor '#{anchor}' in "
                                f"{os.path.relpath(resolved, root)}")
    return problems


def tracked_markdown(root):
    """Returns the .md files git tracks under root (every .md file when root is not a git checkout)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", "*.md"], check=True,
                             capture_output=True).stdout.decode()
        return [os.path.join(root, p) for p in out.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        found = []
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith(".") and x != "build"]
            found += [os.path.join(d, f) for f in files if f.endswith(".md")]
        return sorted(found)


def check(root, files):
    cache = {}
    problems = []
    for path in files:
        problems += check_file(root, path, cache)
    return problems


def self_test():
    """Checks the checker on a small tree with one good and one bad link of every kind."""
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "repo")
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "docs", "guide.md"), "w", encoding="utf-8") as f:
            f.write("# Guide\n\n## Step one — setup, then run\n\n## Step one — setup, then run\n\n"
                    "### The `prsgd head` command\n\n<a name=\"custom\"></a>\n")
        with open(os.path.join(root, "README.md"), "w", encoding="utf-8") as f:
            f.write("# Top\n\n"
                    "[ok](docs/guide.md) [ok](docs/guide.md#step-one--setup-then-run) "
                    "[ok](docs/guide.md#step-one--setup-then-run-1) [ok](docs/guide.md#custom) [ok](#top) "
                    "[ok](docs/guide.md#the-prsgd-head-command) "
                    "[ok](docs/) [ok](https://example.com/x) [ok](<docs/guide.md>)\n"
                    "`[not a link](missing.md)`\n"
                    "```\n[not a link](missing.md)\n```\n"
                    "[bad1](missing.md)\n"
                    "[bad2](docs/guide.md#nope)\n"
                    "[bad3](../outside.md)\n"
                    "[bad4](/etc/passwd)\n"
                    "[bad5](#nowhere)\n"
                    "[ref]: docs/gone.md\n")
        with open(os.path.join(tmp, "outside.md"), "w", encoding="utf-8") as f:
            f.write("# Outside\n")
        got = check(root, [os.path.join(root, "README.md"), os.path.join(root, "docs", "guide.md")])
        want_lines = [f"README.md:{n}:" for n in range(8, 14)]
        ok = len(got) == len(want_lines) and all(g.startswith(w) for g, w in zip(got, want_lines))
        if not ok:
            print("check_links self-test FAILED; problems found:", *got, sep="\n  ", file=sys.stderr)
            return 1
        print(f"check_links self-test: OK ({len(got)} broken links found as expected)")
        return 0


class one_line_parser(argparse.ArgumentParser):
    """Reports a usage error as one line and exit status 2."""

    def error(self, message):
        print(f"check_links: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def main():
    parser = one_line_parser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="repository root (default: the checkout this script is in)")
    parser.add_argument("--self-test", action="store_true", help="check the checker and exit")
    parser.add_argument("files", nargs="*", help="Markdown files to check (default: every tracked .md)")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    root = os.path.abspath(args.root or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    if not os.path.isdir(root):
        print(f"check_links: --root {root} is not a directory", file=sys.stderr)
        return 2
    files = [os.path.abspath(f) for f in args.files] or tracked_markdown(root)
    for f in files:
        if not os.path.isfile(f):
            print(f"check_links: no such file: {f}", file=sys.stderr)
            return 2
    problems = check(root, files)
    for p in problems:
        print(p)
    if problems:
        print(f"check_links: {len(problems)} broken link(s) in {len(files)} Markdown files", file=sys.stderr)
        return 1
    print(f"check_links: {len(files)} Markdown files, all relative links resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
