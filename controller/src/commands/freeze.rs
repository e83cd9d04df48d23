//! `eval freeze --protocol NAME [--state DIR]`: hash everything the result depends on and record
//! the identity in the registry.

use crate::cli::FreezeArgs;
use crate::driver::{DRIVER_FILES, driver_digest};
use crate::status::{CmdResult, Status};
use eval_protocols::{FreezeOutcome, Project};
use std::path::Path;

pub fn run(args: FreezeArgs) -> CmdResult {
    let project = Project::open(".");
    let state = &args.state.state;
    // The pilot's figures are computed before anything is frozen: a pilot that is missing, not a
    // ledger, or a run of this very protocol is refused (exit 2) with nothing recorded.
    let pilot = match &args.pilot {
        Some(path) => Some((path, pilot_figures(&project, &args, path)?)),
        None => None,
    };
    let outcome = eval_protocols::freeze(
        &project,
        &args.protocol,
        state,
        driver_digest(),
        &eval_engine::image_record::resolve_image_digest,
    )?;
    match outcome {
        FreezeOutcome::Frozen { identity, file } => {
            println!("frozen protocol {} as {identity}", args.protocol);
            println!("  freeze manifest: {}", file.display());
            println!(
                "  registry: {}",
                state
                    .join(eval_protocols::registry::REGISTRY_FILE)
                    .display()
            );
            println!(
                "  driver: {} ({DRIVER_FILES} source files)",
                driver_digest()
            );
        }
        FreezeOutcome::AlreadyFrozen { identity, file } => {
            println!(
                "protocol {} is already frozen as {identity} with these exact bytes; nothing to do ({})",
                args.protocol,
                file.display()
            );
        }
    }
    for line in super::preconditions::lines(&project, &args.protocol, state) {
        println!("{line}");
    }
    print_calibration(&project.load(&args.protocol)?)?;
    if let Some((path, f)) = pilot {
        println!(
            "false-fail under no effect, from pilot {} ({}, a run of {}), {} replicates, seed {}:",
            path.display(),
            f.identity,
            f.protocol,
            args.replicates,
            f.seed
        );
        for r in &f.rates {
            println!("{}", r.line());
        }
    }
    Ok(Status::Ok)
}

/// `--pilot`: each suite gate's false-fail rate on the pilot's noise (the computation `eval plan
/// --calibrate` prints, `plan_calibrate::pilot_false_fail`), refusing a pilot that is a run of
/// the protocol being frozen (by name: a frozen name has one identity, and freezing other bytes
/// under it is refused anyway).
fn pilot_figures(
    project: &Project,
    args: &FreezeArgs,
    path: &Path,
) -> Result<super::plan_calibrate::PilotFalseFail, crate::status::Failure> {
    let loaded = project.load(&args.protocol)?;
    let f =
        super::plan_calibrate::pilot_false_fail(&loaded, path, &args.state.state, args.replicates)?;
    if f.protocol == args.protocol {
        return Err(super::plan_calibrate::pilot_err(
            path,
            &format!(
                "this is a run of {} ({}), the protocol being frozen; the noise must come from a pilot, never from the evaluated protocol's own run",
                f.protocol, f.identity
            ),
        )
        .into());
    }
    Ok(f)
}

/// Replicates of the null simulation behind each interval gate's calibration line: a standard
/// error under one percentage point at the rates that matter (2.5-15 %).
const CALIBRATION_REPS: u64 = 2_000;

/// For every interval gate (a bootstrap or contrast lower bound), how often its bound clears
/// zero under a null of no effect at the suite's number of tasks — so that a gate that passes
/// by chance far more often than its nominal rate is seen before any paid run, not after.
fn print_calibration(loaded: &eval_protocols::Loaded) -> Result<(), crate::status::Failure> {
    use eval_evidence::stats::calibrate::{CalibrateConfig, calibrate};
    let plan = &loaded.protocol.statistics;
    {
        for (gate, rule, n) in eval_report::power::interval_rules(loaded) {
            let method = rule.method.clone().unwrap_or_else(|| plan.method.clone());
            // v0.4's method draws 20,000 resamples per interval; simulating thousands of suites
            // with it would make every freeze take minutes. Its interval is a sampled percentile
            // bootstrap, so the exact percentile bootstrap stands in for it here (and says so).
            let simulated = if method == "v04-percentile" {
                "percentile".to_string()
            } else {
                method.clone()
            };
            let c = calibrate(&CalibrateConfig {
                n,
                methods: vec![simulated.clone()],
                confidence: plan.confidence,
                reps: CALIBRATION_REPS,
                effect: 0.5,
                seed: plan.seed,
                resamples: 1_000,
                threads: 0,
            })?;
            for row in &c.rows {
                println!(
                    "calibration: gate {} rule {} ({method}{}, {n} tasks): under no effect its bound clears zero in {:.1}% of simulated runs (nominal {:.1}%, {:.1}x); power at an effect of 0.5 sd: {:.0}%{}",
                    gate.id,
                    rule.id,
                    if simulated == method {
                        String::new()
                    } else {
                        format!(", simulated as {simulated}")
                    },
                    100.0 * row.false_pass_rate,
                    100.0 * row.nominal,
                    row.false_pass_ratio,
                    100.0 * row.power,
                    if row.warn {
                        " — WARNING: over twice its nominal false-pass rate; with this few tasks the gate is a robustness check, not population-calibrated evidence"
                    } else {
                        ""
                    }
                );
            }
            println!(
                "power: {}",
                eval_report::power::rule_power(loaded, gate, rule, n)?.line()
            );
        }
    }
    Ok(())
}
