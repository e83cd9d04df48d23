//! `eval keygen`, `ledger verify --public-key`, `ledger prove`, `ledger verify-receipt` and
//! `ledger consistency` through the real binary; the private key must appear in no output.

use eval_evidence::ledger::{LedgerWriter, NewEntry};
use eval_evidence::signing::{self, Checkpointer, SigningKeyPair};
use serde_json::json;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn eval(args: &[&str], transcript: &mut String) -> Run {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_eval"))
        .args(args)
        .env_remove("EVAL_SIGNING_KEY_FILE")
        .output()
        .unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    transcript.push_str(&run.stdout);
    transcript.push_str(&run.stderr);
    run
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn keygen_then_sign_prove_and_verify_through_the_cli_without_leaking_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key_file = d.join("signing.key");
    let mut transcript = String::new();

    let r = eval(&["keygen", "--out", p(&key_file)], &mut transcript);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let public_text = r.stdout.trim().to_owned();
    let public = signing::PublicKey::parse(&public_text).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let private_text = std::fs::read_to_string(&key_file).unwrap();
    assert!(private_text.starts_with("PRIVATE+KEY+eval+"));
    let pub_file = d.join("signing.key.pub");
    assert_eq!(
        std::fs::read_to_string(&pub_file).unwrap().trim(),
        public_text
    );
    // Never overwritten.
    let r = eval(&["keygen", "--out", p(&key_file)], &mut transcript);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("refusing to overwrite"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), private_text);

    // A run's ledger, signed as the controller signs it.
    let key = Arc::new(SigningKeyPair::load(&key_file).unwrap());
    assert_eq!(key.public(), &public);
    key.ensure_public_matches(public.text()).unwrap();
    let ledger = d.join("ledger.sqlite");
    let writer = LedgerWriter::open(&ledger).unwrap();
    let mut cp = Checkpointer::open(key.clone(), "eval/sha256:abcd", &writer).unwrap();
    let mut notes = Vec::new();
    for a in 0..3 {
        for k in 0..3 {
            writer
                .append_blocking(NewEntry::new("model_call", &json!({"a": a, "k": k})).unwrap())
                .unwrap();
        }
        let c = cp.checkpoint_blocking(&writer).unwrap();
        let f = d.join(format!("cp{a}.note"));
        std::fs::write(&f, c.checkpoint.note()).unwrap();
        notes.push(f);
    }
    writer.close();

    let r = eval(
        &["ledger", "verify", p(&ledger), "--public-key", &public_text],
        &mut transcript,
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("3 checkpoints signed by"), "{}", r.stdout);
    let r = eval(
        &[
            "ledger",
            "verify",
            p(&ledger),
            "--public-key",
            p(&pub_file),
            "--json",
        ],
        &mut transcript,
    );
    assert_eq!(r.code, 0);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["checkpoints"], 3);
    let other = SigningKeyPair::from_seed("eval", [8u8; 32])
        .unwrap()
        .public()
        .to_string();
    let r = eval(
        &["ledger", "verify", p(&ledger), "--public-key", &other],
        &mut transcript,
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("bad_signature"), "{}", r.stderr);
    let r = eval(
        &["ledger", "verify", p(&ledger), "--public-key", "nonsense"],
        &mut transcript,
    );
    assert_eq!(r.code, 2);

    let receipt = d.join("receipt.json");
    let r = eval(
        &[
            "ledger",
            "prove",
            p(&ledger),
            "--seq",
            "5",
            "--out",
            p(&receipt),
        ],
        &mut transcript,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = eval(
        &[
            "ledger",
            "verify-receipt",
            p(&receipt),
            "--public-key",
            &public_text,
        ],
        &mut transcript,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.starts_with("ok: entry 5 (model_call"),
        "{}",
        r.stdout
    );
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    doc["entry"]["recorded_at"] = json!("x");
    doc["leaf_index"] = json!(5);
    let tampered = d.join("tampered.json");
    std::fs::write(&tampered, serde_json::to_vec(&doc).unwrap()).unwrap();
    let r = eval(
        &[
            "ledger",
            "verify-receipt",
            p(&tampered),
            "--public-key",
            &public_text,
        ],
        &mut transcript,
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    // The last checkpoint entry is not covered by any checkpoint yet.
    let r = eval(
        &[
            "ledger",
            "prove",
            p(&ledger),
            "--seq",
            "12",
            "--out",
            p(&d.join("x.json")),
        ],
        &mut transcript,
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("not covered"), "{}", r.stderr);

    let r = eval(
        &[
            "ledger",
            "consistency",
            p(&ledger),
            "--from",
            p(&notes[0]),
            "--to",
            p(&receipt),
        ],
        &mut transcript,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let proof: signing::ConsistencyProof = serde_json::from_str(&r.stdout).unwrap();
    signing::verify_consistency_proof(&proof, &public).unwrap();
    let r = eval(
        &[
            "ledger",
            "consistency",
            p(&ledger),
            "--from",
            p(&notes[2]),
            "--to",
            p(&notes[0]),
        ],
        &mut transcript,
    );
    assert_eq!(r.code, 3, "{}", r.stderr);

    // The private key is in no output and no file other than its own.
    // The base64 field may itself contain '+': it is everything after the fourth one.
    let b64 = private_text
        .trim()
        .splitn(5, '+')
        .nth(4)
        .unwrap()
        .to_owned();
    assert!(b64.len() > 40);
    assert!(!transcript.contains(&b64), "the private key was printed");
    assert!(
        !transcript.contains("PRIVATE+KEY"),
        "the private key was printed"
    );
    for entry in std::fs::read_dir(d).unwrap() {
        let path = entry.unwrap().path();
        if path == key_file || !path.is_file() {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(&b64),
            "{} holds the private key",
            path.display()
        );
        assert!(!text.contains("PRIVATE+KEY"), "{}", path.display());
    }
}
