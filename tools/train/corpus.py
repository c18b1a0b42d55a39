"""Corpus: Python source files of this machine's interpreter, permissively licensed only.

* the standard library (PSF licence) of the running python3 (`sysconfig` `stdlib`), without
  `site-packages`;
* the installed distributions whose metadata states MIT, BSD or Apache-2.0 (License-Expression,
  License or classifiers; a licence string that also names anything else — GPL, MPL, PSF, CNRI,
  an `AND` — is refused), each
  capped at `PER_DIST_BYTES`, in name order.

Files are decoded as strict UTF-8 (others skipped), filtered against generated data (very long
lines, huge files), deduplicated by SHA-256 of their content, and split by file: a file is
held out when the first 8 hex digits of its hash are ≡ 0 (mod HELDOUT_MOD). Everything is in a
fixed order, so the corpus is a function of the machine's installed files alone.
"""
import hashlib
import importlib.metadata as md
import os
import re
import sysconfig

PER_DIST_BYTES = 6_000_000
TOTAL_BYTES = 160_000_000
MAX_FILE_BYTES = 300_000
MAX_MEAN_LINE = 120
HELDOUT_MOD = 50

PERMISSIVE = re.compile(r"\b(MIT|BSD|Apache)", re.I)
REFUSED = re.compile(r"GPL|MPL|Mozilla|CNRI|PSF|Python Software|ISC|HPND|proprietary|Commercial|NVIDIA|CUDA|Unknown|\bAND\b", re.I)


def licence_of(dist):
    """The licence text the distribution's metadata states (expression, field, classifiers)."""
    m = dist.metadata
    parts = []
    for key in ("License-Expression", "License"):
        v = m.get(key)
        if v and len(v) < 200:  # some put the whole licence text in `License`
            parts.append(v.strip())
    parts += [c.split("::")[-1].strip() for c in (m.get_all("Classifier") or []) if c.startswith("License ::")]
    return "; ".join(dict.fromkeys(parts)) or "unknown"


def permissive(licence):
    return bool(PERMISSIVE.search(licence)) and not REFUSED.search(licence)


def good_text(raw):
    if len(raw) > MAX_FILE_BYTES or len(raw) < 64:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\x00" in text:
        return None
    lines = text.count("\n") + 1
    if len(text) / lines > MAX_MEAN_LINE:
        return None
    return text


def stdlib_files():
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("site-packages", "dist-packages", "__pycache__"))
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
    return root, out


def collect():
    """Returns (docs, sources): docs = [(relpath, text, heldout)], sources = [(name, licence, n_files, bytes)]."""
    seen = set()
    docs = []
    sources = []
    total = 0

    def add(name, paths, cap):
        nonlocal total
        n, b = 0, 0
        for p in paths:
            if b >= cap or total >= TOTAL_BYTES:
                break
            try:
                with open(p, "rb") as f:
                    raw = f.read(MAX_FILE_BYTES + 1)
            except OSError:
                continue
            text = good_text(raw)
            if text is None:
                continue
            h = hashlib.sha256(raw).hexdigest()
            if h in seen:
                continue
            seen.add(h)
            docs.append((f"{name}/{os.path.basename(p)}", text, int(h[:8], 16) % HELDOUT_MOD == 0))
            n += 1
            b += len(raw)
            total += len(raw)
        return n, b

    root, files = stdlib_files()
    n, b = add("stdlib", files, TOTAL_BYTES)
    sources.append(("python-stdlib " + os.path.basename(root), "PSF-2.0", n, b))
    dists = {}
    for d in md.distributions():
        name = (d.metadata.get("Name") or "").lower()
        if name and name not in dists:
            dists[name] = d
    for name in sorted(dists):
        d = dists[name]
        lic = licence_of(d)
        if not permissive(lic):
            continue
        paths = sorted(str(d.locate_file(f)) for f in (d.files or []) if str(f).endswith(".py"))
        n, b = add(name, paths, PER_DIST_BYTES)
        if n:
            sources.append((f"{name} {d.version}", lic, n, b))
    return docs, sources


if __name__ == "__main__":
    docs, sources = collect()
    for s in sources:
        print(*s, sep="\t")
    print(len(docs), "files,", sum(len(t) for _, t, _ in docs), "chars,", sum(h for *_, h in docs), "held out")
