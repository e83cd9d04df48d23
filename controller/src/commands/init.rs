//! `eval init DIR`: scaffold a self-contained evaluation project (protocol `demo`, matrix `demo`,
//! their task bundles, arm profiles and packages, and the fixture runtime definition).

use super::error::CommandError;
use crate::cli::InitArgs;
use crate::status::{CmdResult, Failure, Status};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

mod template {
    include!(concat!(env!("OUT_DIR"), "/init_template.rs"));
}

pub fn run(args: InitArgs) -> CmdResult {
    let dir = &args.dir;
    match std::fs::read_dir(dir) {
        Ok(mut items) => {
            if items.next().is_some() {
                return Err(CommandError::NotEmpty(dir.clone()).into());
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(CommandError::path(dir)(e).into()),
    }
    for (rel, bytes, exec) in template::FILES {
        write(dir, rel, bytes, *exec)?;
    }
    println!(
        "scaffolded an eval project in {} ({} files): protocol demo, matrix demo",
        dir.display(),
        template::FILES.len()
    );
    println!("next, from inside it:");
    println!("  cd {}", dir.display());
    println!("  eval plan --matrix demo");
    println!("  eval freeze --protocol demo");
    println!("  eval run --matrix demo --upstream fixture");
    Ok(Status::Ok)
}

fn write(dir: &Path, rel: &str, bytes: &[u8], exec: bool) -> Result<(), Failure> {
    let path = dir.join(rel);
    let fail = |e: std::io::Error| CommandError::path(&path)(e);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(fail)?;
    }
    std::fs::write(&path, bytes).map_err(fail)?;
    let mode = if exec { 0o755 } else { 0o644 };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(fail)?;
    Ok(())
}
