//! Signed evidence: the Merkle tree against an independent Python implementation, checkpoints
//! signed by the controller's API, receipts and consistency proofs checked by a standalone Python
//! verifier, and every kind of tampering rejected.

use eval_evidence::ledger::{self, Digest, Entry, LedgerWriter, NewEntry};
use eval_evidence::signing::{self, *};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

fn python() -> PathBuf {
    if let Ok(p) = std::env::var("EVAL_TEST_PYTHON")
        && !p.is_empty()
    {
        return PathBuf::from(p);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/ensure-python.sh");
    let out = Command::new("bash").arg(script).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn verifier_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/verify_receipt.py")
}

/// Runs the standalone Python verifier; returns (success, stdout).
fn py_verify(key: &PublicKey, file: &Path, report: Option<&Path>) -> (bool, String) {
    let mut cmd = Command::new(python());
    cmd.arg(verifier_script()).arg(key.to_string()).arg(file);
    if let Some(r) = report {
        cmd.arg(r);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

const TREE_KAT_PY: &str = r#"
import hashlib, json, functools
def h(b): return hashlib.sha256(b).digest()
leaves = [h(b"\x00" + ("leaf %d" % i).encode()) for i in range(64)]
def split(n):
    k = 1
    while k * 2 < n: k *= 2
    return k
@functools.lru_cache(None)
def mth(a, b):
    if b - a == 1: return leaves[a]
    k = split(b - a)
    return h(b"\x01" + mth(a, a + k) + mth(a + k, b))
def path(m, a, b):
    if b - a <= 1: return []
    k = split(b - a)
    if m < k: return path(m, a, a + k) + [mth(a + k, b)]
    return path(m - k, a + k, b) + [mth(a, a + k)]
def subproof(m, a, b, complete):
    if m == b - a: return [] if complete else [mth(a, b)]
    k = split(b - a)
    if m <= k: return subproof(m, a, a + k, complete) + [mth(a + k, b)]
    return subproof(m - k, a + k, b, False) + [mth(a, a + k)]
out = {"roots": [], "inclusion": {}, "consistency": {}}
for n in range(1, 65):
    out["roots"].append(mth(0, n).hex())
    for i in range(n): out["inclusion"]["%d/%d" % (i, n)] = [x.hex() for x in path(i, 0, n)]
    for m in range(1, n): out["consistency"]["%d/%d" % (m, n)] = [x.hex() for x in subproof(m, 0, n, True)]
print(json.dumps(out))
"#;

fn flip(d: &Digest) -> Digest {
    let mut x = *d;
    x.0[7] ^= 0x20;
    x
}

#[test]
fn tree_roots_and_proofs_match_an_independent_python_implementation_for_sizes_1_to_64() {
    let out = Command::new(python())
        .arg("-c")
        .arg(TREE_KAT_PY)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kat: Value = serde_json::from_slice(&out.stdout).unwrap();
    let hexes = |v: &Value| -> Vec<Digest> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|h| Digest::from_hex(h.as_str().unwrap()).unwrap())
            .collect()
    };
    let mut tree = MerkleTree::new();
    for i in 0..64 {
        let mut raw = vec![0u8];
        raw.extend_from_slice(format!("leaf {i}").as_bytes());
        tree.push(Digest::of(&raw));
    }
    let roots = hexes(&kat["roots"]);
    let (mut inclusions, mut consistencies) = (0, 0);
    for n in 1..=64u64 {
        let root = tree.root(n).unwrap();
        assert_eq!(root, roots[n as usize - 1], "root of size {n}");
        for i in 0..n {
            let proof = tree.inclusion_proof(i, n).unwrap();
            assert_eq!(
                proof,
                hexes(&kat["inclusion"][format!("{i}/{n}")]),
                "path {i}/{n}"
            );
            let leaf = tree.leaf(i).unwrap();
            verify_inclusion(i, n, &leaf, &proof, &root).unwrap();
            assert!(verify_inclusion(i, n, &flip(&leaf), &proof, &root).is_err());
            assert!(verify_inclusion(i, n, &leaf, &proof, &flip(&root)).is_err());
            if i + 1 < n {
                assert!(verify_inclusion(i + 1, n, &leaf, &proof, &root).is_err());
            }
            for k in 0..proof.len() {
                let mut bad = proof.clone();
                bad[k] = flip(&bad[k]);
                assert!(verify_inclusion(i, n, &leaf, &bad, &root).is_err());
            }
            if !proof.is_empty() {
                assert!(verify_inclusion(i, n, &leaf, &proof[1..], &root).is_err());
            }
            let mut long = proof.clone();
            long.push(leaf);
            assert!(verify_inclusion(i, n, &leaf, &long, &root).is_err());
            inclusions += 1;
        }
        for m in 1..=n {
            let old = tree.root(m).unwrap();
            let proof = tree.consistency_proof(m, n).unwrap();
            if m < n {
                assert_eq!(
                    proof,
                    hexes(&kat["consistency"][format!("{m}/{n}")]),
                    "consistency {m}/{n}"
                );
            } else {
                assert!(proof.is_empty());
            }
            verify_consistency(m, n, &old, &root, &proof).unwrap();
            assert!(verify_consistency(m, n, &flip(&old), &root, &proof).is_err());
            assert!(verify_consistency(m, n, &old, &flip(&root), &proof).is_err());
            if m < n {
                // A rewind: the larger tree claimed as the older one.
                assert!(verify_consistency(n, m, &root, &old, &proof).is_err());
                for k in 0..proof.len() {
                    let mut bad = proof.clone();
                    bad[k] = flip(&bad[k]);
                    assert!(
                        verify_consistency(m, n, &old, &root, &bad).is_err(),
                        "{m}/{n}"
                    );
                }
            }
            consistencies += 1;
        }
    }
    assert_eq!(inclusions, 64 * 65 / 2);
    assert_eq!(consistencies, 64 * 65 / 2);
}

/// The reviewer's script's own proof verifiers, on every proof for sizes 1..64 that Rust makes,
/// and on each proof with one hash flipped.
#[test]
fn the_python_verifier_accepts_every_proof_shape_up_to_64_and_rejects_flipped_ones() {
    let mut tree = MerkleTree::new();
    for i in 0..64u64 {
        tree.push(Digest::of(&i.to_be_bytes()));
    }
    let hex = |v: &[Digest]| v.iter().map(|d| d.hex()).collect::<Vec<_>>();
    let (mut inclusion, mut consistency) = (Vec::new(), Vec::new());
    for n in 1..=64u64 {
        let root = tree.root(n).unwrap();
        for i in 0..n {
            let proof = tree.inclusion_proof(i, n).unwrap();
            inclusion.push(json!([
                i,
                n,
                tree.leaf(i).unwrap().hex(),
                hex(&proof),
                root.hex()
            ]));
        }
        for m in 1..n {
            let proof = tree.consistency_proof(m, n).unwrap();
            let old = tree.root(m).unwrap();
            consistency.push(json!([m, n, old.hex(), root.hex(), hex(&proof)]));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases.json");
    std::fs::write(
        &cases,
        json!({"inclusion": inclusion, "consistency": consistency}).to_string(),
    )
    .unwrap();
    let script = format!(
        r#"
import json, sys
sys.dont_write_bytecode = True
sys.path.insert(0, {dir:?})
import verify_receipt as v
cases = json.load(open({cases:?}))
b = bytes.fromhex
def flipped(p, k):
    p = list(p); x = bytearray(p[k]); x[3] ^= 1; p[k] = bytes(x); return p
def rejects(f, *a):
    try:
        f(*a)
    except AssertionError:
        return True
    return False
ok = bad = 0
for i, n, leaf, proof, root in cases["inclusion"]:
    proof = [b(x) for x in proof]
    v.verify_inclusion(i, n, b(leaf), proof, b(root)); ok += 1
    for k in range(len(proof)):
        assert rejects(v.verify_inclusion, i, n, b(leaf), flipped(proof, k), b(root)); bad += 1
for m, n, old, new, proof in cases["consistency"]:
    proof = [b(x) for x in proof]
    v.verify_consistency(m, n, b(old), b(new), proof); ok += 1
    for k in range(len(proof)):
        assert rejects(v.verify_consistency, m, n, b(old), b(new), flipped(proof, k)); bad += 1
    assert rejects(v.verify_consistency, n, m, b(new), b(old), proof)
print(ok, bad)
"#,
        dir = verifier_script().parent().unwrap().to_str().unwrap(),
        cases = cases.to_str().unwrap(),
    );
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let ok: u64 = text.split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(ok, 64 * 65 / 2 + 64 * 63 / 2, "{text}");
}

struct Fixture {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    path: PathBuf,
    key: Arc<SigningKeyPair>,
    seed: [u8; 32],
    checkpoints: Vec<RecordedCheckpoint>,
}

const ORIGIN: &str = "eval/sha256:00ff";

/// A ledger of `attempts` attempts of a few entries each, checkpointed after each attempt and
/// once more at the end of the run, as the controller does.
fn fixture(attempts: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let seed = [0x5au8; 32];
    let key = Arc::new(SigningKeyPair::from_seed(KEY_NAME, seed).unwrap());
    let writer = LedgerWriter::open(&path).unwrap();
    let mut cp = Checkpointer::open(key.clone(), ORIGIN, &writer).unwrap();
    writer
        .append_blocking(NewEntry::new("run", &json!({"identity": "sha256:00ff"})).unwrap())
        .unwrap();
    let mut checkpoints = Vec::new();
    for a in 0..attempts {
        for k in 0..(1 + a % 4) {
            writer
                .append_blocking(
                    NewEntry::new("model_call", &json!({"attempt": a, "call": k, "x": 1.5}))
                        .unwrap(),
                )
                .unwrap();
        }
        checkpoints.push(cp.checkpoint_blocking(&writer).unwrap());
    }
    writer
        .append_blocking(NewEntry::new("outcome", &json!({"done": true})).unwrap())
        .unwrap();
    checkpoints.push(cp.checkpoint_blocking(&writer).unwrap());
    writer.close();
    Fixture {
        dir: dir.path().to_path_buf(),
        _dir: dir,
        path,
        key,
        seed,
        checkpoints,
    }
}

#[test]
fn checkpoints_cover_everything_before_them_and_verify() {
    let f = fixture(6);
    let public = f.key.public();
    let report = verify_ledger_signatures(&f.path, public).unwrap();
    assert!(report.ok, "{report:?}");
    assert_eq!(report.checkpoints, 7);
    // The final checkpoint entry is the only entry no checkpoint covers.
    assert_eq!(report.unsigned_tail, 1);
    let entries = ledger::LedgerReader::open(&f.path)
        .unwrap()
        .entries()
        .unwrap();
    for c in &f.checkpoints {
        assert_eq!(
            c.checkpoint.head.tree_size,
            c.seq - 1,
            "covers exactly the entries before it"
        );
        assert_eq!(entries[c.seq as usize - 1].kind, CHECKPOINT_KIND);
    }
    let last = f.checkpoints.last().unwrap();
    for seq in 1..=last.checkpoint.head.tree_size {
        let r = prove(&f.path, seq).unwrap();
        let v = verify_receipt(&r, public).unwrap();
        assert_eq!(v.entry, entries[seq as usize - 1]);
        assert_eq!(r.checkpoint_seq, last.seq);
    }
    assert!(matches!(
        prove(&f.path, last.seq),
        Err(SigningError::NotCovered(_))
    ));
    assert!(matches!(
        prove(&f.path, last.seq + 1),
        Err(SigningError::NotCovered(_))
    ));
    for (i, a) in f.checkpoints.iter().enumerate() {
        for b in &f.checkpoints[i..] {
            let p = prove_consistency(&f.path, &a.checkpoint, &b.checkpoint).unwrap();
            verify_consistency_proof(&p, public).unwrap();
        }
        if i > 0 {
            let back = prove_consistency(&f.path, &a.checkpoint, &f.checkpoints[0].checkpoint);
            assert!(matches!(back, Err(SigningError::Rewind(_))));
        }
    }
    // A JSONL export verifies the same way.
    let jsonl = f.dir.join("export.jsonl");
    ledger::export_jsonl(&f.path, &jsonl).unwrap();
    assert!(verify_ledger_signatures(&jsonl, public).unwrap().ok);
    // Another key is refused.
    let other = SigningKeyPair::from_seed(KEY_NAME, [1u8; 32]).unwrap();
    let r = verify_ledger_signatures(&f.path, other.public()).unwrap();
    assert!(!r.ok);
    assert_eq!(r.error.unwrap().reason, "bad_signature");
}

#[test]
fn a_resumed_checkpointer_continues_the_log_and_refuses_a_foreign_key() {
    let f = fixture(2);
    let writer = LedgerWriter::open(&f.path).unwrap();
    let other = Arc::new(SigningKeyPair::from_seed(KEY_NAME, [9u8; 32]).unwrap());
    assert!(matches!(
        Checkpointer::open(other, ORIGIN, &writer),
        Err(SigningError::BadSignature(_))
    ));
    assert!(matches!(
        Checkpointer::open(f.key.clone(), "eval/another", &writer),
        Err(SigningError::Inconsistent(_))
    ));
    let mut cp = Checkpointer::open(f.key.clone(), ORIGIN, &writer).unwrap();
    assert_eq!(cp.last().unwrap(), f.checkpoints.last().unwrap());
    writer
        .append_blocking(NewEntry::new("note", &json!({"text": "later"})).unwrap())
        .unwrap();
    let next = cp.checkpoint_blocking(&writer).unwrap();
    writer.close();
    let p = prove_consistency(&f.path, &f.checkpoints[0].checkpoint, &next.checkpoint).unwrap();
    verify_consistency_proof(&p, f.key.public()).unwrap();
    assert!(
        verify_ledger_signatures(&f.path, f.key.public())
            .unwrap()
            .ok
    );
}

#[test]
fn a_checkpoint_that_rewinds_or_forks_the_log_is_refused() {
    // (a) The ledger file is replaced by an older copy of itself, (b) by a different log of
    // greater length (a fork), while a run is signing: the writer holds its own file and refuses
    // the moment the path names another; a checkpointer never signs through another writer.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.sqlite");
    let snapshot = dir.path().join("snap.sqlite");
    let forked = dir.path().join("fork.sqlite");
    let key = Arc::new(SigningKeyPair::from_seed(KEY_NAME, [3u8; 32]).unwrap());
    let w = LedgerWriter::open(&path).unwrap();
    for i in 0..5 {
        w.append_blocking(NewEntry::new("note", &json!({"i": i})).unwrap())
            .unwrap();
    }
    w.close();
    std::fs::copy(&path, &snapshot).unwrap();
    let w = LedgerWriter::open(&forked).unwrap();
    for i in 0..40 {
        w.append_blocking(NewEntry::new("note", &json!({"fork": i})).unwrap())
            .unwrap();
    }
    w.close();
    for from in [&snapshot, &forked] {
        let live = dir.path().join("live.sqlite");
        std::fs::copy(&path, &live).unwrap();
        let w = LedgerWriter::open(&live).unwrap();
        let mut cp = Checkpointer::open(key.clone(), ORIGIN, &w).unwrap();
        for i in 5..20 {
            w.append_blocking(NewEntry::new("note", &json!({"i": i})).unwrap())
                .unwrap();
        }
        let signed = cp.checkpoint_blocking(&w).unwrap();
        assert_eq!(signed.checkpoint.head.tree_size, 20);
        let moved = dir.path().join("moved.sqlite");
        std::fs::copy(from, &moved).unwrap();
        for suffix in ["-wal", "-shm"] {
            let f = format!("{}{suffix}", live.display());
            let _ = std::fs::rename(&f, format!("{f}.aside"));
        }
        std::fs::rename(&moved, &live).unwrap();
        let err = cp.checkpoint_blocking(&w).unwrap_err();
        assert!(err.is_integrity(), "{err}");
        assert!(err.to_string().contains("replaced"), "{err}");
        w.close();
        let other = LedgerWriter::open(&live).unwrap();
        let err = cp.checkpoint_blocking(&other).unwrap_err();
        assert!(err.is_integrity(), "{err}");
        other.close();
        drop(cp);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", live.display()));
        }
    }

    // (c) A checkpoint entry that signs a smaller tree than its predecessor, even with the right
    // key, fails verification and stops a resumed run from signing.
    let f = fixture(3);
    let first = &f.checkpoints[0].checkpoint.head;
    let w = LedgerWriter::open(&f.path).unwrap();
    let rewound = SignedCheckpoint::sign(first.clone(), &f.key).unwrap();
    w.append_blocking(NewEntry::new(CHECKPOINT_KIND, &rewound.entry_payload()).unwrap())
        .unwrap();
    let r = verify_ledger_signatures(&f.path, f.key.public()).unwrap();
    assert_eq!(r.error.as_ref().unwrap().reason, "rewind", "{r:?}");
    assert!(matches!(
        Checkpointer::open(f.key.clone(), ORIGIN, &w),
        Err(SigningError::Rewind(_))
    ));
    w.close();
}

/// Rewrites a ledger as a JSONL export with `edit` applied and the chain re-forged after it, the
/// way an attacker who can rewrite the whole file would: the hash chain alone still verifies.
fn forge(entries: &[Entry], out: &Path, edit: impl Fn(&mut Entry)) {
    let mut prev = Digest::ZERO;
    let mut text = Vec::new();
    for e in entries {
        let mut e = e.clone();
        edit(&mut e);
        e.prev = prev;
        e.hash = e.computed_hash();
        prev = e.hash;
        text.extend_from_slice(&ledger::jsonl_line(&e));
        text.push(b'\n');
    }
    std::fs::write(out, text).unwrap();
}

#[test]
fn tampered_entries_checkpoints_and_signatures_are_caught_even_with_a_reforged_chain() {
    let f = fixture(4);
    let public = f.key.public();
    let entries = ledger::LedgerReader::open(&f.path)
        .unwrap()
        .entries()
        .unwrap();
    let out = f.dir.join("forged.jsonl");

    // An entry's payload changed (seq 4: the first model call of the second attempt).
    assert_eq!(entries[3].kind, "model_call");
    forge(&entries, &out, |e| {
        if e.seq == 4 {
            e.payload = br#"{"attempt":1,"call":0,"x":2.5}"#.to_vec();
        }
    });
    assert!(
        ledger::verify(&out, None).unwrap().ok,
        "the re-forged chain verifies"
    );
    let r = verify_ledger_signatures(&out, public).unwrap();
    let e = r.error.unwrap();
    assert_eq!(e.reason, "root_mismatch");
    assert_eq!(
        e.seq, 6,
        "caught at the first checkpoint covering seq 4: {e:?}"
    );

    // A checkpoint's tree size and root replaced by a tree head signed by nobody.
    let cp_seq = f.checkpoints[1].seq;
    let bad_sig = |e: &mut Entry| {
        if e.seq == cp_seq {
            let mut p: Value = serde_json::from_slice(&e.payload).unwrap();
            let note = p["note"].as_str().unwrap().to_owned();
            let (text, sig) = note.rsplit_once(' ').unwrap();
            let mut raw = base64_decode(sig.trim_end());
            raw[10] ^= 1;
            p["note"] = Value::String(format!("{text} {}\n", base64_encode(&raw)));
            e.payload = eval_evidence::canonical::to_vec(&p).unwrap();
        }
    };
    forge(&entries, &out, bad_sig);
    let r = verify_ledger_signatures(&out, public).unwrap();
    assert_eq!(r.error.as_ref().unwrap().reason, "bad_signature", "{r:?}");
    assert_eq!(r.error.unwrap().seq, cp_seq);

    // A checkpoint whose fields disagree with its note.
    forge(&entries, &out, |e| {
        if e.seq == cp_seq {
            let mut p: Value = serde_json::from_slice(&e.payload).unwrap();
            p["tree_size"] = json!(1);
            e.payload = eval_evidence::canonical::to_vec(&p).unwrap();
        }
    });
    let r = verify_ledger_signatures(&out, public).unwrap();
    assert_eq!(r.error.unwrap().reason, "malformed_checkpoint");

    // Entries dropped from the middle (and the chain re-forged) no longer match the roots.
    let mut fewer = entries.clone();
    fewer.remove(1);
    for (i, e) in fewer.iter_mut().enumerate() {
        e.seq = i as u64 + 1;
    }
    forge(&fewer, &out, |_| {});
    let r = verify_ledger_signatures(&out, public).unwrap();
    assert!(!r.ok);

    // A ledger with no checkpoint has nothing signed.
    forge(&entries[..2], &out, |_| {});
    let r = verify_ledger_signatures(&out, public).unwrap();
    assert_eq!(r.error.unwrap().reason, "no_checkpoint");
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn write_json(path: &Path, v: &impl serde::Serialize) {
    std::fs::write(path, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

#[test]
fn python_verifies_receipts_proofs_and_the_attestation_and_rejects_tampering() {
    let f = fixture(3);
    let public = f.key.public();
    let receipt = prove(&f.path, 2).unwrap();
    let rpath = f.dir.join("receipt.json");
    write_json(&rpath, &receipt);
    assert_eq!(read_receipt(&rpath).unwrap(), receipt);
    let (ok, out) = py_verify(public, &rpath, None);
    assert!(ok, "{out}");
    assert!(out.contains("entry 2 (model_call)"), "{out}");

    // Tampered receipts: Rust and Python both refuse each one.
    let mut tampered: Vec<(&str, Receipt)> = Vec::new();
    let mut t = receipt.clone();
    t.entry.payload_base64 = base64_encode(br#"{"attempt":0,"call":0,"x":9}"#);
    t.entry.hash = t.entry.to_entry().unwrap().computed_hash();
    tampered.push(("payload", t));
    let mut t = receipt.clone();
    t.inclusion_proof[0] = flip(&t.inclusion_proof[0]);
    tampered.push(("proof", t));
    let mut t = receipt.clone();
    t.checkpoint = t.checkpoint.replacen(
        &format!("\n{}\n", receipt.tree_size),
        &format!("\n{}\n", receipt.tree_size + 1),
        1,
    );
    t.tree_size += 1;
    tampered.push(("checkpoint", t));
    let mut t = receipt.clone();
    let (text, sig) = t.checkpoint.rsplit_once(' ').unwrap();
    let mut raw = base64_decode(sig.trim_end());
    raw[20] ^= 0x80;
    t.checkpoint = format!("{text} {}\n", base64_encode(&raw));
    tampered.push(("signature", t));
    let mut t = receipt.clone();
    t.entry.seq = 3;
    t.leaf_index = 2;
    tampered.push(("position", t));
    for (what, t) in &tampered {
        assert!(
            verify_receipt(t, public).is_err(),
            "{what} accepted by Rust"
        );
        let p = f.dir.join(format!("tampered-{what}.json"));
        write_json(&p, t);
        let (ok, out) = py_verify(public, &p, None);
        assert!(!ok, "{what} accepted by Python: {out}");
    }
    let other = SigningKeyPair::from_seed(KEY_NAME, [4u8; 32]).unwrap();
    assert!(verify_receipt(&receipt, other.public()).is_err());
    assert!(!py_verify(other.public(), &rpath, None).0);

    // Consistency proofs.
    let a = &f.checkpoints[0].checkpoint;
    let b = &f.checkpoints.last().unwrap().checkpoint;
    let proof = prove_consistency(&f.path, a, b).unwrap();
    let cpath = f.dir.join("consistency.json");
    write_json(&cpath, &proof);
    assert_eq!(read_consistency_proof(&cpath).unwrap(), proof);
    let (ok, out) = py_verify(public, &cpath, None);
    assert!(ok, "{out}");
    let mut bad = proof.clone();
    bad.proof[0] = flip(&bad.proof[0]);
    assert!(verify_consistency_proof(&bad, public).is_err());
    write_json(&cpath, &bad);
    assert!(!py_verify(public, &cpath, None).0);

    // The report attestation.
    let report = br#"{"release_allowed":true,"v":1}"#;
    let report_path = f.dir.join("report.json");
    std::fs::write(&report_path, report).unwrap();
    let final_cp = f.checkpoints.last().unwrap();
    let envelope = attest_report(
        report,
        "sha256:00ff",
        &Digest::of(b"driver"),
        final_cp,
        &json!({"release_allowed": true}),
        &f.key,
    )
    .unwrap();
    let apath = f.dir.join("report.intoto.json");
    std::fs::write(&apath, &envelope).unwrap();
    let v = verify_attestation(&envelope, public, Some(report)).unwrap();
    assert_eq!(v.identity, "sha256:00ff");
    assert_eq!(v.final_checkpoint, final_cp.checkpoint);
    let (ok, out) = py_verify(public, &apath, Some(&report_path));
    assert!(ok, "{out}");
    assert!(verify_attestation(&envelope, public, Some(b"{}")).is_err());
    assert!(verify_attestation(&envelope, other.public(), None).is_err());
    // Signed, but saying nothing about which run or what verdict: refused, not read as "".
    for (identity, verdict) in [
        ("", json!({"release_allowed": true})),
        ("sha256:00ff", json!(null)),
    ] {
        let signed = attest_report(
            report,
            identity,
            &Digest::of(b"driver"),
            final_cp,
            &verdict,
            &f.key,
        )
        .unwrap();
        assert!(
            matches!(
                verify_attestation(&signed, public, Some(report)),
                Err(SigningError::Proof(_))
            ),
            "identity {identity:?}, verdict {verdict}"
        );
    }
    let mut env: Value = serde_json::from_slice(&envelope).unwrap();
    let mut body: Value =
        serde_json::from_slice(&base64_decode(env["payload"].as_str().unwrap())).unwrap();
    body["predicate"]["verdict"]["release_allowed"] = json!(false);
    env["payload"] = json!(base64_encode(&serde_json::to_vec(&body).unwrap()));
    let forged = serde_json::to_vec(&env).unwrap();
    assert!(matches!(
        verify_attestation(&forged, public, None),
        Err(SigningError::BadSignature(_))
    ));
    std::fs::write(&apath, &forged).unwrap();
    assert!(!py_verify(public, &apath, None).0);

    // The private key is in none of the files written.
    assert_secret_absent(&f.dir, &f.seed);
}

/// Fails when the seed appears, raw, hex or base64 (alone or as in the key file), in any file.
fn assert_secret_absent(dir: &Path, seed: &[u8; 32]) {
    let mut needles: Vec<Vec<u8>> = vec![seed.to_vec(), hex::encode(seed).into_bytes()];
    let mut with_alg = vec![1u8];
    with_alg.extend_from_slice(seed);
    needles.push(base64_encode(&with_alg).into_bytes());
    needles.push(base64_encode(seed).into_bytes());
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if !p.is_file() {
            continue;
        }
        let bytes = std::fs::read(&p).unwrap();
        for n in &needles {
            assert!(
                !bytes.windows(n.len()).any(|w| w == n.as_slice()),
                "{} holds the private key",
                p.display()
            );
        }
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} files checked");
}

#[test]
fn the_async_api_signs_concurrent_attempts_in_order() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.sqlite");
        let key = Arc::new(SigningKeyPair::generate(KEY_NAME).unwrap());
        let writer = LedgerWriter::open(&path).unwrap();
        let cp = Arc::new(tokio::sync::Mutex::new(
            Checkpointer::open(key.clone(), ORIGIN, &writer).unwrap(),
        ));
        let mut tasks = Vec::new();
        for a in 0..8 {
            let (writer, cp) = (writer.clone(), cp.clone());
            tasks.push(tokio::spawn(async move {
                for k in 0..20 {
                    writer
                        .append(NewEntry::new("model_call", &json!({"a": a, "k": k})).unwrap())
                        .await
                        .unwrap();
                }
                cp.lock().await.checkpoint(&writer).await.unwrap()
            }));
        }
        let mut sizes = Vec::new();
        for t in tasks {
            sizes.push(t.await.unwrap().checkpoint.head.tree_size);
        }
        writer.close();
        let r = verify_ledger_signatures(&path, key.public()).unwrap();
        assert!(r.ok, "{r:?}");
        assert_eq!(r.checkpoints, 8);
        assert_eq!(r.entries, 8 * 20 + 8);
        let _ = signing::origin_for_identity("sha256:00ff").unwrap();
        assert!(signing::origin_for_identity("has space").is_err());
    });
}

/// A finished run must be signed to its end: the final checkpoint after `run_finished` makes it
/// verify; without it (a forger dropped it) `unsigned_tail` names the first uncovered evidence
/// entry; `report` and `note` entries after the final checkpoint are allowed; an unfinished run
/// (a session started again) is not held to it.
#[test]
fn a_finished_run_must_be_signed_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let key = Arc::new(SigningKeyPair::from_seed("eval", [3u8; 32]).unwrap());
    let public = key.public().clone();
    let build = |name: &str, final_checkpoint: bool, after: &[&str]| {
        let path = dir.path().join(name);
        let w = LedgerWriter::open(&path).unwrap();
        let mut cp = Checkpointer::open(key.clone(), "eval/sha256:ab", &w).unwrap();
        let add = |kind: &str| {
            w.append_blocking(NewEntry::new(kind, &json!({"k": kind})).unwrap())
                .unwrap()
                .seq
        };
        add("run_started");
        add("attempt_started");
        add("model_call");
        add("attempt_outcome");
        cp.checkpoint_blocking(&w).unwrap();
        let started = add("attempt_started");
        add("attempt_outcome");
        add("run_finished");
        if final_checkpoint {
            cp.checkpoint_blocking(&w).unwrap();
        }
        for k in after {
            add(k);
        }
        w.close();
        (path, started)
    };

    let (ok, _) = build("ok.sqlite", true, &["report", "note"]);
    let r = verify_ledger_signatures(&ok, &public).unwrap();
    assert!(r.ok, "{:?}", r.error);
    assert!(r.finished);
    assert_eq!(r.first_unsigned_evidence, None);

    let (cut, first) = build("cut.sqlite", false, &[]);
    let r = verify_ledger_signatures(&cut, &public).unwrap();
    assert!(!r.ok);
    let e = r.error.unwrap();
    assert_eq!(e.reason, "unsigned_tail");
    // The checkpoint entry at seq 5 is not evidence; the first uncovered evidence follows it.
    assert_eq!(e.seq, first);
    assert!(
        e.message.contains(&format!("seq {first}:")),
        "{}",
        e.message
    );

    // Evidence appended after the final checkpoint is caught the same way.
    let (late, _) = build("late.sqlite", true, &["report", "model_call"]);
    let r = verify_ledger_signatures(&late, &public).unwrap();
    assert_eq!(r.error.unwrap().reason, "unsigned_tail");

    // A resumed session that has not finished yet: its tail is not required to be signed.
    let (open, _) = build("open.sqlite", true, &["run_started", "attempt_started"]);
    let r = verify_ledger_signatures(&open, &public).unwrap();
    assert!(r.ok, "{:?}", r.error);
    assert!(!r.finished);
    assert!(r.first_unsigned_evidence.is_some());

    // A forger who rewrote an outcome, dropped the checkpoints after it and appended a
    // `run_started` so the run no longer looks finished: the unsigned outcome is still a cut.
    let (reopened, _) = build(
        "reopened.sqlite",
        true,
        &["run_started", "attempt_started", "attempt_outcome"],
    );
    let r = verify_ledger_signatures(&reopened, &public).unwrap();
    assert!(!r.finished);
    let e = r.error.unwrap();
    assert_eq!(e.reason, "unsigned_tail");
    assert!(e.message.contains("attempt outcome"), "{}", e.message);

    // The in-memory scan (what `eval report` runs on its one read) judges every ledger above
    // exactly as the scan of the file does.
    for path in [&ok, &cut, &late, &open, &reopened] {
        let from_file = verify_ledger_signatures(path, &public).unwrap();
        let entries = ledger::LedgerReader::open(path).unwrap().entries().unwrap();
        let in_memory = verify_entry_signatures(&entries, &public, None);
        assert_eq!(
            serde_json::to_value(&in_memory).unwrap(),
            serde_json::to_value(&from_file).unwrap(),
            "{}",
            path.display()
        );
    }
}

/// A smoke run signs under `eval-smoke/<identity>`: its receipts verify as a smoke run's only —
/// refused by `verify_receipt` and by the standalone verifier, though every signature is good —
/// and its log is not evidence of the identity (`check_evidence_origin`).
#[test]
fn a_smoke_runs_receipt_verifies_as_smoke_only() {
    let identity = "sha256:00ff";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let key = Arc::new(SigningKeyPair::from_seed(KEY_NAME, [7u8; 32]).unwrap());
    let smoke = smoke_origin_for_identity(identity).unwrap();
    assert_eq!(smoke, "eval-smoke/sha256:00ff");
    let writer = LedgerWriter::open(&path).unwrap();
    let mut cp = Checkpointer::open(key.clone(), &smoke, &writer).unwrap();
    writer
        .append_blocking(NewEntry::new("attempt_outcome", &json!({"score": 1})).unwrap())
        .unwrap();
    cp.checkpoint_blocking(&writer).unwrap();
    writer.close();
    let report = verify_ledger_signatures(&path, key.public()).unwrap();
    assert!(report.ok, "{report:?}");
    let origin = &report.last_checkpoint.as_ref().unwrap().origin;
    assert!(is_smoke_origin(origin));
    let e = check_evidence_origin(origin, identity).unwrap_err();
    assert!(e.to_string().contains("smoke run"), "{e}");
    assert!(check_evidence_origin(&origin_for_identity(identity).unwrap(), identity).is_ok());

    let r = prove(&path, 1).unwrap();
    let e = verify_receipt(&r, key.public()).unwrap_err();
    assert!(e.to_string().contains("smoke run"), "{e}");
    let file = dir.path().join("receipt.json");
    std::fs::write(&file, serde_json::to_vec(&r).unwrap()).unwrap();
    let (ok, out) = py_verify(key.public(), &file, None);
    assert!(!ok, "{out}");
    assert!(out.contains("smoke run"), "{out}");
}
