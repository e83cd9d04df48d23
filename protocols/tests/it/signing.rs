//! `[signing] public_key`: validated on load, recorded by freeze and bound into the identity,
//! returned by `frozen_public_key`, and a change after freezing refused like any other byte.

use eval_core::Digest;
use eval_evidence::signing::{KEY_NAME, PublicKey, SigningError, SigningKeyPair};
use eval_protocols::freeze::FreezeDoc;
use eval_protocols::{FreezeOutcome, Project, ProtocolError, freeze, frozen_public_key, verify};
use std::fs;
use std::path::PathBuf;

use crate::support::*;

impl Fixture {
    fn protocol_file(&self) -> PathBuf {
        self.root.join("protocols/demo/protocol.toml")
    }

    /// Puts `table` (TOML text) before `[registration]` in the demo protocol.
    fn insert_table(&self, table: &str) {
        let p = self.protocol_file();
        let text = fs::read_to_string(&p).unwrap();
        assert!(text.contains("\n[registration]\n"));
        fs::write(
            &p,
            text.replacen(
                "\n[registration]\n",
                &format!("\n{table}\n[registration]\n"),
                1,
            ),
        )
        .unwrap();
    }

    fn set_key(&self, key: &str) {
        self.insert_table(&format!("[signing]\npublic_key = \"{key}\"\n"));
    }

    fn freeze(&self) -> Result<FreezeOutcome, ProtocolError> {
        freeze(
            &Project::open(&self.root),
            "demo",
            &self.state,
            DRIVER,
            &images,
        )
    }

    fn doc(&self) -> serde_json::Value {
        serde_json::from_slice(&fs::read(self.state.join("freezes/demo.json")).unwrap()).unwrap()
    }
}

fn pair(seed: u8) -> SigningKeyPair {
    SigningKeyPair::from_seed(KEY_NAME, [seed; 32]).unwrap()
}

#[test]
fn a_named_key_is_frozen_bound_into_the_identity_and_returned() {
    let f = fixture();
    let key = pair(1);
    let text = key.public().to_string();
    // Spaces around the key are not part of it: the canonical form is what is recorded.
    f.set_key(&format!("  {text} "));
    let loaded = Project::open(&f.root).load("demo").unwrap();
    assert_eq!(
        loaded.protocol.signing_public_key().unwrap().as_ref(),
        Some(key.public().text())
    );
    let out = f.freeze().unwrap();
    assert!(matches!(out, FreezeOutcome::Frozen { .. }));
    let doc = f.doc();
    assert_eq!(doc["signing_public_key"], text.as_str());
    let id_text = doc["identity_text"].as_str().unwrap();
    assert!(
        id_text.contains(&format!("\ndriver {DRIVER}\nsigning {text}\nimage ")),
        "{id_text}"
    );
    assert_eq!(Digest::of(id_text.as_bytes()), identity(&out));

    let frozen = frozen_public_key(&f.state, "demo").unwrap().unwrap();
    assert_eq!(&frozen, key.public().text());
    key.ensure_public_matches(&frozen).unwrap();
    let e = pair(2).ensure_public_matches(&frozen).unwrap_err();
    assert!(matches!(e, SigningError::KeyMismatch { .. }), "{e}");
    assert!(e.is_integrity());

    // Freezing the same bytes again is a no-op with the same identity.
    let again = f.freeze().unwrap();
    assert!(matches!(again, FreezeOutcome::AlreadyFrozen { .. }));
    assert_eq!(identity(&again), identity(&out));
}

#[test]
fn without_a_key_nothing_is_recorded_and_the_identity_text_is_unchanged() {
    let f = fixture();
    let out = f.freeze().unwrap();
    let doc = f.doc();
    assert!(doc.get("signing_public_key").is_none(), "{doc}");
    let id_text = doc["identity_text"].as_str().unwrap();
    assert!(!id_text.contains("signing"), "{id_text}");
    // The text is exactly the pre-signing form: header, name, tree, driver, then images.
    let lines: Vec<&str> = id_text.lines().collect();
    assert_eq!(lines[0], "eval-freeze v1");
    assert_eq!(lines[1], "name demo");
    assert!(lines[2].starts_with("tree sha256:"));
    assert_eq!(lines[3], format!("driver {DRIVER}"));
    assert!(lines[4..].iter().all(|l| l.starts_with("image ")));
    assert_eq!(Digest::of(id_text.as_bytes()), identity(&out));
    assert_eq!(frozen_public_key(&f.state, "demo").unwrap(), None);

    // A version-1 reader accepts the field absent or null.
    let mut v = doc.clone();
    let parsed: FreezeDoc = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(parsed.signing_public_key().unwrap(), None);
    v["signing_public_key"] = serde_json::Value::Null;
    let parsed: FreezeDoc = serde_json::from_value(v).unwrap();
    assert_eq!(parsed.signing_public_key().unwrap(), None);
}

#[test]
fn a_malformed_key_is_an_input_error_naming_file_and_field_and_writes_nothing() {
    let pub_text = pair(3).public().to_string();
    let (head, b64) = pub_text.rsplit_once('+').unwrap();
    let mut flipped = b64.as_bytes().to_vec();
    flipped[5] = if flipped[5] == b'A' { b'B' } else { b'A' };
    let cases = [
        "not a key".to_owned(),
        "eval+zzzzzzzz+AAAA".to_owned(),
        // Another key's bytes under this key's id: the id check refuses it.
        format!("{head}+{}", String::from_utf8(flipped).unwrap()),
        String::new(),
    ];
    for bad in cases {
        let f = fixture();
        f.set_key(&bad);
        let e = f.freeze().unwrap_err();
        assert!(!e.is_integrity(), "{e}");
        match &e {
            ProtocolError::Field { file, field, .. } => {
                assert_eq!(field, "signing.public_key", "{e}");
                assert_eq!(file, &f.protocol_file());
            }
            other => panic!("{bad:?}: expected a field error, got {other}"),
        }
        assert!(!f.state.exists(), "{bad:?}: a refused freeze wrote state");
    }
}

#[test]
fn a_private_key_pasted_as_the_public_key_is_refused_without_echoing_it() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("k");
    pair(4).write_new(&key_file).unwrap();
    let secret = fs::read_to_string(&key_file).unwrap();
    f.set_key(secret.trim_end());
    let e = Project::open(&f.root).load("demo").unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("signing.public_key"), "{msg}");
    assert!(msg.contains("private key"), "{msg}");
    let b64 = secret.trim_end().rsplit_once('+').unwrap().1;
    assert!(!msg.contains(b64), "the error echoed the private key");
}

#[test]
fn unknown_fields_in_the_signing_table_are_refused_by_name() {
    let f = fixture();
    f.insert_table(&format!(
        "[signing]\npublic_key = \"{}\"\nalgorithm = \"ed25519\"\n",
        pair(5).public()
    ));
    let e = Project::open(&f.root).load("demo").unwrap_err();
    assert!(!e.is_integrity());
    assert!(e.to_string().contains("algorithm"), "{e}");
}

#[test]
fn changing_the_key_after_freezing_is_drift_and_refreezing_is_refused() {
    let f = fixture();
    let first = pair(6).public().to_string();
    f.set_key(&first);
    f.freeze().unwrap();
    let p = f.protocol_file();
    let second = pair(7).public().to_string();
    fs::write(&p, fs::read_to_string(&p).unwrap().replace(&first, &second)).unwrap();

    let v = verify(&Project::open(&f.root), "demo", &f.state, DRIVER, &images).unwrap();
    assert!(!v.clean());
    assert!(
        v.drift
            .iter()
            .any(|d| d.path == "protocols/demo/protocol.toml" && d.change == "modified"),
        "{:?}",
        v.drift
    );

    let e = f.freeze().unwrap_err();
    assert!(e.is_integrity(), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("protocols/demo/protocol.toml"), "{msg}");
    assert!(
        msg.contains(&format!("signing public key: frozen {first}, now {second}")),
        "{msg}"
    );
    // The frozen key is still the first one.
    assert_eq!(
        frozen_public_key(&f.state, "demo")
            .unwrap()
            .unwrap()
            .to_string(),
        first
    );
}

#[test]
fn a_tampered_frozen_key_is_an_integrity_failure() {
    let f = fixture();
    let first = pair(8).public().to_string();
    f.set_key(&first);
    f.freeze().unwrap();
    let other = pair(9).public().to_string();

    // Editing the freeze file breaks the digest the registry binds.
    let file = f.state.join("freezes/demo.json");
    let orig = fs::read_to_string(&file).unwrap();
    fs::write(&file, orig.replace(&first, &other)).unwrap();
    let e = frozen_public_key(&f.state, "demo").unwrap_err();
    assert!(e.is_integrity(), "{e}");
    fs::write(&file, &orig).unwrap();
    assert!(frozen_public_key(&f.state, "demo").is_ok());

    // A document whose key field disagrees with the identity text it carries is refused too.
    let mut doc: FreezeDoc = serde_json::from_str(&orig).unwrap();
    doc.signing_public_key = Some(other);
    assert!(doc.signing_public_key().unwrap_err().is_integrity());
    doc.signing_public_key = None;
    assert!(doc.signing_public_key().unwrap_err().is_integrity());
}

#[test]
fn frozen_public_key_of_an_unfrozen_protocol_is_a_state_error() {
    let f = fixture();
    let e = frozen_public_key(&f.state, "demo").unwrap_err();
    assert!(matches!(e, ProtocolError::State(_)), "{e}");
    assert!(!e.is_integrity());
}

#[test]
fn the_shipped_protocols_name_no_key_but_show_where_it_goes() {
    for p in [
        repo().join("protocols/v0.4/protocol.toml"),
        repo().join("protocols/init-template/protocols/demo/protocol.toml"),
    ] {
        let text = fs::read_to_string(&p).unwrap();
        assert!(text.contains("# [signing]"), "{}", p.display());
        assert!(text.contains("eval keygen --out"), "{}", p.display());
    }
    let l = Project::open(repo()).load("v0.4").unwrap();
    assert!(l.protocol.signing.is_none());
    // The commented example, uncommented with a real key, loads.
    let f = fixture();
    let p = f.protocol_file();
    let text = fs::read_to_string(&p).unwrap();
    let key = pair(10).public().to_string();
    let (before, after) = text.split_once("# [signing]\n").unwrap();
    let (example, rest) = after.split_once('\n').unwrap();
    assert!(example.starts_with("# public_key = "), "{example}");
    fs::write(
        &p,
        format!("{before}[signing]\npublic_key = \"{key}\"\n{rest}"),
    )
    .unwrap();
    let l = Project::open(&f.root).load("demo").unwrap();
    assert_eq!(
        l.protocol
            .signing_public_key()
            .unwrap()
            .unwrap()
            .to_string(),
        key
    );
    let _: PublicKey = PublicKey::parse(&key).unwrap();
}
