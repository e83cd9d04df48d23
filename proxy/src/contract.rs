//! Checks a request against its role's contract.

use http::HeaderMap;
use serde_json::Value;

use crate::config::{Contract, ParamRule};
use crate::request::ParsedRequest;

/// Returns the first violation, phrased for the client.
pub fn check(
    contract: &Contract,
    session_id: &str,
    headers: &HeaderMap,
    req: &ParsedRequest,
) -> Result<(), String> {
    match req.get("model").and_then(Value::as_str) {
        Some(m) if m == contract.model => {}
        Some(m) => {
            return Err(format!(
                "model {m:?} is not allowed; this attempt may use only {:?}",
                contract.model
            ));
        }
        None => return Err("the request names no model".into()),
    }
    for (name, rule) in &contract.params {
        let value = req.get(name);
        match rule {
            ParamRule::Exact(want) => match value {
                Some(v) if values_equal(v, want) => {}
                Some(v) => return Err(format!("parameter {name} must be {want}, got {v}")),
                None => return Err(format!("parameter {name} must be sent as {want}")),
            },
            ParamRule::Range { min, max, required } => match value {
                None if *required => return Err(format!("parameter {name} is required")),
                None => {}
                Some(v) => {
                    let Some(x) = v.as_f64() else {
                        return Err(format!("parameter {name} must be a number, got {v}"));
                    };
                    if min.is_some_and(|m| x < m) || max.is_some_and(|m| x > m) {
                        return Err(format!(
                            "parameter {name} = {v} is outside [{}, {}]",
                            min.map_or("-inf".into(), |m| m.to_string()),
                            max.map_or("inf".into(), |m| m.to_string())
                        ));
                    }
                }
            },
            ParamRule::Forbidden => {
                if value.is_some() {
                    return Err(format!("parameter {name} is not allowed"));
                }
            }
        }
    }
    if let Some(h) = &contract.session_header {
        match headers.get(h.as_str()).map(|v| v.to_str()) {
            Some(Ok(v)) if v == session_id => {}
            Some(_) => return Err(format!("header {h} does not match this attempt's session")),
            None => return Err(format!("header {h} is required")),
        }
    }
    Ok(())
}

fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => x == y,
        },
        _ => a == b,
    }
}

/// The output limit a request asks for, bounded by the contract: the request's own
/// `max_tokens`/`max_completion_tokens`/`max_output_tokens` when set, else the contract default,
/// never above a contract's `max_tokens` bound.
pub fn max_output(contract: &Contract, req: &ParsedRequest) -> u64 {
    let asked = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .filter_map(|k| req.get(k).and_then(Value::as_u64))
        .max();
    let bound = contract.params.get("max_tokens").and_then(|r| match r {
        ParamRule::Exact(v) => v.as_u64(),
        ParamRule::Range { max, .. } => max.map(|m| m as u64),
        ParamRule::Forbidden => None,
    });
    let n = asked.unwrap_or(contract.default_max_output_tokens);
    bound.map_or(n, |b| n.min(b))
}
