//! Arms over a base image named by content (no `[build]`): freeze records each arm's thin image
//! id or refuses a base it cannot resolve (exit 2, naming `image.id`); `eval run` runs the arms
//! on the frozen ids, one base shared; a tag that moved to other content is drift (exit 3).

use crate::support::*;

pub(crate) use crate::support::thin_arms::*;

#[test]
fn freeze_refuses_a_base_it_cannot_resolve_naming_the_field() {
    let (_tmp, proj) = small_demo_project();
    let missing = format!("sha256:{}", "e".repeat(64));
    make_thin(&proj, &format!("id = \"{missing}\""));
    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("runtimes/fixture/runtime.toml"), "{out}");
    assert!(out.contains("image.id"), "{out}");
    assert!(out.contains(&missing), "{out}");
    assert!(!proj.join("runs/freezes/demo.json").exists());
}

#[test]
fn freeze_refuses_an_arm_file_its_image_cannot_hold_instead_of_recording_unresolved() {
    let (_tmp, proj) = small_demo_project();
    // A link whose target the ustar writer cannot store (over 100 bytes), inside the package.
    let pkg = proj.join("protocols/demo/arms/v0.4-auto/package");
    assert!(pkg.is_dir());
    let target = format!("{}.js", "t".repeat(120));
    std::fs::write(pkg.join(&target), "x").unwrap();
    std::os::unix::fs::symlink(&target, pkg.join("long-link.js")).unwrap();
    static_binaries();
    let o = eval(&proj, &["freeze", "--protocol", "demo"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("v0.4-auto"), "{out}");
    assert!(out.contains(&target), "{out}");
    assert!(!proj.join("runs/freezes/demo.json").exists());
}
