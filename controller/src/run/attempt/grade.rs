//! The grader container and its `score.json`.

use super::container::fault_pair;
use super::{DockerExecutor, GRADER_FAILURE};
use crate::run::AttemptSpec;
use eval_protocols::TaskBundle;
use eval_runtimes::WaitOutcome;
use eval_runtimes::policy::RoleMounts;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

impl DockerExecutor {
    pub(super) async fn grade(
        &self,
        spec: &AttemptSpec,
        task: &TaskBundle,
        task_dir: &Path,
        workspace: &Path,
        out: &Path,
    ) -> Result<(BTreeMap<String, f64>, Option<String>, Option<String>), (String, String)> {
        let g = self
            .graders
            .get(&task.spec.grader.runtime)
            .cloned()
            .ok_or_else(|| (GRADER_FAILURE.to_owned(), "no grader runtime".to_owned()))?;
        let image = self.image(&g).await?;
        let mounts = RoleMounts::Grader {
            workspace: workspace.to_path_buf(),
            hidden: task_dir.join("hidden"),
            out: out.to_path_buf(),
        };
        let mut facts = self.facts(spec);
        facts.attempt = format!("{}/grade", spec.attempt);
        let cspec = eval_runtimes::container_spec(&g.def.def, &image, &facts, &mounts)
            .map_err(|e| fault_pair(&e))?;
        let end = eval_runtimes::run_to_end(
            self.rt.as_ref(),
            &cspec,
            &[],
            Duration::from_secs(600),
            64 * 1024,
        )
        .await
        .map_err(|e| fault_pair(&e))?;
        let log = self.store.put_bytes(&end.logs).ok().map(|d| d.to_string());
        if end.outcome != (WaitOutcome::Exited { code: 0 }) {
            return Err((
                GRADER_FAILURE.into(),
                format!(
                    "the grader ended with {:?}: {}",
                    end.outcome,
                    String::from_utf8_lossy(&end.logs)
                        .chars()
                        .take(400)
                        .collect::<String>()
                ),
            ));
        }
        let score_path = out.join("score.json");
        let bytes = std::fs::read(&score_path)
            .map_err(|e| (GRADER_FAILURE.to_owned(), format!("no score.json: {e}")))?;
        let digest = self.store.put_bytes(&bytes).ok().map(|d| d.to_string());
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| (GRADER_FAILURE.to_owned(), format!("score.json: {e}")))?;
        let metrics = v
            .get("metrics")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_f64().map(|f| (k.clone(), f)))
                    .collect()
            })
            .unwrap_or_default();
        Ok((metrics, digest, log))
    }
}
