//! `eval gc [--dry-run]`: frees what no unfinished run or kept freeze needs — containers a killed
//! run left, eval's images, attempt scratch, artifacts no ledger references, stale socket
//! directories — and prints what it freed. It never touches a ledger, and never an artifact a
//! ledger references.
//!
//! A run is *live* when its ledger's single writer cannot be taken (a session holds it); gc
//! takes every other run's writer for as long as it works, so no session can start under it,
//! and leaves everything of a live run alone.

use crate::cli::GcArgs;
use crate::status::{CmdResult, Failure, Status};
use eval_evidence::ledger::{Digest, LedgerReader, LedgerWriter};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

struct RunDir {
    dir: PathBuf,
    identity: Option<String>,
    /// Held while gc works; `None` when a session holds it (the run is live).
    writer: Option<LedgerWriter>,
}

#[derive(Default)]
struct Freed {
    lines: Vec<String>,
    bytes: u64,
}

impl Freed {
    fn add(&mut self, dry: bool, what: String, bytes: u64) {
        self.lines.push(format!(
            "{} {what}{}",
            if dry { "would remove" } else { "removed" },
            if bytes > 0 {
                format!(" ({bytes} bytes)")
            } else {
                String::new()
            }
        ));
        self.bytes += bytes;
    }
}

/// Bytes under `p`, links not followed.
fn tree_bytes(p: &Path) -> u64 {
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if !m.is_dir() {
        return m.len();
    }
    std::fs::read_dir(p)
        .map(|rd| rd.flatten().map(|e| tree_bytes(&e.path())).sum())
        .unwrap_or(0)
}

fn run_dirs(state: &Path) -> Vec<RunDir> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(state) else {
        return out;
    };
    let mut dirs: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    dirs.sort();
    for dir in dirs {
        let ledger = dir.join("ledger.sqlite");
        if !ledger.is_file() {
            continue;
        }
        let identity = LedgerReader::open(&ledger).ok().and_then(|r| {
            let mut id = None;
            let _ = r.for_each_of_kind(eval_runlog::events::RUN_STARTED, |e| {
                id = e.payload_json().ok().and_then(|v| {
                    v.get("identity")
                        .and_then(|i| i.as_str())
                        .map(str::to_owned)
                });
                std::ops::ControlFlow::Break(())
            });
            id
        });
        let writer = LedgerWriter::open(&ledger).ok();
        out.push(RunDir {
            dir,
            identity,
            writer,
        });
    }
    out
}

/// Every artifact digest any ledger file of `dir` references; `None` when one of them cannot be
/// read (then nothing of that store is removed).
fn referenced(dir: &Path) -> Option<BTreeSet<String>> {
    let mut refs = BTreeSet::new();
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) != Some("sqlite") {
            continue;
        }
        let entries = LedgerReader::open(&p).and_then(|r| r.entries()).ok()?;
        for r in eval_report::data::referenced_artifacts(&entries) {
            refs.insert(r.digest);
        }
    }
    Some(refs)
}

fn remove_path(p: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn io_fail(p: &Path, e: std::io::Error) -> Failure {
    Failure::usage(format!("{}: {e}", p.display()))
}

/// Attempt scratch and unreferenced artifacts of a run no session holds.
fn gc_files(run: &RunDir, dry: bool, freed: &mut Freed) -> Result<(), Failure> {
    let attempts = run.dir.join("attempts");
    if !dry {
        // A killed session's attempt filesystems and their loop devices, even where its
        // resume was refused and no session will run this again.
        eval_engine::attempt::disk::unmount_stale(&attempts);
    }
    if let Ok(rd) = std::fs::read_dir(&attempts) {
        let root = eval_evidence::leftovers::Beneath::open(&attempts).ok();
        for e in rd.flatten() {
            let p = e.path();
            let bytes = tree_bytes(&p);
            if !dry {
                // A session killed mid-attempt left that attempt's own filesystem mounted: it
                // goes first, so its files go with it and its mount point can be removed.
                eval_engine::attempt::disk::unmount(&p).map_err(|err| io_fail(&p, err))?;
                // The agent's tree is hostile: removed without following a link, at any depth.
                let name = e.file_name().to_string_lossy().into_owned();
                match &root {
                    Some(b) => b
                        .remove(&name)
                        .map_err(|err| Failure::usage(format!("{}: {err}", p.display())))?,
                    None => remove_path(&p).map_err(|err| io_fail(&p, err))?,
                }
            }
            freed.add(dry, format!("attempt scratch {}", p.display()), bytes);
        }
    }
    let store = run.dir.join("artifacts");
    if !store.is_dir() {
        return Ok(());
    }
    let Some(refs) = referenced(&run.dir) else {
        freed.lines.push(format!(
            "kept every artifact of {}: one of its ledgers cannot be read",
            run.dir.display()
        ));
        return Ok(());
    };
    if let Ok(rd) = std::fs::read_dir(store.join("tmp")) {
        for e in rd.flatten() {
            let p = e.path();
            let bytes = tree_bytes(&p);
            if !dry {
                remove_path(&p).map_err(|err| io_fail(&p, err))?;
            }
            freed.add(
                dry,
                format!("unfinished artifact write {}", p.display()),
                bytes,
            );
        }
    }
    let (mut n, mut bytes) = (0u64, 0u64);
    for fan in std::fs::read_dir(store.join("sha256"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for obj in std::fs::read_dir(fan.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = obj.file_name().to_string_lossy().into_owned();
            let digest = format!("sha256:{name}");
            if Digest::parse(&digest).is_none() || refs.contains(&digest) {
                continue;
            }
            let p = obj.path();
            bytes += tree_bytes(&p);
            n += 1;
            if !dry {
                remove_path(&p).map_err(|err| io_fail(&p, err))?;
            }
        }
    }
    if n > 0 {
        freed.add(
            dry,
            format!(
                "{n} artifact(s) no ledger of {} references",
                run.dir.display()
            ),
            bytes,
        );
    }
    Ok(())
}

/// `$TMPDIR/evs-*` socket directories (ours) with sockets none of which answers.
fn gc_sockets(dry: bool, freed: &mut Freed) {
    let tmp = std::env::temp_dir();
    let Ok(rd) = std::fs::read_dir(&tmp) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("evs-") {
            continue;
        }
        let dir = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&dir) else {
            continue;
        };
        if !meta.is_dir()
            || std::os::unix::fs::MetadataExt::uid(&meta) != rustix::process::geteuid().as_raw()
        {
            continue;
        }
        let mut sockets = 0;
        let mut live = false;
        for sub in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let sock = sub.path().join("a.sock");
            if sock.exists() {
                sockets += 1;
                live |= std::os::unix::net::UnixStream::connect(&sock).is_ok();
            }
        }
        // A directory without sockets may be a live session's between attempts (and an empty
        // one costs nothing): only one whose sockets all refuse is a killed session's.
        if live || sockets == 0 {
            continue;
        }
        if !dry && remove_path(&dir).is_err() {
            continue;
        }
        freed.add(dry, format!("socket directory {}", dir.display()), 0);
    }
}

/// Image ids the freezes of `state` record: `(kept, retired)`, those of kept (not retired)
/// freezes and those only retired freezes name.
fn frozen_images(state: &Path) -> Result<(BTreeSet<String>, BTreeSet<String>), Failure> {
    let reg = eval_protocols::Registry::open(state)
        .map_err(|e| Failure::usage(format!("{}: {e}", state.display())))?;
    let mut keep = BTreeSet::new();
    let mut retired = BTreeSet::new();
    for e in &reg.entries {
        let Ok(rec) = serde_json::from_slice::<eval_protocols::registry::FreezeRecord>(&e.payload)
        else {
            continue;
        };
        let into = if reg.retirement(&rec.identity).is_some() {
            &mut retired
        } else {
            &mut keep
        };
        if let Ok(doc) = eval_protocols::freeze::read_doc(state, &rec) {
            for img in doc.images.values() {
                if let Some(d) = &img.digest {
                    into.insert(d.to_string());
                }
            }
        }
    }
    retired.retain(|d| !keep.contains(d));
    Ok((keep, retired))
}

async fn gc_engine(
    args: &GcArgs,
    state_id: Option<&str>,
    runs: &[RunDir],
    retired: &BTreeSet<String>,
    freed: &mut Freed,
) -> Result<(), Failure> {
    let docker = eval_runtimes::DockerRuntime::connect()
        .await
        .map_err(|e| Failure::usage(format!("the container engine: {e}")))?;
    use eval_runtimes::runtime::Runtime as _;
    let engine =
        |e: eval_runtimes::RuntimeError| Failure::usage(format!("the container engine: {e}"));
    // Containers of runs of this state no session holds (an identity with a live run anywhere
    // in this state is left alone: a smoke run shares its real run's identity).
    let live: BTreeSet<&str> = runs
        .iter()
        .filter(|r| r.writer.is_none())
        .filter_map(|r| r.identity.as_deref())
        .collect();
    let idle: BTreeSet<&str> = runs
        .iter()
        .filter_map(|r| r.identity.as_deref())
        .filter(|i| !live.contains(i))
        .collect();
    // Only containers this state directory's sessions started (`run::owner`): another state
    // directory's run of the same identity may be live, and gc cannot see its writer. No state
    // id: no session of this state directory ever started a container.
    let owners: Vec<String> = match state_id {
        Some(sid) => idle
            .iter()
            .map(|identity| eval_engine::owner::owner_label(sid, identity))
            .collect(),
        None => Vec::new(),
    };
    for (identity, label) in idle.iter().zip(owners) {
        let found = docker.containers_with_label(&label).await.map_err(engine)?;
        if found.is_empty() {
            continue;
        }
        if !args.dry_run {
            docker.sweep(&label).await.map_err(engine)?;
        }
        for (id, names) in found {
            freed.add(
                args.dry_run,
                format!(
                    "container {} {} (left by a run of {identity})",
                    &id[..id.len().min(12)],
                    names.join(",")
                ),
                0,
            );
        }
    }
    for (id, tags, size) in docker
        .images_with_label(&args.images_label)
        .await
        .map_err(engine)?
    {
        // Only images this state directory's retired freezes name and no kept one does: an
        // image named by no freeze of this state may be another state directory's, in use.
        if !retired.contains(&id) {
            continue;
        }
        let removed = args.dry_run || docker.remove_unused_image(&id).await.map_err(engine)?;
        if removed {
            freed.add(
                args.dry_run,
                format!("image {} {}", &id[..id.len().min(19)], tags.join(",")),
                size,
            );
        }
    }
    Ok(())
}

pub fn run(args: GcArgs) -> CmdResult {
    let state = &args.state;
    let runs = run_dirs(state);
    let mut freed = Freed::default();
    for r in &runs {
        if r.writer.is_none() {
            freed
                .lines
                .push(format!("kept {}: a session is running it", r.dir.display()));
            continue;
        }
        gc_files(r, args.dry_run, &mut freed)?;
    }
    gc_sockets(args.dry_run, &mut freed);
    if !args.no_engine {
        let (_, retired) = frozen_images(state)?;
        let state_id = eval_engine::owner::state_id(state, false)
            .map_err(|e| Failure::usage(format!("{}: {e}", state.display())))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::usage(format!("cannot start the async runtime: {e}")))?;
        rt.block_on(gc_engine(
            &args,
            state_id.as_deref(),
            &runs,
            &retired,
            &mut freed,
        ))?;
    }
    for l in &freed.lines {
        println!("{l}");
    }
    println!(
        "{} {} bytes",
        if args.dry_run { "would free" } else { "freed" },
        freed.bytes
    );
    drop(runs);
    Ok(Status::Ok)
}
