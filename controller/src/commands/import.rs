//! `eval import`: the arguments become the importer's options (one conversion per importer,
//! below), one call into `eval_import`, and the summary printed. Harbor's environment images
//! are built here, through the engine, by the builder handed to the importer.

use crate::cli::{
    Grading, ImportCommand, ImportHarborArgs, ImportV04Args, ImportV04EvocodeArgs,
    ImportV04IcaeArgs, ImportV04RouterArgs, ImportV04SimpleArgs,
};
use crate::status::{CmdResult, Status};
use eval_import::{ImportError, SuiteOptions, Summary, evocode, harbor, icae, router, simple, v04};
use std::time::Duration;

pub fn run(cmd: ImportCommand) -> CmdResult {
    match cmd {
        ImportCommand::V04Simple(args) => v04_simple(&args),
        ImportCommand::V04Router(args) => v04_router(&args),
        ImportCommand::V04Evocode(args) => v04_evocode(&args),
        ImportCommand::V04Icae(args) => v04_icae(&args),
        ImportCommand::V04(args) => v04(&args),
        ImportCommand::Harbor(args) => harbor(&args),
    }
}

fn v04_simple(args: &ImportV04SimpleArgs) -> CmdResult {
    let s = simple::import(&args.into())?;
    println!(
        "imported v0.4's simple suite as protocol {} ({} files written): tasks {}, arms {}",
        args.protocol,
        s.written,
        s.tasks.join(", "),
        s.arms.join(", ")
    );
    println!("next:");
    println!("  eval plan --matrix {}", args.protocol);
    println!("  eval freeze --protocol {}", args.protocol);
    println!(
        "  eval run --matrix {} --upstream URL --api-key-env VAR",
        args.protocol
    );
    Ok(Status::Ok)
}

fn v04_router(args: &ImportV04RouterArgs) -> CmdResult {
    let s = router::import(&args.into())?;
    let name = &args.protocol;
    println!(
        "imported v0.4's router gate as protocol {name} ({} files written): arms {}; model-free",
        s.written,
        s.arms.join(", ")
    );
    println!("next:");
    println!("  eval plan --matrix {name}");
    println!("  eval freeze --protocol {name}");
    println!("  eval run --matrix {name} --upstream model-free");
    println!("  eval report --matrix {name}");
    Ok(Status::Ok)
}

fn v04_evocode(args: &ImportV04EvocodeArgs) -> CmdResult {
    let s = evocode::import(&args.into())?;
    print_suite("EvoCode", &args.protocol, &s);
    Ok(Status::Ok)
}

fn v04_icae(args: &ImportV04IcaeArgs) -> CmdResult {
    let s = icae::import(&args.into())?;
    print_suite("ICAE", &args.protocol, &s);
    Ok(Status::Ok)
}

/// What `v04-evocode` and `v04-icae` print.
fn print_suite(suite: &str, protocol: &str, s: &Summary) {
    println!(
        "imported v0.4's {suite} suite as protocol {protocol} ({} files written): tasks {}, arms {}",
        s.written,
        s.tasks.join(", "),
        s.arms.join(", ")
    );
    println!("next:");
    println!("  eval plan --matrix {protocol}");
    println!("  eval freeze --protocol {protocol}");
}

fn v04(args: &ImportV04Args) -> CmdResult {
    let written = v04::import(&args.into())?.written;
    let name = &args.protocol;
    if args.simple_tasks.is_empty() && args.icae_tasks.is_empty() && args.evocode_tasks.is_empty() {
        println!(
            "imported v0.4 (simple, icae, evocode) as protocol {name} ({written} files written): 90 statistical slots, 6 infrastructure slots"
        );
    } else {
        println!(
            "imported a reduced v0.4 (a subset of the tasks of simple, icae, evocode; its gates sized to it) as protocol {name} ({written} files written)"
        );
    }
    match &args.router_identity {
        Some(id) => println!(
            "precondition: paid runs wait for a passed, signed report of the router evaluation {id}"
        ),
        None => println!(
            "precondition: none pinned (no --router-identity): v0.4's router gate is not part of this protocol"
        ),
    }
    println!("next:");
    println!("  eval plan --matrix {name}");
    println!("  eval freeze --protocol {name}");
    println!("  eval run --matrix {name} --upstream URL --api-key-env VAR");
    Ok(Status::Ok)
}

fn harbor(args: &ImportHarborArgs) -> CmdResult {
    let opts = harbor::Options::try_from(args)?;
    if args.check {
        println!("{}", harbor::check(&opts)?);
        return Ok(Status::Ok);
    }
    let s = harbor::import(&opts, &build_environment)?;
    println!(
        "imported {} Harbor task(s) as protocol {} ({} files written), arms {}{}",
        s.tasks.len(),
        opts.protocol,
        s.written,
        opts.arms
            .iter()
            .map(|a| a.id.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        if s.controls {
            ", controls oracle, nop"
        } else {
            ""
        }
    );
    for (id, image) in &s.tasks {
        println!("  {id}: environment image {image}");
    }
    println!("next:");
    println!("  eval plan --matrix {}", opts.protocol);
    println!("  eval freeze --protocol {}", opts.protocol);
    Ok(Status::Ok)
}

/// Harbor's environment images are built by the engine (the import crate starts no container).
fn build_environment(
    task: &str,
    context: Vec<(String, Vec<u8>, u32)>,
    bases: Vec<String>,
    limit: Duration,
) -> Result<String, String> {
    eval_engine::environment_image::build_blocking(context, bases, task, limit)
        .map_err(|e| e.to_string())
}

impl From<&ImportV04SimpleArgs> for simple::Options {
    fn from(a: &ImportV04SimpleArgs) -> Self {
        simple::Options {
            from: a.from.clone(),
            protocol: a.protocol.clone(),
            tasks: a.tasks.clone(),
            dsh_image: a.dsh_image.clone(),
            grader_image: a.grader_image.clone(),
            router_identity: a.router_identity.clone(),
            public_key: a.public_key.clone(),
            upstream: a.upstream.clone(),
            tls_spki_sha256: a.tls_spki_sha256.clone(),
            solutions: a.solutions.clone(),
            no_controls: a.no_controls,
            allow_unpinned: a.allow_unpinned,
            grading: match a.grading {
                Grading::V04 => simple::Grading::V04,
                Grading::Hardened => simple::Grading::Hardened,
            },
        }
    }
}

impl From<&ImportV04RouterArgs> for router::Options {
    fn from(a: &ImportV04RouterArgs) -> Self {
        router::Options {
            from: a.from.clone(),
            package: a.package.clone(),
            protocol: a.protocol.clone(),
            dsh_image: a.dsh_image.clone(),
            allow_unpinned: a.allow_unpinned,
        }
    }
}

/// `v04-evocode` and `v04-icae` take the same flags into the same options.
macro_rules! suite_options_from {
    ($($args:ty),*) => {$(
        impl From<&$args> for SuiteOptions {
            fn from(a: &$args) -> Self {
                SuiteOptions {
                    from: a.from.clone(),
                    package: a.package.clone(),
                    protocol: a.protocol.clone(),
                    tasks: a.tasks.clone(),
                    dsh_image: a.dsh_image.clone(),
                    grader_image: a.grader_image.clone(),
                    allow_unpinned: a.allow_unpinned,
                }
            }
        }
    )*};
}
suite_options_from!(ImportV04EvocodeArgs, ImportV04IcaeArgs);

impl From<&ImportV04Args> for v04::Options {
    fn from(a: &ImportV04Args) -> Self {
        v04::Options {
            simple: a.simple.clone(),
            evocode: a.evocode.clone(),
            icae: a.icae.clone(),
            protocol: a.protocol.clone(),
            router_identity: a.router_identity.clone(),
            public_key: a.public_key.clone(),
            upstream: a.upstream.clone(),
            tls_spki_sha256: a.tls_spki_sha256.clone(),
            allow_unpinned: a.allow_unpinned,
            no_controls: a.no_controls,
            simple_tasks: a.simple_tasks.clone(),
            icae_tasks: a.icae_tasks.clone(),
            evocode_tasks: a.evocode_tasks.clone(),
            images: a.images.clone(),
        }
    }
}

impl TryFrom<&ImportHarborArgs> for harbor::Options {
    type Error = ImportError;

    fn try_from(a: &ImportHarborArgs) -> Result<Self, ImportError> {
        Ok(harbor::Options {
            from: a.from.clone(),
            tasks: a.tasks.clone(),
            protocol: a.protocol.clone(),
            arms: a
                .arms
                .iter()
                .map(|s| harbor::ArmOption::parse(s))
                .collect::<Result<_, _>>()?,
            dsh_image: a.dsh_image.clone(),
            repetitions: a.repetitions,
        })
    }
}
