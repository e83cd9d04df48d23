//! The v0.4 matrix reproduces the original order (test vectors from V04.md).

use eval_core::phase::Phase;
use eval_matrix::Matrix;
use std::path::Path;

fn v04() -> Matrix {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("v0.4.toml");
    Matrix::load(&path).unwrap()
}

#[test]
fn v04_schedule_matches_the_original_vectors() {
    let s = v04().schedule();
    assert_eq!(s.slots.len(), 96);
    let infra: Vec<&str> = s.infrastructure().map(|s| s.id.as_str()).collect();
    assert_eq!(
        infra,
        [
            "infra-simple-simple-js-clamp-native-r0",
            "infra-simple-simple-js-clamp-v0.4-auto-r0",
            "infra-icae-icae-js-ts-01-native-r0",
            "infra-icae-icae-js-ts-01-v0.4-critical-r0",
            "infra-evocode-theme_d1_w1_code_build_greenfield_implementation-native-r0",
            "infra-evocode-theme_d1_w1_code_build_greenfield_implementation-v0.4-lattice-r0",
        ]
    );
    let stat: Vec<&str> = s.statistical().map(|s| s.id.as_str()).collect();
    assert_eq!(stat.len(), 90);
    assert_eq!(
        &stat[..5],
        [
            "stat-simple-simple-python-whitespace-v0.3-always-r1",
            "stat-simple-simple-go-dedupe-v0.4-auto-r1",
            "stat-simple-simple-ts-slugify-v0.3-always-r1",
            "stat-icae-icae-python-01-v0.4-never-r1",
            "stat-simple-simple-python-whitespace-v0.3-always-r2",
        ]
    );
    assert_eq!(stat[89], "stat-icae-icae-python-02-native-r1");
    // Orders are 1..=96, infrastructure first.
    for (i, slot) in s.slots.iter().enumerate() {
        assert_eq!(slot.order, i + 1);
        assert_eq!(slot.phase == Phase::Infrastructure, i < 6);
    }
    let first = &s.slots[6];
    assert_eq!(
        (
            first.suite.as_str(),
            first.task.as_str(),
            first.arm.as_str(),
            first.rep
        ),
        ("simple", "simple-python-whitespace", "v0.3-always", 1)
    );
    // Every slot id is unique.
    let mut ids: Vec<&str> = s.slots.iter().map(|s| s.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 96);
}

#[test]
fn bad_matrices_name_file_and_field() {
    let base =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("v0.4.toml")).unwrap();
    let f = Path::new("matrix/x.toml");
    let cases = [
        (
            base.replace("concurrency = 4", "concurrency = 4\nbogus = 1"),
            "bogus",
        ),
        (
            base.replace("candidate = \"v0.4-auto\"", "candidate = \"v0.4-autoo\""),
            "suites[0].candidate",
        ),
        (
            base.replace("\"simple-go-dedupe\",", "\"simple-js-clamp\","),
            "suites[0].tasks",
        ),
        (
            base.replace("arm = \"v0.4-lattice\"", "arm = \"v0.4-never\""),
            "infra[5].arm",
        ),
        (
            base.replace(
                "repetitions = 2\n\n[[suites]]\nid = \"icae\"",
                "repetitions = 0\n\n[[suites]]\nid = \"icae\"",
            ),
            "suites[0].repetitions",
        ),
        (base.replace("seed_string =", "seed_strin ="), "seed_strin"),
        (
            base.replace("name = \"v0.4\"", "name = \"v0.4\"\nname = \"x\""),
            "name",
        ),
    ];
    for (text, field) in cases {
        let e = Matrix::parse(&text, f).unwrap_err().to_string();
        assert!(
            e.contains("matrix/x.toml") && e.contains(field),
            "{field}: {e}"
        );
    }
}

#[test]
fn chacha8_order_is_seeded_and_keeps_infra_first() {
    let base =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("v0.4.toml")).unwrap();
    let text = base.replace(
        "algorithm = \"mulberry32-fisher-yates\"\nseed_string = \"plan-lattice-v0.4-blind-90-2026-08-15\"",
        "algorithm = \"chacha8\"\nseed = 42",
    );
    let a = Matrix::parse(&text, Path::new("m")).unwrap().schedule();
    let b = Matrix::parse(&text, Path::new("m")).unwrap().schedule();
    let c = Matrix::parse(&text.replace("seed = 42", "seed = 43"), Path::new("m"))
        .unwrap()
        .schedule();
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_ne!(a, v04().schedule());
    assert_eq!(a.infrastructure().count(), 6);
    assert!(
        a.slots[..6]
            .iter()
            .all(|s| s.phase == Phase::Infrastructure)
    );
}
