//! Base images by content and thin arm layers against the real engine: two arms on one base are
//! two small images sharing the base's layers, with the ids freeze computes; a `docker save`
//! archive describes the base exactly as the engine does and is loaded when the engine lacks it;
//! a base id the engine does not have is refused naming `image.id`.

use std::path::Path;

use crate::support::*;
use eval_runtimes::docker::describe_base_blocking;
use eval_runtimes::image::build_thin;
use eval_runtimes::{ArmFiles, DockerRuntime, ImageId, ImageSpec, Runtime, RuntimeDef};
use futures_util::StreamExt;

/// A base unique to this test run (its label carries the run's nonce), built by this crate's
/// own writer from the fixture definition (busybox + the static binaries).
async fn make_base(rt: &DockerRuntime, sweep: &Sweep) -> ImageId {
    let mut labels = sweep.labels();
    labels.insert("eval.test.base".into(), unique("base"));
    let spec = ImageSpec {
        def: fixture_def(),
        arm: ArmFiles {
            profile: None,
            candidate: None,
        },
        labels,
    };
    rt.ensure_image(&spec).await.unwrap()
}

/// A definition with no `[build]`: the fixture's harness over base `id` (and `extra` lines in
/// `[image]`), written to `dir/runtime.toml`.
fn thin_def(dir: &Path, id: &ImageId, extra: &str) -> eval_runtimes::LoadedDef {
    let fixture =
        std::fs::read_to_string(project_root().join("runtimes/fixture/runtime.toml")).unwrap();
    let mut table: toml::Table = toml::from_str(&fixture).unwrap();
    table.remove("build");
    // Only the arm's own files can be attested over a base (the base is pinned by id).
    table.insert(
        "attest".into(),
        toml::Value::Table(toml::from_str("paths = [\"{profile}\", \"{candidate}\"]").unwrap()),
    );
    let text = toml::to_string(&table).unwrap();
    // Replace the [image] table wholesale so the schema under test is exactly what is written.
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        if line.starts_with('[') {
            skipping = line == "[image]";
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str(&format!(
        "\n[image]\nid = \"{id}\"\nreference = \"eval-test/thin:1\"\n{extra}\n"
    ));
    let path = dir.join("runtime.toml");
    std::fs::write(&path, out).unwrap();
    RuntimeDef::load(&path).unwrap()
}

fn arm(dir: &Path, def: eval_runtimes::LoadedDef, name: &str, sweep: &Sweep) -> ImageSpec {
    let d = dir.join(name);
    std::fs::create_dir_all(d.join("candidate")).unwrap();
    std::fs::write(d.join("profile.toml"), format!("name = \"{name}\"\n")).unwrap();
    std::fs::write(d.join("candidate/plugin.js"), format!("// {name}\n")).unwrap();
    ImageSpec {
        def,
        arm: ArmFiles {
            profile: Some(d.join("profile.toml")),
            candidate: Some(d.join("candidate")),
        },
        labels: sweep.labels(),
    }
}

async fn layers(rt: &DockerRuntime, id: &ImageId) -> Vec<String> {
    rt.docker()
        .inspect_image(&id.0)
        .await
        .unwrap()
        .root_fs
        .unwrap()
        .layers
        .unwrap()
}

async fn save(rt: &DockerRuntime, id: &ImageId, to: &Path) {
    let mut out = Vec::new();
    let mut s = rt.docker().export_image(&id.0);
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    std::fs::write(to, out).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn two_arms_share_one_base_and_an_archive_loads_it() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let sweep = Sweep::new();
    let dir = tempfile::tempdir().unwrap();
    let base = make_base(&rt, &sweep).await;
    let def = thin_def(dir.path(), &base, "archive = \"base.tar\"");
    let a = arm(dir.path(), def.clone(), "a", &sweep);
    let b = arm(dir.path(), def.clone(), "b", &sweep);

    // What freeze records, computed before the engine has either arm image.
    let described = tokio::task::spawn_blocking({
        let def = def.clone();
        move || describe_base_blocking(&def)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(described.id, base);
    let frozen_a = build_thin(&a, &described).unwrap().id;
    let frozen_b = build_thin(&b, &described).unwrap().id;

    let ia = rt.ensure_image(&a).await.unwrap();
    let ib = rt.ensure_image(&b).await.unwrap();
    assert_eq!((&ia, &ib), (&frozen_a, &frozen_b));
    assert_ne!(ia, ib);
    assert_ne!(ia, base);
    let lb = layers(&rt, &base).await;
    let (la, lb2) = (layers(&rt, &ia).await, layers(&rt, &ib).await);
    assert_eq!(la.len(), lb.len() + 1);
    assert_eq!(&la[..lb.len()], &lb[..]);
    assert_eq!(&lb2[..lb.len()], &lb[..]);
    assert_ne!(la.last(), lb2.last());
    // The arm image keeps the base's config (here the fixture image's user and environment).
    let ci = rt
        .docker()
        .inspect_image(&ia.0)
        .await
        .unwrap()
        .config
        .unwrap();
    let cb = rt
        .docker()
        .inspect_image(&base.0)
        .await
        .unwrap()
        .config
        .unwrap();
    assert_eq!(
        (ci.user, ci.env, ci.working_dir),
        (cb.user, cb.env, cb.working_dir)
    );

    // A saved archive describes the base exactly as the engine does.
    save(&rt, &base, &dir.path().join("base.tar")).await;
    let from_archive =
        eval_runtimes::base::read_archive(&dir.path().join("base.tar"), Some(&base)).unwrap();
    assert_eq!(from_archive, described);

    // Without the base (and its arms) in the engine, the declared archive is loaded, and the
    // arm image comes back with the same id.
    rt.remove_image(&ia).await.unwrap();
    rt.remove_image(&ib).await.unwrap();
    rt.remove_image(&base).await.unwrap();
    assert!(!rt.has_image(&base).await.unwrap());
    let again = rt.ensure_image(&a).await.unwrap();
    assert_eq!(again, frozen_a);
    assert!(rt.has_image(&base).await.unwrap());
    rt.remove_image(&again).await.unwrap();
    rt.remove_image(&base).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_base_id_the_engine_lacks_is_refused_naming_it() {
    let Some(rt) = engine().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let missing = ImageId(format!("sha256:{}", "e".repeat(64)));
    let def = thin_def(dir.path(), &missing, "");
    let e = tokio::task::spawn_blocking({
        let def = def.clone();
        move || describe_base_blocking(&def)
    })
    .await
    .unwrap()
    .unwrap_err();
    assert!(e.contains(&missing.0), "{e}");
    let sweep = Sweep::new();
    let spec = arm(dir.path(), def, "x", &sweep);
    let e = rt.ensure_image(&spec).await.unwrap_err();
    assert_eq!(
        e.fault(),
        Some(eval_core::fault::FaultCode::ImageMissing),
        "{e}"
    );
}

/// `docker load` applies every manifest entry's `RepoTags`: an archive whose manifest names an
/// `eval-base/…:<tag>` the engine already has would move that tag onto the archive's image (the
/// cache the build scripts trust by tag). Loaded by eval, the archive adds its one image,
/// untagged, and the tag still names the image it named before.
#[tokio::test(flavor = "multi_thread")]
async fn loading_a_tagged_archive_leaves_every_tag_where_it_was() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let sweep = Sweep::new();
    let dir = tempfile::tempdir().unwrap();
    let base = make_base(&rt, &sweep).await;
    let victim = make_base(&rt, &sweep).await;
    assert_ne!(base, victim);
    let repo = format!("eval-base/{}", unique("custody"));
    let tag = |id: &ImageId| {
        let (rt, repo, id) = (&rt, repo.clone(), id.0.clone());
        async move {
            rt.docker()
                .tag_image(
                    &id,
                    Some(
                        bollard::query_parameters::TagImageOptionsBuilder::new()
                            .repo(&repo)
                            .tag("t")
                            .build(),
                    ),
                )
                .await
                .unwrap()
        }
    };
    // An archive of `base` whose manifest says `<repo>:t` (what `docker save <repo>:t` writes).
    tag(&base).await;
    let named = format!("{repo}:t");
    let mut out = Vec::new();
    let mut s = rt.docker().export_image(&named);
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    std::fs::write(dir.path().join("base.tar"), &out).unwrap();
    assert!(String::from_utf8_lossy(&out).contains(&named));
    // The tag now names the victim (the cached base the build scripts would trust); `base` goes.
    tag(&victim).await;
    rt.remove_image(&base).await.unwrap();
    assert!(!rt.has_image(&base).await.unwrap());

    let def = thin_def(dir.path(), &base, "archive = \"base.tar\"");
    let loaded = rt.resolve_base(&def).await.unwrap();
    assert_eq!(loaded.id, base);
    let now = rt.docker().inspect_image(&named).await.unwrap();
    assert_eq!(
        now.id.as_deref(),
        Some(victim.0.as_str()),
        "the load moved {named}"
    );
    let b = rt.docker().inspect_image(&base.0).await.unwrap();
    assert!(
        b.repo_tags.unwrap_or_default().is_empty(),
        "the loaded image got a tag"
    );
    let _ = rt
        .docker()
        .remove_image(
            &named,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await;
    rt.remove_image(&base).await.unwrap();
    rt.remove_image(&victim).await.unwrap();
}
