//! `eval verify --protocol NAME [--state DIR] [--json]`: recompute every frozen digest; exit 3
//! listing each drifted, missing or added path, 0 when clean.

use crate::cli::VerifyArgs;
use crate::driver::driver_digest;
use crate::status::{CmdResult, Status};
use eval_protocols::Project;
use serde_json::json;

pub fn run(args: VerifyArgs) -> CmdResult {
    let project = Project::open(".");
    let report = eval_protocols::verify(
        &project,
        &args.protocol,
        &args.state.state,
        driver_digest(),
        &eval_engine::image_record::resolve_image_digest,
    )?;
    if args.json {
        let v = json!({
            "protocol": report.name,
            "identity": report.identity,
            "clean": report.clean(),
            "retired": report.retired,
            "drift": report.drift,
            "driver": {
                "frozen": report.frozen_driver,
                "current": report.current_driver,
                "matches": report.driver_matches(),
            },
        });
        let text = serde_json::to_string_pretty(&v)
            .map_err(super::error::CommandError::encode("encode the report"))?;
        println!("{text}");
    } else {
        if report.clean() {
            println!(
                "protocol {} ({}): every frozen input is unchanged",
                report.name, report.identity
            );
        } else {
            println!(
                "protocol {} ({}): {} input(s) drifted since the freeze:",
                report.name,
                report.identity,
                report.drift.len()
            );
            for d in &report.drift {
                println!("  {:<10} {}  ({})", d.change, d.path, d.detail);
            }
        }
        if report.retired {
            println!("note: this identity is retired; it can never run again");
        }
        if !report.driver_matches() {
            println!(
                "note: this eval binary's driver digest {} differs from the frozen {}; `eval run` will refuse it",
                report.current_driver, report.frozen_driver
            );
        }
    }
    if report.clean() {
        Ok(Status::Ok)
    } else {
        Ok(Status::Integrity)
    }
}
