//! The real harnesses' base-image cache (`runtimes/images/lib.sh`): a build reuses only the image
//! this machine recorded building from exactly the same inputs (`cached_image_id`, `record_build`),
//! never whatever the `eval-base/<name>:<prefix>` tag names. `docker load` applies an archive's
//! `RepoTags`, so a tagged archive can put any image under that tag (and any label on it).

use std::path::Path;
use std::process::{Command, Output};

use crate::support::*;
use eval_runtimes::{ArmFiles, DockerRuntime, ImageId, ImageSpec, Runtime};

/// An image unique to this test (its label carries a nonce), from the fixture definition.
async fn make_image(rt: &DockerRuntime, sweep: &Sweep) -> ImageId {
    let mut labels = sweep.labels();
    labels.insert("eval.test.base".into(), unique("cache"));
    let spec = ImageSpec {
        def: fixture_def(),
        arm: ArmFiles {
            profile: None,
            candidate: None,
        },
        labels,
    };
    let id = rt.ensure_image(&spec).await.unwrap();
    sweep.image(&id);
    id
}

/// Runs `snippet` in bash after sourcing `lib.sh`, with `EVAL_IMAGES_WORK=work`.
fn lib(work: &Path, snippet: &str, args: &[&str]) -> Output {
    let lib = project_root().join("runtimes/images/lib.sh");
    Command::new("bash")
        .arg("-c")
        .arg(format!(". \"$LIB\"; {snippet}"))
        .arg("bash")
        .args(args)
        .env("LIB", lib)
        .env("EVAL_IMAGES_WORK", work)
        .output()
        .unwrap()
}

fn cached(work: &Path, name: &str, digest: &str) -> Option<String> {
    let o = lib(work, "cached_image_id \"$1\" \"$2\"", &[name, digest]);
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

fn docker(args: &[&str]) -> Output {
    let o = Command::new("docker").args(args).output().unwrap();
    assert!(
        o.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A tagged archive loaded with `docker load` retags `eval-base/<name>:<prefix>`; the cache
/// trusts none of it. Before a build is recorded nothing is cached (the tag names the forged
/// image); after, the recorded image is returned while the tag names the forged one; once the
/// recorded image is gone nothing is cached again; a record that is a link, or that others can
/// write, is no record.
#[tokio::test(flavor = "multi_thread")]
async fn a_tagged_archive_that_retags_the_base_cache_is_not_trusted() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let sweep = Sweep::new();
    let work = tempfile::tempdir().unwrap();
    let built = make_image(&rt, &sweep).await;
    let forged = make_image(&rt, &sweep).await;
    assert_ne!(built, forged);
    let name = unique("custody");
    let digest = "c".repeat(64);
    let tag =
        String::from_utf8(lib(work.path(), "image_tag \"$1\" \"$2\"", &[&name, &digest]).stdout)
            .unwrap()
            .trim()
            .to_owned();
    assert!(tag.starts_with(&format!("eval-base/{name}:")), "{tag}");

    // The attack: an archive of the forged image whose manifest carries the cache's tag, loaded
    // with the engine's own `docker load`.
    let archive = work.path().join("forged.tar");
    docker(&["tag", &forged.0, &tag]);
    docker(&["save", "-o", archive.to_str().unwrap(), &tag]);
    docker(&["rmi", &tag]);
    docker(&["load", "-i", archive.to_str().unwrap()]);
    let named = docker(&["image", "inspect", "--format", "{{.Id}}", &tag]);
    assert_eq!(String::from_utf8_lossy(&named.stdout).trim(), forged.0);
    assert_eq!(
        cached(work.path(), &name, &digest),
        None,
        "the tag was trusted"
    );

    // A recorded build is returned, whatever the tag names.
    let o = lib(
        work.path(),
        "record_build \"$1\" \"$2\" \"$3\"",
        &[&name, &digest, &built.0],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        cached(work.path(), &name, &digest).as_deref(),
        Some(built.0.as_str())
    );
    // Other inputs (another digest) are not this record's.
    let other = "b".repeat(64);
    assert_eq!(cached(work.path(), &name, &other), None);

    // A record others can write, or a link standing in for it, is refused.
    let rec = work.path().join("built").join(&name).join(&digest);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&rec, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(
        cached(work.path(), &name, &digest),
        None,
        "a shared record was trusted"
    );
    std::fs::set_permissions(&rec, std::fs::Permissions::from_mode(0o644)).unwrap();
    let elsewhere = work.path().join("elsewhere");
    std::fs::rename(&rec, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &rec).unwrap();
    assert_eq!(
        cached(work.path(), &name, &digest),
        None,
        "a linked record was trusted"
    );
    std::fs::remove_file(&rec).unwrap();
    std::fs::rename(&elsewhere, &rec).unwrap();
    assert_eq!(
        cached(work.path(), &name, &digest).as_deref(),
        Some(built.0.as_str())
    );

    // The recorded image gone from the engine: nothing is cached (the build runs again), though
    // the tag still names an image.
    rt.remove_image(&built).await.unwrap();
    assert_eq!(cached(work.path(), &name, &digest), None);

    let _ = Command::new("docker").args(["rmi", &tag]).output();
    let _ = rt.remove_image(&forged).await;
}

/// Every base build script asks the record, never the tag, and records what it imported.
#[test]
fn every_base_build_script_reuses_only_its_recorded_build() {
    let images = project_root().join("runtimes/images");
    let mut scripts = 0;
    for e in std::fs::read_dir(&images).unwrap() {
        let build = e.unwrap().path().join("build.sh");
        let Ok(text) = std::fs::read_to_string(&build) else {
            continue;
        };
        scripts += 1;
        assert!(
            text.contains("cached_image_id \"$BUILD_NAME\" \"$digest\""),
            "{} does not ask the build record",
            build.display()
        );
        assert!(
            text.contains("record_build \"$BUILD_NAME\" \"$digest\" \"$id\""),
            "{} does not record its build",
            build.display()
        );
        assert!(
            !text.contains("docker image inspect"),
            "{} inspects an image itself",
            build.display()
        );
    }
    assert_eq!(
        scripts, 6,
        "dsh, dsh-poly, evocode-go, lang, mini-swe-agent and v04-grader"
    );
}
