//! Arm images: the frozen ids and expected attestations, checked before every attempt.

use super::executor::{ArmImage, DockerExecutor, SetupError, abs};
use crate::{AttemptReport, AttemptSpec};
use eval_core::fault::FaultCode;
use eval_evidence::ledger::Digest;
use eval_protocols::TaskBundle;
use eval_protocols::protocol::Protocol;
use eval_runlog::events::{self, Attestation};
use eval_runtimes::{ArmFiles, ImageId, ImageSpec, LoadedDef, Runtime, RuntimeDef};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::OnceCell;

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
/// built image whose id differs from the frozen digest is refused here already; a thin arm's
/// image (base + arm layer) is compared with the frozen id when it is prepared, once per run.
pub fn frozen_arms(
    root: &Path,
    p: &Protocol,
    images: &BTreeMap<String, eval_protocols::ImageRecord>,
) -> Result<BTreeMap<String, FrozenArm>, SetupError> {
    let root = abs(root);
    let mut out = BTreeMap::new();
    for a in &p.arms {
        let def =
            RuntimeDef::load(&root.join(&a.runtime)).map_err(|source| SetupError::Definition {
                path: a.runtime.clone(),
                source: Box::new(source),
            })?;
        let frozen = images
            .get(&a.id)
            .and_then(|r| r.digest.as_ref())
            .map(|d| ImageId(d.to_string()));
        let built = def.def.build.is_some();
        let spec = arm_image_spec(&root, a, def);
        let expected = if built {
            let b = eval_runtimes::image::build(&spec).map_err(arm_image(&a.id))?;
            if let Some(f) = &frozen
                && f != &b.id
            {
                return Err(SetupError::ImageDrift {
                    arm: a.id.clone(),
                    built: b.id.to_string(),
                    frozen: f.to_string(),
                });
            }
            b.expected_attestation(&spec.def.def)
        } else {
            // A thin arm: the base is the engine's (checked by id when the arm's image is
            // prepared); the attested digests of the arm's own files need no engine.
            eval_runtimes::image::arm_attestation(&spec).map_err(arm_image(&a.id))?
        };
        out.insert(
            a.id.clone(),
            FrozenArm {
                image: frozen,
                expected,
            },
        );
    }
    Ok(out)
}

fn load_def(root: &Path, rel: &str) -> Result<LoadedDef, SetupError> {
    RuntimeDef::load(&root.join(rel)).map_err(|source| SetupError::Definition {
        path: rel.to_owned(),
        source: Box::new(source),
    })
}

fn arm_image(arm: &str) -> impl FnOnce(eval_runtimes::RuntimeError) -> SetupError {
    let arm = arm.to_owned();
    move |source| SetupError::ArmImage {
        arm,
        source: Box::new(source),
    }
}

/// Every arm's image as admitted (its frozen id and expected attestation).
pub(super) fn admitted_arms(
    root: &Path,
    p: &Protocol,
    frozen: &BTreeMap<String, FrozenArm>,
) -> Result<BTreeMap<String, Arc<ArmImage>>, SetupError> {
    let mut arms = BTreeMap::new();
    for a in &p.arms {
        let def = load_def(root, &a.runtime)?;
        let f = frozen
            .get(&a.id)
            .cloned()
            .ok_or_else(|| SetupError::NotAdmitted(a.id.clone()))?;
        let spec = arm_image_spec(root, a, def.clone());
        let image = ArmImage {
            def,
            spec,
            frozen_image: f.image,
            expected: f.expected,
            id: OnceCell::new(),
        };
        arms.insert(a.id.clone(), Arc::new(image));
    }
    Ok(arms)
}

/// One image per grader runtime the tasks name.
pub(super) fn grader_images(
    root: &Path,
    tasks: &[TaskBundle],
) -> Result<BTreeMap<String, Arc<ArmImage>>, SetupError> {
    let mut graders = BTreeMap::new();
    for t in tasks {
        let rel = &t.spec.grader.runtime;
        if graders.contains_key(rel) {
            continue;
        }
        let def = load_def(root, rel)?;
        let spec = ImageSpec {
            def: def.clone(),
            arm: ArmFiles::default(),
            labels: BTreeMap::new(),
        };
        let image = ArmImage {
            def,
            spec,
            frozen_image: None,
            expected: BTreeMap::new(),
            id: OnceCell::new(),
        };
        graders.insert(rel.clone(), Arc::new(image));
    }
    Ok(graders)
}

/// The image in `cell`, or `load`'s: only a success is kept (a transient engine failure is
/// that one attempt's, not the session's).
async fn ready_image<F, Fut>(
    cell: &OnceCell<ImageId>,
    load: F,
) -> Result<ImageId, (FaultCode, String)>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<ImageId, (FaultCode, String)>>,
{
    cell.get_or_try_init(load).await.cloned()
}

impl DockerExecutor {
    /// The arm's image, built or pulled once per session (once it succeeded).
    pub(super) async fn image(&self, a: &ArmImage) -> Result<ImageId, (FaultCode, String)> {
        ready_image(&a.id, || async {
            self.rt
                .ensure_image(&a.spec)
                .await
                .map_err(|e| (e.fault().unwrap_or(FaultCode::ImageMissing), e.to_string()))
        })
        .await
    }

    /// The arm's image, checked against the frozen one: its files must still make the frozen
    /// image, now, before every attempt — a byte changed after admission ends the attempt here
    /// (`Err` is the attempt's report), and no container is made.
    pub(super) async fn checked_image(
        &self,
        spec: &AttemptSpec,
        arm: &ArmImage,
    ) -> Result<ImageId, Box<AttemptReport>> {
        if arm.def.def.build.is_some()
            && let Some(frozen) = &arm.frozen_image
            && let Ok(now) = eval_runtimes::image_id(&arm.spec)
            && &now != frozen
        {
            let why = format!(
                "the arm's files now make image {now}, not the frozen {frozen}: an input changed after admission"
            );
            return Err(Box::new(self.refuse_image(spec, arm, &now, why).await));
        }
        let image = self
            .image(arm)
            .await
            .map_err(|(code, detail)| AttemptReport::infra(code, detail))?;
        if let Some(frozen) = &arm.frozen_image
            && &image != frozen
        {
            let why = format!("the arm's image is {image}, not the frozen {frozen}");
            return Err(Box::new(self.refuse_image(spec, arm, &image, why).await));
        }
        Ok(image)
    }

    /// Ends an attempt as `infra_fault(attestation_mismatch)` before any container exists,
    /// recording the refusal as the attempt's `attestation` entry.
    async fn refuse_image(
        &self,
        spec: &AttemptSpec,
        arm: &ArmImage,
        image: &ImageId,
        problem: String,
    ) -> AttemptReport {
        let payload = Attestation {
            schema: events::SCHEMA,
            attempt: spec.attempt.clone(),
            ok: false,
            image: image.0.clone(),
            reported: BTreeMap::new(),
            expected: arm
                .expected
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().unwrap_or_else(|| "absent".into())))
                .collect(),
            problems: vec![problem.clone()],
        };
        let mut report = AttemptReport::infra(
            FaultCode::AttestationMismatch,
            format!("{problem}; the agent never started"),
        );
        report.image = Some(image.0.clone());
        let digest = eval_evidence::canonical::to_vec(&payload)
            .map(|b| Digest::of(&b).to_string())
            .map_err(|e| e.to_string());
        let recorded = match digest {
            Ok(d) => self
                .control
                .rec
                .append(events::ATTESTATION, &payload)
                .await
                .map(|_| d)
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        match recorded {
            Ok(d) => report.attestation = Some(d),
            Err(e) => {
                report.recording_failure = Some(format!(
                    "cannot record the attestation of {}: {e}",
                    spec.attempt
                ));
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A first load that fails (the engine was restarting, say) is that attempt's failure; the
    /// next attempt loads again and succeeds, and only then is the id kept.
    #[tokio::test]
    async fn a_failed_image_load_is_not_kept_and_the_next_load_succeeds() {
        let cell = OnceCell::new();
        let loads = std::sync::atomic::AtomicU32::new(0);
        let load = || async {
            match loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0 => Err((
                    FaultCode::ImageMissing,
                    "the engine is restarting".to_owned(),
                )),
                _ => Ok(ImageId("sha256:ab".into())),
            }
        };
        let first = ready_image(&cell, load).await;
        assert_eq!(first.unwrap_err().0, FaultCode::ImageMissing);
        let second = ready_image(&cell, load).await.unwrap();
        assert_eq!(second, ImageId("sha256:ab".into()));
        // Kept from now on: no third load.
        assert_eq!(ready_image(&cell, load).await.unwrap(), second);
        assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
