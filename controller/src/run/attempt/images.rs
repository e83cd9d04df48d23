//! Arm images: the frozen ids and expected attestations, checked before every attempt.

use super::SetupError;
use eval_protocols::protocol::Protocol;
use eval_runtimes::{ArmFiles, ImageId, ImageSpec, LoadedDef, RuntimeDef};
use std::collections::BTreeMap;
use std::path::Path;
use tokio::sync::OnceCell;

pub(super) struct ArmImage {
    pub(super) def: LoadedDef,
    pub(super) spec: ImageSpec,
    /// The image id the freeze recorded (`None`: the freeze could not resolve it).
    pub(super) frozen_image: Option<ImageId>,
    pub(super) expected: BTreeMap<String, Option<String>>,
    pub(super) id: OnceCell<Result<ImageId, (String, String)>>,
}

/// An arm as admitted: the image id its freeze recorded and the digests its shim must report.
/// Computed once, right after `eval verify` found the inputs equal to the frozen ones, so that a
/// byte changed later is compared with the frozen bytes and never with itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FrozenArm {
    pub image: Option<ImageId>,
    pub expected: BTreeMap<String, Option<String>>,
}

/// The image an arm's files make now (profile and candidate package read when it is built).
pub(super) fn arm_image_spec(
    root: &Path,
    a: &eval_protocols::protocol::Arm,
    def: LoadedDef,
) -> ImageSpec {
    ImageSpec {
        def,
        arm: ArmFiles {
            profile: Some(root.join(&a.profile)),
            candidate: a.package.as_ref().map(|pkg| root.join(pkg)),
        },
        labels: BTreeMap::new(),
    }
}

/// Every arm's [`FrozenArm`]: the image digest from the freeze file (`images`), the expected
/// attestation from the files as they are now (call it only when verify found no drift). A
/// built image whose id differs from the frozen digest is refused here already.
pub fn frozen_arms(
    root: &Path,
    p: &Protocol,
    images: &BTreeMap<String, eval_protocols::ImageRecord>,
) -> Result<BTreeMap<String, FrozenArm>, SetupError> {
    let root = super::abs(root);
    let mut out = BTreeMap::new();
    for a in &p.arms {
        let def = RuntimeDef::load(&root.join(&a.runtime))
            .map_err(|e| SetupError::Definition(format!("{}: {e}", a.runtime)))?;
        let frozen = images
            .get(&a.id)
            .and_then(|r| r.digest.as_ref())
            .map(|d| ImageId(d.to_string()));
        let built = def.def.build.is_some();
        let spec = arm_image_spec(&root, a, def);
        let b = eval_runtimes::image::build(&spec)
            .map_err(|e| SetupError::Definition(format!("arm {}: {e}", a.id)))?;
        if built
            && let Some(f) = &frozen
            && f != &b.id
        {
            return Err(SetupError::Definition(format!(
                "arm {}: its files build image {}, the freeze recorded {f}",
                a.id, b.id
            )));
        }
        out.insert(
            a.id.clone(),
            FrozenArm {
                image: frozen,
                expected: b.expected_attestation(&spec.def.def),
            },
        );
    }
    Ok(out)
}
