//! `eval freeze --protocol NAME [--state DIR]`: hash everything the result depends on and record
//! the identity in the registry.

use crate::cli::FreezeArgs;
use crate::driver::{DRIVER_FILES, driver_digest};
use crate::status::{CmdResult, Status};
use eval_protocols::{FreezeOutcome, Project};

pub fn run(args: FreezeArgs) -> CmdResult {
    let project = Project::open(".");
    let state = &args.state.state;
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
    Ok(Status::Ok)
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
