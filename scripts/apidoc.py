#!/usr/bin/env python3
"""Generate an API reference (docs/api.md from include/weft.h, docs/api-mpi.md from include/weft_mpi.h).

The header is the reference: every public function has its contract in the
comment above it. This script lays those comments out as Markdown, section by
section (the header's banner comments), each declaration with the comment
that documents it. `make docs` runs it; CI checks that docs/api.md is current.

Usage: apidoc.py [--check] [--settings SETTINGS_C] HEADER OUTPUT
  --check     exit 1 if OUTPUT is stale instead of writing it
  --settings  end the reference with a "Settings" section made from the
              table of every WEFT_* setting in SETTINGS_C (src/base/settings.c),
              the one place where a setting's default, range and meaning live
"""
import re
import sys

BANNER = re.compile(r"^/\* -{4,} \*/$")


def comment_text(lines):
    """The text of a /* ... */ block, without the comment markers."""
    out = []
    for ln in lines:
        ln = ln.strip()
        if ln.startswith("/*"):
            ln = ln[2:]
        if ln.endswith("*/"):
            ln = ln[:-2]
        ln = ln.strip()
        if ln.startswith("* "):
            ln = ln[2:]
        elif ln == "*":
            ln = ""
        out.append(ln)
    while out and not out[0]:
        out.pop(0)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


def to_markdown(text):
    """Comment prose to Markdown: keep lists and indented code as they are."""
    md, para = [], []
    for ln in text.split("\n"):
        if not ln.strip():
            if para:
                md.append(" ".join(para))
                para = []
            md.append("")
        elif ln.lstrip().startswith(("- ", "* ")) or ln.startswith("  "):
            if para:
                md.append(" ".join(para))
                para = []
            md.append(ln)
        else:
            para.append(ln.strip())
    if para:
        md.append(" ".join(para))
    return "\n".join(md).strip()


def parse(src):
    lines = src.split("\n")
    items = []  # (kind, payload): ("section", title) | ("doc", text, [decl lines])
    i, pending = 0, None
    while i < len(lines):
        ln = lines[i]
        s = ln.strip()
        if BANNER.match(s) and i + 2 < len(lines) and BANNER.match(lines[i + 2].strip()):
            title = lines[i + 1].strip().strip("/*").strip()
            items.append(("section", title))
            pending = None
            i += 3
            continue
        if s.startswith("/*") and not s.startswith("/* ---"):
            block = [ln]
            while not lines[i].rstrip().endswith("*/"):
                i += 1
                block.append(lines[i])
            pending = comment_text(block)
            i += 1
            continue
        if s.startswith(("WEFT_EXTERN", "typedef", "#define WEFT_")) and not s.startswith("#define WEFT_EXTERN"):
            decl = [ln]
            # A declaration ends at ';' (functions, simple typedefs) or at '} name;' (struct/enum).
            depth = ln.count("{") - ln.count("}")
            while (depth > 0 or not lines[i].rstrip().endswith((";", "}"))) and not s.startswith("#define"):
                i += 1
                decl.append(lines[i])
                depth += lines[i].count("{") - lines[i].count("}")
                if depth <= 0 and lines[i].rstrip().endswith(";"):
                    break
            items.append(("doc", pending, decl))
            pending = None
            i += 1
            continue
        if not s:
            pass
        elif not s.startswith("/*"):
            pending = None if not s.startswith("#") else pending
        i += 1
    return items


def render(items, header_name):
    out = [
        "# API reference",
        "",
        f"Generated from `{header_name}` by `scripts/apidoc.py` (`make docs`); the header is the",
        "source. Conventions that hold for every call (errors, deadlines, contexts) are in the",
        "header's opening comment, repeated in the first section below.",
        "",
    ]
    in_section = False
    for it in items:
        if it[0] == "section":
            out += [f"## {it[1]}", ""]
            in_section = True
            continue
        if not in_section:
            continue  # the include guard and version macros, said in Conventions
        _, text, decl = it
        code = "\n".join(d.replace("WEFT_EXTERN ", "") for d in decl).rstrip()
        name = re.search(r"(weft_\w+|WEFT_\w+)\s*(\(|;|\{| )", code)
        if name and code.lstrip().startswith(("int", "void", "bool", "ssize_t", "int64_t", "const", "unsigned")):
            out += [f"### `{name.group(1)}`", ""]
        out += ["```c", code, "```", ""]
        if text:
            out += [to_markdown(text), ""]
    return "\n".join(out).rstrip() + "\n"


ROW = re.compile(r'\{"(WEFT_\w+)",\s*(S_\w+),\s*(NO_CFG|CFG\((\w+)\)),\s*OUT\(\w+\),\s*'
                 r'([^,]+),\s*([^,]+),\s*([^,]+),\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\}', re.S)
KINDS = {"S_BOOL": "on/off", "S_COUNT": "count", "S_SIZE": "bytes (k, m, g)", "S_LEVEL": "0 to 2, or on/off", "S_MODE": "0 to 2, or on (the default)/off",
         "S_MS0": "ms (0: off)", "S_TEXT": "text"}


def number(text):
    t = text.strip().replace("UINT32_MAX", "2^32 - 1")
    for unit in ("KIB", "MIB", "GIB"):
        t = t.replace(f" * {unit}", f" {unit[0]}iB")
    return t


def settings_section(path):
    """The Settings section: one row per entry of settings.c's table."""
    with open(path) as f:
        src = f.read()
    rows = ROW.findall(src)
    if not rows:
        sys.exit(f"apidoc.py: no settings table in {path}")
    out = ["## Settings", "",
           "Generated from the table in `src/base/settings.c`, the one place where a setting is defined. "
           "Each setting is read when the part of weft that uses it starts: "
           "the `weft_config` field when `weft_configure` set it, else the environment variable when its "
           "value parses and lies in range, else the default.", "",
           "| variable | `weft_config` field | kind | default | what it does |", "|---|---|---|---|---|"]
    for env, kind, _, field, dflt, least, most, doc in rows:
        text = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', doc)).replace("\\", "\\")
        d = number(dflt)
        if kind == "S_BOOL" or (kind == "S_MODE" and d in ("0", "1")):
            d = "on" if d == "1" else "off"
        elif kind == "S_TEXT":
            d = "unset"
        elif kind == "S_COUNT" and d == "0":
            d = "see right"
        rng = "" if kind in ("S_BOOL", "S_TEXT", "S_LEVEL", "S_MS0", "S_MODE") else f" ({number(least)} to {number(most)})"
        out.append(f"| `{env}` | {'`' + field + '`' if field else 'environment only'} | {KINDS.get(kind, kind)}{rng} "
                   f"| {d} | {text} |")
    return "\n".join(out) + "\n"


def main():
    argv = sys.argv[1:]
    check = "--check" in argv
    argv = [a for a in argv if a != "--check"]
    settings = None
    if "--settings" in argv:
        i = argv.index("--settings")
        if i + 1 >= len(argv):
            print(__doc__, file=sys.stderr)
            return 2
        settings = argv[i + 1]
        del argv[i:i + 2]
    args = argv
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    header, output = args
    with open(header) as f:
        src = f.read()
    # The opening comment: the conventions.
    m = re.match(r"\s*/\*(.*?)\*/", src, re.S)
    intro = to_markdown(comment_text(("/*" + m.group(1) + "*/").split("\n"))) if m else ""
    doc = render(parse(src[m.end():] if m else src), header)
    version = re.search(r'#define WEFT_VERSION_STRING "([^"]+)"', src)
    intro += ("\n\nVersion: `WEFT_VERSION_STRING` (" + version.group(1) + "), with `WEFT_VERSION_MAJOR`, "
              "`WEFT_VERSION_MINOR` and `WEFT_VERSION_PATCH`.") if version else ""
    doc = doc.replace("\n## ", "\n## Conventions\n\n" + intro + "\n\n## ", 1)
    if settings:
        doc += "\n" + settings_section(settings)
    if check:
        try:
            with open(output) as f:
                if f.read() == doc:
                    return 0
        except FileNotFoundError:
            pass
        print(f"{output} is out of date: run make docs", file=sys.stderr)
        return 1
    with open(output, "w") as f:
        f.write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
