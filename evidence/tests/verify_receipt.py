#!/usr/bin/env python3
"""Independent verifier for eval's signed evidence, written from docs/custody.md alone.

usage: verify_receipt.py PUBLIC_KEY FILE [REPORT_JSON]

FILE is an inclusion receipt (eval-receipt), a consistency proof (eval-consistency) or a report
attestation (DSSE envelope). Exits 0 and prints "ok: ..." when it verifies, 1 otherwise.
Needs the standard library and `cryptography` (for Ed25519).
"""
import base64, hashlib, json, struct, sys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def sha(b):
    return hashlib.sha256(b).digest()


def node(left, right):
    return sha(b"\x01" + left + right)


def digest(text):
    assert text.startswith("sha256:"), text
    return bytes.fromhex(text[len("sha256:"):])


def parse_key(text):
    name, kid, b64 = text.strip().split("+", 2)  # base64 may itself contain '+'
    raw = base64.b64decode(b64, validate=True)
    assert len(raw) == 33 and raw[0] == 0x01, "not an Ed25519 key"
    assert sha(name.encode() + b"\n" + raw)[:4].hex() == kid, "key id does not match the key"
    return name, bytes.fromhex(kid), Ed25519PublicKey.from_public_bytes(raw[1:])


def verify_note(note, key):
    """C2SP signed note: text, blank line, '— name base64(keyid4 || sig64)' lines."""
    name, kid, pub = key
    cut = note.rindex("\n\n")
    text, sigs = note[: cut + 1], note[cut + 2:]
    signed = False
    for line in sigs.rstrip("\n").split("\n"):
        assert line.startswith("\u2014 "), "bad signature line"
        signer, b64 = line[2:].split(" ", 1)
        blob = base64.b64decode(b64, validate=True)
        if signer == name and blob[:4] == kid:
            pub.verify(blob[4:], text.encode())  # raises InvalidSignature
            signed = True
    assert signed, "the checkpoint is not signed by this key"
    origin, size, root = text.rstrip("\n").split("\n")[:3]
    assert size.isdigit() and (size == "0" or not size.startswith("0"))
    return origin, int(size), base64.b64decode(root, validate=True)


def verify_inclusion(index, size, leaf, proof, root):  # RFC 9162 2.1.3.2
    assert index < size
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        assert sn > 0, "proof too long"
        if fn & 1 or fn == sn:
            r = node(p, r)
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node(r, p)
        fn, sn = fn >> 1, sn >> 1
    assert sn == 0 and r == root, "inclusion proof does not lead to the root"


def verify_consistency(m, n, old, new, proof):  # RFC 9162 2.1.4.2
    assert m <= n, "the log rewound"
    if m == n:
        assert not proof and old == new
        return
    if m == 0:
        assert not proof
        return
    path = ([old] if m & (m - 1) == 0 else []) + proof
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        assert sn > 0, "proof too long"
        if fn & 1 or fn == sn:
            fr, sr = node(c, fr), node(c, sr)
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node(sr, c)
        fn, sn = fn >> 1, sn >> 1
    assert sn == 0 and fr == old and sr == new, "consistency proof does not hold"


def entry_bytes(e):  # exactly the bytes of the chain hash
    payload, kind = base64.b64decode(e["payload_base64"], validate=True), e["kind"].encode()
    return (digest(e["prev"]) + struct.pack(">QI", e["seq"], len(kind)) + kind
            + struct.pack(">Q", len(payload)) + payload)


def main(key_text, path, report=None):
    key = parse_key(key_text)
    doc = json.load(open(path, encoding="utf-8"))
    if doc.get("format") == "eval-receipt":
        assert doc["v"] == 1
        e = doc["entry"]
        raw = entry_bytes(e)
        assert sha(raw) == digest(e["hash"]), "entry hash does not match its bytes"
        assert doc["leaf_index"] == e["seq"] - 1
        origin, size, root = verify_note(doc["checkpoint"], key)
        assert not origin.startswith("eval-smoke/"), f"{origin}: a smoke run's log, never evidence"
        assert size == doc["tree_size"]
        proof = [digest(p) for p in doc["inclusion_proof"]]
        verify_inclusion(doc["leaf_index"], size, sha(b"\x00" + raw), proof, root)
        return f"entry {e['seq']} ({e['kind']}) is in {origin} at tree size {size}"
    if doc.get("format") == "eval-consistency":
        assert doc["v"] == 1
        o1, m, r1 = verify_note(doc["from"], key)
        o2, n, r2 = verify_note(doc["to"], key)
        assert o1 == o2, "different logs"
        verify_consistency(m, n, r1, r2, [digest(p) for p in doc["proof"]])
        return f"{o2}: tree size {n} extends tree size {m}"
    body = base64.b64decode(doc["payload"], validate=True)
    ptype = doc["payloadType"]
    assert ptype == "application/vnd.in-toto+json"
    pae = b"DSSEv1 %d %s %d " % (len(ptype), ptype.encode(), len(body)) + body
    ok = 0
    for s in doc["signatures"]:
        try:
            key[2].verify(base64.b64decode(s["sig"]), pae)
            ok += 1
        except Exception:
            pass
    assert ok, "no envelope signature verifies with this key"
    st = json.loads(body)
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["predicateType"] == "urn:eval:report-attestation:v1"
    want = [s["digest"]["sha256"] for s in st["subject"] if s["name"] == "report.json"][0]
    if report:
        assert hashlib.sha256(open(report, "rb").read()).hexdigest() == want, "report digest"
    fc = st["predicate"]["final_checkpoint"]
    origin, size, root = verify_note(fc["note"], key)
    assert (origin, size, root) == (fc["origin"], fc["tree_size"], digest(fc["root"]))
    assert origin == "eval/" + st["predicate"]["identity"], f"{origin}: not the run's log"
    return f"report sha256:{want} attested for {st['predicate']['identity']}"


if __name__ == "__main__":
    try:
        print("ok:", main(*sys.argv[1:]))
    except Exception as exc:  # any failure means: does not verify
        print(f"FAILED: {type(exc).__name__}: {exc}")
        sys.exit(1)
