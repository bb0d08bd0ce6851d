#!/usr/bin/python3
"""Verify a gpusnap bundle's DSSE envelope and in-toto statement without gpusnap.

usage: verify_dsse.py BAG PUBKEY.pem

The signature is checked by securesystemslib (Debian's python3-securesystemslib,
with python3-cryptography for ed25519) over DSSE's pre-authentication encoding;
Debian's securesystemslib 0.26 predates its DSSE module, so the encoding is
built here as the DSSE specification writes it. Every payload file under
BAG/data must be a subject of the statement with its SHA-256, and every
subject a file. Exit 0 verified, 1 not.
"""
import base64
import hashlib
import json
import os
import sys

from cryptography.hazmat.primitives import serialization
from securesystemslib.signer import Signature, SSlibKey

PAYLOAD_TYPE = "application/vnd.in-toto+json"


def pae(payload_type: bytes, body: bytes) -> bytes:
    return b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type, len(body), body)


def fail(msg):
    print("FAILED: " + msg)
    sys.exit(1)


def main():
    bag, pem = sys.argv[1], sys.argv[2]
    with open(pem, "rb") as f:
        pub = serialization.load_pem_public_key(f.read()).public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    keyid = hashlib.sha256(pub).hexdigest()
    key = SSlibKey(keyid, "ed25519", "ed25519", {"public": pub.hex()})
    with open(os.path.join(bag, "statement.dsse.json")) as f:
        env = json.load(f)
    if env.get("payloadType") != PAYLOAD_TYPE:
        fail("payload type %r" % env.get("payloadType"))
    body = base64.b64decode(env["payload"], validate=True)
    sigs = [s for s in env.get("signatures", []) if s.get("keyid") == keyid]
    if not sigs:
        fail("no signature by key %s" % keyid)
    try:
        key.verify_signature(Signature(keyid, base64.b64decode(sigs[0]["sig"]).hex()),
                             pae(PAYLOAD_TYPE.encode(), body))
    except Exception as e:  # securesystemslib raises its own error types
        fail("signature: %s" % e)
    st = json.loads(body)
    if st.get("_type") != "https://in-toto.io/Statement/v1":
        fail("statement type %r" % st.get("_type"))
    subjects = {s["name"]: s["digest"]["sha256"] for s in st["subject"]}
    files = set()
    for top, _, names in os.walk(os.path.join(bag, "data")):
        for n in names:
            files.add(os.path.relpath(os.path.join(top, n), bag))
    for name in sorted(files | set(subjects)):
        if name not in subjects:
            fail("%s is not a subject of the statement" % name)
        if name not in files:
            fail("subject %s is missing" % name)
        with open(os.path.join(bag, name), "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != subjects[name]:
                fail("%s does not match its subject" % name)
    print("OK: signed by %s, %d subjects, predicate %s" % (keyid, len(subjects), st["predicateType"]))


main()
