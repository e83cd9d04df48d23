//! The image's own configuration against the real Docker engine: a busybox image whose config
//! sets `Env`, `WorkingDir`, `User`, `Entrypoint` and `Cmd` runs under the policy, and what the
//! harness process saw (environment, directory, ids, arguments, mounts) is read back from the
//! workspace. Then `{prompt_text}` arrives as one argument, byte for byte.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::*;
use bollard::Docker;
use bollard::models::{ContainerConfig, ContainerCreateBody};
use bollard::query_parameters::{CommitContainerOptionsBuilder, RemoveContainerOptionsBuilder};
use eval_runtimes::image::ImageId;
use eval_runtimes::policy;
use eval_runtimes::{Runtime, RuntimeDef, WaitOutcome, run_to_end};

const PROFILE: &str = "name = \"native\"\nskill = 1.0\nstream = true\nclarify = \"critical\"\n";

/// What the image's `Cmd` runs (after `Entrypoint` = busybox): it records what it sees.
const SEE: &str = r#"
/bin/busybox env > /workspace/env.txt
/bin/busybox pwd > /workspace/pwd.txt
/bin/busybox id > /workspace/id.txt
for a in "$@"; do printf '[%s]\n' "$a"; done > /workspace/argv.txt
/bin/busybox cat /proc/mounts > /workspace/mounts.txt
/bin/busybox cp /bin/busybox /cache/busybox && /cache/busybox true && echo exec-ok > /workspace/exec.txt
/bin/busybox cp /bin/busybox /home/agent/busybox && { /home/agent/busybox true || echo noexec-refused > /workspace/noexec.txt; }
exit 0
"#;

const IMAGE_USER: (u32, u32) = (4242, 4243);

/// `base` with a new config (a commit of a never-started container), labelled for the sweep.
async fn derive(sweep: &Sweep, base: &ImageId) -> ImageId {
    let docker = Docker::connect_with_defaults().unwrap();
    let labels: std::collections::HashMap<String, String> = sweep.labels().into_iter().collect();
    let c = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            ContainerCreateBody {
                image: Some(base.0.clone()),
                labels: Some(labels.clone()),
                // Never started; the engine wants a command to create it.
                cmd: Some(vec!["/bin/busybox".into(), "true".into()]),
                network_disabled: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let config = ContainerConfig {
        env: Some(vec![
            "PATH=/img/bin:/usr/bin:/bin".into(),
            "IMG_ONLY=from the image".into(),
            "HOME=/root-from-image".into(),
            "LANG=C.UTF-8".into(),
        ]),
        working_dir: Some("/opt/eval".into()),
        user: Some(format!("{}:{}", IMAGE_USER.0, IMAGE_USER.1)),
        entrypoint: Some(vec!["/bin/busybox".into()]),
        cmd: Some(vec![
            "sh".into(),
            "-c".into(),
            SEE.into(),
            "argv0".into(),
            "one arg".into(),
            "two".into(),
        ]),
        labels: Some(labels),
        ..Default::default()
    };
    let opts = CommitContainerOptionsBuilder::new()
        .container(&c.id)
        .repo("eval-test/image-config")
        .tag(&sweep.label)
        .build();
    let id = docker.commit_container(opts, config).await;
    let rm = RemoveContainerOptionsBuilder::new().force(true).build();
    docker.remove_container(&c.id, Some(rm)).await.unwrap();
    let image = ImageId(id.unwrap().id);
    sweep.image(&image);
    image
}

fn control(expected: BTreeMap<String, Option<String>>) -> std::sync::Arc<Control> {
    std::sync::Arc::new(Control {
        expected,
        answers: BTreeMap::new(),
        seen: Seen::default(),
    })
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The options of the mount at `target` in a `/proc/mounts` text.
fn mount_options<'a>(mounts: &'a str, target: &str) -> Vec<&'a str> {
    mounts
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f.get(1) == Some(&target))
        .and_then(|f| f.get(3).map(|o| o.split(',').collect()))
        .unwrap_or_else(|| panic!("no mount at {target} in {mounts}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_config_reaches_the_harness_and_prompt_text_is_one_argument() {
    let Some(rt) = engine().await else { return };
    static_binaries();
    let sweep = Sweep::new();
    let loaded = fixture_def();
    let mut def: RuntimeDef = loaded.def.clone();
    // Silent where the image speaks: user, working directory, command. HOME overrides the
    // image's; /cache is an executable tmpfs.
    def.user = None;
    def.workdir = None;
    def.harness.command = None;
    def.tmpfs_exec = vec!["/cache".into()];
    def.env = BTreeMap::from([
        ("HOME".into(), "/home/agent".into()),
        ("OPENAI_BASE_URL".into(), "{base_url}".into()),
    ]);
    let dirs = attempt_dirs(&def);
    let spec = arm_spec(&sweep, dirs.root.path(), PROFILE, b"v1\n");
    let frozen = eval_runtimes::image::expected_attestation(&spec).unwrap();
    let base = rt.ensure_image(&spec).await.unwrap();
    sweep.image(&base);
    let image = derive(&sweep, &base).await;
    let config = rt.inspect_image(&image).await.unwrap();
    assert_eq!(config.workdir.as_deref(), Some("/opt/eval"));

    // The workspace and the socket go to the user the policy derives from the image.
    let ids = policy::effective_user(&def, &config).unwrap();
    assert_eq!(ids, IMAGE_USER);
    eval_runtimes::host::prepare_workspace(&dirs.workspace, ids).unwrap();
    let mut socket_owner = def.clone();
    socket_owner.user = Some(format!("{}:{}", ids.0, ids.1));
    let c = control(frozen);
    let server = serve_socket(&dirs.socket, &socket_owner, c.clone());

    let cspec = policy::container_spec(
        &def,
        &image,
        &config,
        &facts(&sweep, &unique("imgcfg")),
        &agent_mounts(&dirs),
    )
    .unwrap();
    let end = run_to_end(
        &rt,
        &cspec,
        &[b"sk-never"],
        Duration::from_secs(60),
        64 * 1024,
    )
    .await
    .unwrap();
    let logs = String::from_utf8_lossy(&end.logs).into_owned();
    assert_eq!(end.outcome, WaitOutcome::Exited { code: 0 }, "{logs}");
    assert_eq!(c.seen.attest_calls.load(Ordering::SeqCst), 1, "{logs}");

    let ws = &dirs.workspace;
    let env: Vec<String> = read(ws, "env.txt").lines().map(str::to_owned).collect();
    for want in [
        "IMG_ONLY=from the image",
        "LANG=C.UTF-8",
        "PATH=/img/bin:/usr/bin:/bin",
        "HOME=/home/agent",
        "OPENAI_BASE_URL=http://127.0.0.1:8080/v1",
    ] {
        assert!(env.iter().any(|e| e == want), "{want} not in {env:?}");
    }
    assert!(
        !env.iter().any(|e| e.contains("root-from-image")),
        "{env:?}"
    );
    assert_eq!(read(ws, "pwd.txt"), "/opt/eval\n");
    let id = read(ws, "id.txt");
    assert!(id.starts_with("uid=4242 gid=4243"), "{id}");
    assert_eq!(read(ws, "argv.txt"), "[one arg]\n[two]\n");
    let mounts = read(ws, "mounts.txt");
    for noexec in ["/tmp", "/home/agent"] {
        let o = mount_options(&mounts, noexec);
        assert!(
            ["noexec", "nosuid", "nodev", "rw"]
                .iter()
                .all(|x| o.contains(x)),
            "{noexec}: {o:?}"
        );
    }
    let o = mount_options(&mounts, "/cache");
    assert!(
        !o.contains(&"noexec") && o.contains(&"nosuid") && o.contains(&"nodev"),
        "/cache: {o:?}"
    );
    assert_eq!(read(ws, "exec.txt"), "exec-ok\n");
    assert_eq!(read(ws, "noexec.txt"), "noexec-refused\n");

    // The definition's own command, PATH and workdir; the prompt's text as one argument.
    let text =
        "Fix \"the bug\" in 'a b.py';  don't run `rm -rf /` $(id) {workspace} \\n\n\tlast line ✓";
    std::fs::write(&dirs.prompt, text).unwrap();
    def.workdir = Some("/workspace".into());
    def.env
        .insert("PATH".into(), "/opt/venv/bin:/usr/bin:/bin".into());
    def.harness.command = Some(vec![
        "/bin/busybox".into(),
        "sh".into(),
        "-c".into(),
        "printf '%s' \"$1\" > /workspace/prompt_arg.txt; echo $# > /workspace/argc.txt; /bin/busybox env > /workspace/env2.txt; /bin/busybox pwd > /workspace/pwd2.txt".into(),
        "argv0".into(),
        "{prompt_text}".into(),
    ]);
    let cspec = policy::container_spec(
        &def,
        &image,
        &config,
        &facts(&sweep, &unique("imgcfg-text")),
        &agent_mounts(&dirs),
    )
    .unwrap();
    let end = run_to_end(
        &rt,
        &cspec,
        &[b"sk-never"],
        Duration::from_secs(60),
        64 * 1024,
    )
    .await
    .unwrap();
    let logs = String::from_utf8_lossy(&end.logs).into_owned();
    assert_eq!(end.outcome, WaitOutcome::Exited { code: 0 }, "{logs}");
    assert_eq!(read(ws, "prompt_arg.txt"), text);
    assert_eq!(read(ws, "argc.txt"), "1\n");
    assert_eq!(read(ws, "pwd2.txt"), "/workspace\n");
    let env2 = read(ws, "env2.txt");
    assert!(
        env2.lines()
            .any(|l| l == "PATH=/opt/venv/bin:/usr/bin:/bin"),
        "{env2}"
    );
    assert!(
        env2.lines().any(|l| l == "IMG_ONLY=from the image"),
        "{env2}"
    );
    server.abort();
    assert_eq!(rt.sweep(&sweep.filter()).await.unwrap(), 0);
}
