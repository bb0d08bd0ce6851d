#!/usr/bin/python3
"""Validate a BagIt bag as RFC 8493 defines one, independently of gpusnap.

usage: bagit_validate.py BAG

Checks (RFC 8493 sections 2.1.1-2.2.3, 3): bagit.txt declares a version and
UTF-8; data/ exists; every payload manifest (manifest-ALG.txt) lists every
payload file, and each listed file exists with that hash; every tag manifest
entry exists with its hash and is not a payload file; Payload-Oxum, where
bag-info.txt has one, matches the payload's octets and file count; no path
leaves the bag. Exit 0 valid, 1 not.
"""
import hashlib
import os
import re
import sys


def fail(msg):
    print("INVALID: " + msg)
    sys.exit(1)


def decode(path):
    # 2.1.3: only CR, LF and % are percent-encoded in manifest paths.
    return re.sub(r"%(0[AaDd]|25)", lambda m: bytes.fromhex(m.group(1)).decode(), path)


def read_manifest(bag, name):
    alg = re.fullmatch(r"(?:tag)?manifest-(\w+)\.txt", name).group(1)
    entries = {}
    with open(os.path.join(bag, name), encoding="utf-8") as f:
        for n, line in enumerate(f.read().splitlines(), 1):
            m = re.fullmatch(r"([0-9a-fA-F]+)[ \t]+(.+)", line)
            if not m:
                fail("%s line %d is not CHECKSUM FILEPATH" % (name, n))
            path = decode(m.group(2))
            if path.startswith("/") or ".." in path.split("/"):
                fail("%s names %r outside the bag" % (name, path))
            entries[path] = m.group(1).lower()
    return alg, entries


def digest(alg, path):
    h = hashlib.new(alg)
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def main():
    bag = sys.argv[1]
    try:
        with open(os.path.join(bag, "bagit.txt"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail("bagit.txt: %s" % e)
    if len(lines) != 2 or not re.fullmatch(r"BagIt-Version: \d+\.\d+", lines[0]) or lines[1] != "Tag-File-Character-Encoding: UTF-8":
        fail("bagit.txt does not declare a version and UTF-8: %r" % lines)
    if not os.path.isdir(os.path.join(bag, "data")):
        fail("no data/ directory")
    payload = set()
    for top, dirs, names in os.walk(os.path.join(bag, "data")):
        for n in names:
            p = os.path.join(top, n)
            if os.path.islink(p):
                fail("%s is a symbolic link" % p)
            payload.add(os.path.relpath(p, bag))
    tops = os.listdir(bag)
    manifests = [n for n in tops if re.fullmatch(r"manifest-\w+\.txt", n)]
    if not manifests:
        fail("no payload manifest")
    for name in manifests:
        alg, entries = read_manifest(bag, name)
        for path in sorted(payload - set(entries)):
            fail("%s is not listed in %s" % (path, name))
        for path, want in sorted(entries.items()):
            full = os.path.join(bag, path)
            if not os.path.isfile(full):
                fail("%s lists %s, which is missing" % (name, path))
            if digest(alg, full) != want:
                fail("%s: %s checksum mismatch" % (name, path))
    for name in (n for n in tops if re.fullmatch(r"tagmanifest-\w+\.txt", n)):
        alg, entries = read_manifest(bag, name)
        for path, want in sorted(entries.items()):
            if path.startswith("data/"):
                fail("%s lists payload file %s" % (name, path))
            full = os.path.join(bag, path)
            if not os.path.isfile(full) or digest(alg, full) != want:
                fail("%s: %s missing or checksum mismatch" % (name, path))
    info = os.path.join(bag, "bag-info.txt")
    if os.path.exists(info):
        with open(info, encoding="utf-8") as f:
            for line in f.read().splitlines():
                if line.startswith("Payload-Oxum:"):
                    octets, count = line.split(":", 1)[1].strip().split(".")
                    have = sum(os.path.getsize(os.path.join(bag, p)) for p in payload)
                    if (int(octets), int(count)) != (have, len(payload)):
                        fail("Payload-Oxum %s.%s, the payload is %d.%d" % (octets, count, have, len(payload)))
    print("VALID: %d payload files" % len(payload))


main()
