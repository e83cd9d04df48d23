//! The protocol's model contract and budgets, as the proxy takes them.

use eval_protocols::protocol::{ModelContract, Protocol};
use eval_proxy::{Budget, Contract, ParamRule};
use serde_json::{Value, json};
use std::time::Duration;

/// Maps the protocol's contract to the proxy's.
pub fn contract_of(m: &ModelContract, max_output_default: u64) -> Contract {
    let mut c = Contract::model_only(&m.model);
    for (name, b) in &m.params {
        let rule = match b.equals {
            Some(v) => ParamRule::Exact(json!(v)),
            None => ParamRule::Range {
                min: b.min,
                max: b.max,
                required: b.required,
            },
        };
        c.params.insert(name.clone(), rule);
    }
    if let Some(s) = m.stream {
        c.params
            .insert("stream".into(), ParamRule::Exact(Value::Bool(s)));
    }
    c.default_max_output_tokens = max_output_default;
    c.allowed_params = m
        .allowed_params
        .as_ref()
        .map(|l| l.iter().cloned().collect());
    // Header names are case-insensitive; the proxy compares lower-case names.
    c.allowed_headers = m
        .allowed_headers
        .as_ref()
        .map(|l| l.iter().map(|h| h.to_ascii_lowercase()).collect());
    c.allowed_content_parts = m
        .allowed_content_parts
        .as_ref()
        .map(|l| l.iter().cloned().collect());
    c
}

pub(super) fn agent_budget(p: &Protocol) -> Budget {
    Budget {
        max_requests: Some(p.budgets.attempt.max_requests),
        max_tokens: Some(p.budgets.attempt.max_tokens),
        max_wall_time: Some(Duration::from_secs(p.budgets.attempt.wall_seconds)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn contracts_map_bounds_and_exact_values() {
        let m: ModelContract = toml::from_str(
            "api = \"openai-chat\"\nmodel = \"m-1\"\nstream = true\n[params.temperature]\nequals = 0.0\nrequired = true\n[params.max_tokens]\nmax = 100.0\n",
        )
        .unwrap();
        let c = contract_of(&m, 32);
        assert_eq!(c.model, "m-1");
        assert_eq!(c.params["temperature"], ParamRule::Exact(json!(0.0)));
        assert_eq!(
            c.params["max_tokens"],
            ParamRule::Range {
                min: None,
                max: Some(100.0),
                required: false
            }
        );
        assert_eq!(c.params["stream"], ParamRule::Exact(Value::Bool(true)));
        assert_eq!(c.default_max_output_tokens, 32);
        assert_eq!(c.allowed_params, None);
        assert_eq!(c.allowed_headers, None);
    }

    #[test]
    fn contracts_map_allow_lists_with_lower_case_header_names() {
        let m: ModelContract = toml::from_str(
            "api = \"openai-chat\"\nmodel = \"m\"\nallowed_params = [\"tools\", \"n\"]\nallowed_headers = [\"User-Agent\", \"X-Session\"]\n",
        )
        .unwrap();
        let c = contract_of(&m, 32);
        let params: Vec<&str> = c
            .allowed_params
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        assert_eq!(params, ["n", "tools"]);
        let headers: Vec<&str> = c
            .allowed_headers
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        assert_eq!(headers, ["user-agent", "x-session"]);
    }
}
