//! The image an arm runs, as freeze, verify, the report's drift check and admission record it
//! (`eval_protocols::ImageResolver`): resolving it may build the arm's thin image, so it lives
//! with the only crate that talks to the container engine.

use eval_evidence::ledger::Digest;
use eval_protocols::protocol::Arm;
use eval_protocols::{ImageRecord, ProtocolError};
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
