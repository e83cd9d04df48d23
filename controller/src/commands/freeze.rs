//! `eval freeze --protocol NAME [--state DIR]`: hash everything the result depends on and record
//! the identity in the registry.

use crate::cli::FreezeArgs;
use crate::driver::{DRIVER_FILES, driver_digest};
use crate::status::{CmdResult, Status};
use eval_evidence::ledger::Digest;
use eval_protocols::protocol::Arm;
use eval_protocols::{FreezeOutcome, ImageRecord, Project, ProtocolError};
use eval_runtimes::definition::DefinitionError;
use std::path::Path;

/// The container image an arm names, as freeze and verify record it:
///
/// - a definition without `[build]` names a base image: its description comes from the engine
///   (by `image.id`, else `image.reference`) or else from `image.archive`'s config, and the
///   recorded digest is the id of the arm's thin image (the base plus one layer holding the
///   profile and candidate package) — source `thin`. A base that cannot be resolved, or whose
///   id is not `image.id`, is an input error naming `image.id` (exit 2), never `unresolved`;
/// - a definition with `[build]`: a pinned `image.id` wins (`pinned`), else the
///   content-addressed id `eval_runtimes::image_id` computes without an engine (`computed`);
///   if the static binaries are not built here, `unresolved` (the definition's whole directory
///   and the driver, which builds those binaries, are frozen); any other failure to build the
///   image is an input error.
pub fn resolve_image_digest(root: &Path, arm: &Arm) -> Result<ImageRecord, ProtocolError> {
    let pinned = eval_protocols::pinned_image(root, arm)?;
    // A definition that does not load (a path field that could reach outside the workspace or
    // hide a fixed mount, a missing field) is an input error at freeze, pinned image or not.
    let file = root.join(&arm.runtime);
    let def = match eval_runtimes::RuntimeDef::load(&file) {
        Ok(def) => def,
        Err(DefinitionError::Invalid { field, detail, .. }) => {
            return Err(ProtocolError::Field {
                file,
                field,
                message: detail,
            });
        }
        Err(DefinitionError::Toml { source, .. }) => {
            return Err(ProtocolError::Input {
                file,
                message: source.to_string().trim_end().to_owned(),
            });
        }
        Err(DefinitionError::Read { .. }) => return Ok(pinned),
    };
    let thin = def.def.build.is_none();
    let spec = eval_runtimes::ImageSpec {
        def,
        arm: eval_runtimes::ArmFiles {
            profile: Some(root.join(&arm.profile)),
            candidate: arm.package.as_ref().map(|p| root.join(p)),
        },
        labels: std::collections::BTreeMap::new(),
    };
    if thin {
        let base = eval_runtimes::docker::describe_base_blocking(&spec.def).map_err(|message| {
            ProtocolError::Field {
                file: file.clone(),
                field: "image.id".into(),
                message,
            }
        })?;
        let built =
            eval_runtimes::image::build_thin(&spec, &base).map_err(|e| ProtocolError::Input {
                file: file.clone(),
                message: format!("arm {}: {e}", arm.id),
            })?;
        return Ok(ImageRecord {
            digest: Digest::from_hex(built.id.hex()),
            source: "thin".into(),
            reference: Some(if spec.def.def.image.reference.is_empty() {
                base.id.0.clone()
            } else {
                format!("{} ({})", spec.def.def.image.reference, base.id)
            }),
        });
    }
    if let Some(id) = &spec.def.def.image.id {
        return Ok(ImageRecord {
            digest: Digest::from_hex(id.trim_start_matches("sha256:")),
            source: "pinned".into(),
            ..pinned
        });
    }
    match eval_runtimes::image_id(&spec) {
        Ok(id) => Ok(ImageRecord {
            digest: Digest::from_hex(id.hex()),
            source: "computed".into(),
            ..pinned
        }),
        // The static binaries are the driver's build products (the driver digest binds them).
        Err(eval_runtimes::RuntimeError::StaticBinary(_)) => Ok(pinned),
        // Anything else (a file the image cannot hold, a link target too long for the tar
        // writer) would fail at run too: an input error now, never a silent `unresolved`.
        Err(e) => Err(ProtocolError::Input {
            file,
            message: format!("arm {}: its image cannot be built: {e}", arm.id),
        }),
    }
}

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
        &resolve_image_digest,
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
        for (gate, rule, n) in interval_rules(loaded) {
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
            println!("power: {}", rule_power(loaded, gate, rule, n)?.line());
        }
    }
    Ok(())
}

/// Every interval rule (a bootstrap or contrast lower bound) of a gate on a suite, with the
/// suite's number of tasks: the rules `eval freeze` prints calibration and power for and the
/// report shows power for.
fn interval_rules(
    loaded: &eval_protocols::Loaded,
) -> Vec<(&eval_core::gates::Gate, &eval_core::gates::Rule, usize)> {
    use eval_evidence::gates::Statistic;
    let mut out = Vec::new();
    for gate in &loaded.protocol.gates {
        let Some(suite) = gate.suite.as_deref() else {
            continue;
        };
        let Some(n) = loaded
            .matrix
            .suites
            .iter()
            .find(|s| s.id == suite)
            .map(|s| s.tasks.len())
        else {
            continue;
        };
        for rule in &gate.rules {
            if matches!(
                rule.statistic,
                Statistic::BootstrapLower | Statistic::ContrastLower
            ) {
                out.push((gate, rule, n));
            }
        }
    }
    out
}

/// The rule's power at the declared effect (`[power.<gate>]`) and its minimum detectable effect
/// at 80 % power, from one simulation of the gate's own interval at n tasks (see
/// `eval_evidence::stats::power::rule_power`). Without a declaration the effect is in task-level
/// sd units. The one computation behind both freeze's `power:` line and the report's table.
fn rule_power(
    loaded: &eval_protocols::Loaded,
    gate: &eval_core::gates::Gate,
    rule: &eval_core::gates::Rule,
    n: usize,
) -> Result<eval_evidence::stats::power::RulePower, eval_evidence::stats::StatsError> {
    let plan = &loaded.protocol.statistics;
    let method = rule.method.as_deref().unwrap_or(&plan.method);
    eval_evidence::stats::power::rule_power(&eval_evidence::stats::power::RulePowerInput {
        gate: &gate.id,
        rule: &rule.id,
        method,
        n,
        confidence: plan.confidence,
        seed: plan.seed,
        threshold: rule.threshold.unwrap_or(0.0),
        declared: loaded
            .protocol
            .power
            .get(&gate.id)
            .map(|s| (s.effect, s.sd)),
    })
}

/// Power of every interval rule, for the report. A rule whose simulation cannot run (a suite
/// with no tasks) has no row — at freeze the same rule made `eval freeze` fail.
pub(crate) fn power_rows(
    loaded: &eval_protocols::Loaded,
) -> Vec<eval_evidence::stats::power::RulePower> {
    interval_rules(loaded)
        .into_iter()
        .filter_map(|(gate, rule, n)| rule_power(loaded, gate, rule, n).ok())
        .collect()
}
