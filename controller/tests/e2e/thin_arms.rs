//! Arms over a base image named by content (no `[build]`): freeze records each arm's thin image
//! id or refuses a base it cannot resolve (exit 2, naming `image.id`); `eval run` runs the arms
//! on the frozen ids, one base shared; a tag that moved to other content is drift (exit 3).
//!
//! The tests of this behaviour that need a Docker engine; the rest are in `tests/it/thin_arms.rs`.

use crate::support::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

pub(crate) use crate::support::thin_arms::*;
use eval_runtimes::{ArmFiles, DockerRuntime, ImageId, ImageSpec, Runtime, RuntimeDef};

fn frozen_images(proj: &Path) -> BTreeMap<String, serde_json::Value> {
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(proj.join("runs/freezes/demo.json")).unwrap())
            .unwrap();
    doc["images"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn hex(s: &str) -> &str {
    s.trim_start_matches("sha256:")
}

/// A base unique to this test (a nonce label), made by the runtime crate's own image writer
/// from the fixture definition (busybox, the fixture agent and grader).
fn make_base(rt: &tokio::runtime::Runtime, nonce: &str) -> (DockerRuntime, ImageId) {
    let def = RuntimeDef::load(&repo_root().join("runtimes/fixture/runtime.toml")).unwrap();
    let spec = ImageSpec {
        def,
        arm: ArmFiles::default(),
        labels: BTreeMap::from([("eval.test.base".to_owned(), nonce.to_owned())]),
    };
    rt.block_on(async {
        let d = DockerRuntime::connect().await.unwrap();
        let id = d.ensure_image(&spec).await.unwrap();
        (d, id)
    })
}

fn docker(args: &[&str]) {
    let o = Command::new("docker").args(args).output().unwrap();
    assert!(o.status.success(), "docker {args:?}: {}", text(&o));
}

#[test]
fn arms_over_one_base_run_on_the_frozen_ids_and_a_moved_tag_is_drift() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let (engine, base) = make_base(&rt, &nonce);
    let (_, other) = make_base(&rt, &format!("{nonce}-other"));
    assert_ne!(base, other);

    // 1. Pinned by id (the tag is informational): freeze records one thin image per arm.
    let (_tmp, proj) = small_demo_project();
    make_thin(
        &proj,
        &format!("id = \"{base}\"\nreference = \"eval-test/thin:{nonce}\""),
    );
    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let images = frozen_images(&proj);
    assert!(images.len() >= 2, "{images:?}");
    let mut digests: Vec<String> = images
        .values()
        .map(|r| {
            assert_eq!(r["source"], "thin", "{r}");
            r["digest"].as_str().unwrap().to_owned()
        })
        .collect();
    digests.sort();
    digests.dedup();
    assert_eq!(digests.len(), images.len(), "every arm has its own layer");
    let o = eval(&proj, &["verify", "--protocol", "demo"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let identity = identity_of(&proj);
    let _sweep = Sweep(format!("eval.identity={identity}"));
    let o = eval(
        &proj,
        &[
            "run",
            "--matrix",
            "demo",
            "--upstream",
            "fixture",
            "--concurrency",
            "1",
        ],
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let es = entries(&proj.join("runs/demo/ledger.sqlite"));
    let outcomes = payloads(&es, "attempt_outcome");
    assert!(!outcomes.is_empty());
    let base_layers = rt.block_on(async {
        engine
            .docker()
            .inspect_image(&base.0)
            .await
            .unwrap()
            .root_fs
            .unwrap()
            .layers
            .unwrap()
    });
    for o in &outcomes {
        assert_eq!(o["outcome"], "completed", "{o}");
        let arm = o["arm"].as_str().unwrap();
        let image = o["image"].as_str().unwrap();
        assert_eq!(
            hex(image),
            hex(images[arm]["digest"].as_str().unwrap()),
            "{o}"
        );
        // The arm image is the base's layers plus exactly one.
        let layers = rt.block_on(async {
            engine
                .docker()
                .inspect_image(image)
                .await
                .unwrap()
                .root_fs
                .unwrap()
                .layers
                .unwrap()
        });
        assert_eq!(layers.len(), base_layers.len() + 1, "{o}");
        assert_eq!(&layers[..base_layers.len()], &base_layers[..], "{o}");
    }

    // 2. Found by tag only: the tag moving to other content after freeze is drift.
    let (_tmp2, proj2) = small_demo_project();
    let tag = format!("eval-test/thin-moving:{nonce}");
    docker(&["tag", &base.0, &tag]);
    make_thin(&proj2, &format!("reference = \"{tag}\""));
    let o = eval(&proj2, &["freeze", "--protocol", "demo"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    docker(&["tag", &other.0, &tag]);
    let o = eval(&proj2, &["verify", "--protocol", "demo"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let o = eval(
        &proj2,
        &["run", "--matrix", "demo", "--upstream", "fixture"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("drift"), "{}", text(&o));
    assert!(!proj2.join("runs/demo/ledger.sqlite").exists());

    // Clean up: the arm images, then the bases (and the tag).
    rt.block_on(async {
        for r in images.values() {
            let id = ImageId(format!("sha256:{}", hex(r["digest"].as_str().unwrap())));
            let _ = engine.remove_image(&id).await;
        }
        let _ = engine
            .prune_images(&format!("eval.test.base={nonce}"), &[])
            .await;
        let _ = engine
            .prune_images(&format!("eval.test.base={nonce}-other"), &[])
            .await;
    });
    let _ = Command::new("docker").args(["rmi", &tag]).output();
}
