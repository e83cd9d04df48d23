//! Checks a request against its role's contract, and works out the most it may generate.

use http::HeaderMap;
use serde_json::Value;

use crate::config::{ApiKind, Contract, ParamRule};
use crate::request::ParsedRequest;

/// Every parameter through which a request sets how many tokens one choice may produce.
pub const OUTPUT_LIMIT_PARAMS: [&str; 3] =
    ["max_tokens", "max_completion_tokens", "max_output_tokens"];

/// Every parameter that multiplies the output: the upstream generates (and bills) this many
/// choices. A multiplier not named here cannot pass the allow-list unless a contract lists it,
/// and a contract that lists an unknown one takes that risk knowingly.
pub const MULTIPLIER_PARAMS: [&str; 2] = ["n", "best_of"];

/// Returns the first violation, phrased for the client.
pub fn check(
    contract: &Contract,
    api: ApiKind,
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
    if let Some(name) = req.keys().find(|k| !contract.allows_param(api, k)) {
        return Err(format!(
            "parameter {name} is not allowed by this attempt's contract"
        ));
    }
    for (name, rule) in &contract.params {
        let value = req.get(name);
        match rule {
            // `stream: false` is the API's default, and clients such as litellm leave it out.
            ParamRule::Exact(Value::Bool(false)) if name == "stream" && value.is_none() => {}
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
    // A limit the meter cannot read as a whole number would leave the reservation at the
    // default while the upstream honours the request's own value.
    let bound = output_bound(contract);
    for name in OUTPUT_LIMIT_PARAMS {
        if let Some(v) = req.get(name) {
            let Some(n) = whole(v) else {
                return Err(format!(
                    "parameter {name} must be a non-negative whole number, got {v}"
                ));
            };
            if let Some(b) = bound
                && n > b
            {
                return Err(format!(
                    "parameter {name} = {n} is above this contract's output limit of {b}"
                ));
            }
        }
    }
    content_parts(contract, api, req)?;
    for name in MULTIPLIER_PARAMS {
        if let Some(v) = req.get(name)
            && whole(v).is_none_or(|n| n < 1)
        {
            return Err(format!(
                "parameter {name} must be a positive whole number, got {v}"
            ));
        }
    }
    if let Some(h) = &contract.session_header {
        // Exactly one value: every value is forwarded, so a second one would reach the upstream
        // unchecked.
        let mut values = headers.get_all(h.as_str()).iter();
        match (values.next().map(|v| v.to_str()), values.next()) {
            (Some(Ok(v)), None) if v == session_id => {}
            (Some(_), Some(_)) => return Err(format!("header {h} must be sent once")),
            (Some(_), None) => {
                return Err(format!("header {h} does not match this attempt's session"));
            }
            (None, _) => return Err(format!("header {h} is required")),
        }
    }
    Ok(())
}

/// Every content part of the request's messages (and Anthropic's `system` blocks and the blocks
/// inside a `tool_result`) must be of a type the contract allows: a part's cost is bounded by its
/// bytes only for text. A string content is text. A part without a string `type` is refused too:
/// the upstream would read it some way the proxy did not check.
fn content_parts(contract: &Contract, api: ApiKind, req: &ParsedRequest) -> Result<(), String> {
    let allowed = || match &contract.allowed_content_parts {
        Some(l) => l.iter().cloned().collect::<Vec<_>>().join(", "),
        None => Contract::default_content_parts(api).join(", "),
    };
    let check_list = |parts: &[Value], at: &str| -> Result<(), String> {
        for (j, part) in parts.iter().enumerate() {
            let Some(kind) = part.get("type").and_then(Value::as_str) else {
                return Err(format!(
                    "{at}[{j}] is a content part without a type; this attempt's contract allows only: {}",
                    allowed()
                ));
            };
            if !contract.allows_content_part(api, kind) {
                return Err(format!(
                    "content part type {kind:?} ({at}[{j}]) is not allowed by this attempt's contract; allowed: {}",
                    allowed()
                ));
            }
        }
        Ok(())
    };
    let nested = |parts: &[Value], at: &str| -> Result<(), String> {
        check_list(parts, at)?;
        // Anthropic: a tool result may itself hold blocks (an image among them).
        for (j, part) in parts.iter().enumerate() {
            if let Some(inner) = part.get("content").and_then(Value::as_array) {
                check_list(inner, &format!("{at}[{j}].content"))?;
            }
        }
        Ok(())
    };
    if let Some(messages) = req.get("messages").and_then(Value::as_array) {
        for (i, m) in messages.iter().enumerate() {
            if let Some(parts) = m.get("content").and_then(Value::as_array) {
                nested(parts, &format!("messages[{i}].content"))?;
            }
        }
    }
    if let Some(parts) = req.get("system").and_then(Value::as_array) {
        nested(parts, "system")?;
    }
    Ok(())
}

/// A non-negative whole number, also when written as `1e3` or `1000.0` (upstreams read those
/// as the number they are).
fn whole(v: &Value) -> Option<u64> {
    if let Some(n) = v.as_u64() {
        return Some(n);
    }
    let f = v.as_f64()?;
    (f >= 0.0 && f.fract() == 0.0 && f <= 9_007_199_254_740_992.0).then_some(f as u64)
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

/// The contract's own upper bound on one choice's output (its `max_tokens` rule).
fn output_bound(contract: &Contract) -> Option<u64> {
    contract.params.get("max_tokens").and_then(|r| match r {
        ParamRule::Exact(v) => v.as_f64().map(|f| f.max(0.0) as u64),
        ParamRule::Range { max, .. } => max.map(|m| m.max(0.0) as u64),
        ParamRule::Forbidden => None,
    })
}

/// The most one call of a checked request may generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputPlan {
    /// Per choice: the largest of the request's output limits, else the contract default
    /// (never above the contract's bound).
    pub per_choice: u64,
    /// True when the request names no output limit, so the proxy must forward `per_choice`.
    pub must_forward_limit: bool,
    /// The product of the request's multipliers (`n`, `best_of`).
    pub choices: u64,
}

impl OutputPlan {
    pub fn worst_case(&self) -> u64 {
        self.per_choice.saturating_mul(self.choices)
    }
}

/// The output plan of a request that passed [`check`].
pub fn output_plan(contract: &Contract, req: &ParsedRequest) -> OutputPlan {
    let asked = OUTPUT_LIMIT_PARAMS
        .iter()
        .filter_map(|k| req.get(k).and_then(whole))
        .max();
    let default = match output_bound(contract) {
        Some(b) => contract.default_max_output_tokens.min(b),
        None => contract.default_max_output_tokens,
    };
    let choices = MULTIPLIER_PARAMS
        .iter()
        .filter_map(|k| req.get(k).and_then(whole))
        .fold(1u64, |acc, n| acc.saturating_mul(n.max(1)));
    OutputPlan {
        per_choice: asked.unwrap_or(default),
        must_forward_limit: asked.is_none(),
        choices,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn parsed(v: serde_json::Value) -> ParsedRequest {
        ParsedRequest::parse(Bytes::from(v.to_string())).unwrap()
    }

    fn open_contract() -> Contract {
        let mut c = Contract::model_only("m");
        c.allowed_params = Some(
            [
                "n",
                "best_of",
                "max_tokens",
                "max_completion_tokens",
                "max_output_tokens",
                "stream",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        );
        c.default_max_output_tokens = 1000;
        c
    }

    #[test]
    fn the_session_header_must_be_sent_once_with_this_attempts_id() {
        let mut c = Contract::model_only("m");
        c.session_header = Some("x-session".into());
        let req = parsed(serde_json::json!({"model": "m", "messages": []}));
        let check_with = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append("x-session", v.parse().unwrap());
            }
            check(&c, ApiKind::OpenAiChat, "s-1", &h, &req)
        };
        assert_eq!(check_with(&["s-1"]), Ok(()));
        assert!(check_with(&[]).unwrap_err().contains("required"));
        assert!(check_with(&["s-2"]).unwrap_err().contains("does not match"));
        // Every value would be forwarded: a second one must not ride along unchecked.
        assert!(check_with(&["s-1", "s-2"]).unwrap_err().contains("once"));
    }

    #[test]
    fn the_largest_output_limit_times_every_multiplier_is_reserved() {
        let c = open_contract();
        let r = parsed(
            serde_json::json!({"model":"m","max_tokens":10,"max_completion_tokens":300,"n":7,"best_of":3}),
        );
        check(&c, ApiKind::OpenAiChat, "s", &HeaderMap::new(), &r).unwrap();
        let plan = output_plan(&c, &r);
        assert_eq!(
            (plan.per_choice, plan.choices, plan.must_forward_limit),
            (300, 21, false)
        );
        assert_eq!(plan.worst_case(), 6300);
        let r = parsed(serde_json::json!({"model":"m","n":2}));
        let plan = output_plan(&c, &r);
        assert_eq!((plan.worst_case(), plan.must_forward_limit), (2000, true));
    }

    #[test]
    fn limits_and_multipliers_must_be_whole_numbers_within_the_bound() {
        let mut c = open_contract();
        let h = HeaderMap::new();
        for bad in [
            serde_json::json!({"model":"m","n":0}),
            serde_json::json!({"model":"m","n":2.5}),
            serde_json::json!({"model":"m","best_of":"9"}),
            serde_json::json!({"model":"m","max_tokens":1e9 + 0.5}),
            serde_json::json!({"model":"m","max_output_tokens":-1}),
        ] {
            assert!(
                check(&c, ApiKind::OpenAiChat, "s", &h, &parsed(bad.clone())).is_err(),
                "{bad}"
            );
        }
        c.params.insert(
            "max_tokens".into(),
            ParamRule::Range {
                min: None,
                max: Some(50.0),
                required: false,
            },
        );
        let over = parsed(serde_json::json!({"model":"m","max_completion_tokens":51}));
        let e = check(&c, ApiKind::OpenAiChat, "s", &h, &over).unwrap_err();
        assert!(
            e.contains("max_completion_tokens") && e.contains("50"),
            "{e}"
        );
        // The default never exceeds the bound either.
        let none = parsed(serde_json::json!({"model":"m"}));
        assert_eq!(output_plan(&c, &none).per_choice, 50);
    }

    #[test]
    fn parameters_outside_the_allow_list_are_refused_by_name() {
        let c = Contract::model_only("m");
        let h = HeaderMap::new();
        let ok = parsed(
            serde_json::json!({"model":"m","messages":[],"stream":true,"stream_options":{}}),
        );
        check(&c, ApiKind::OpenAiChat, "s", &h, &ok).unwrap();
        let e = check(
            &c,
            ApiKind::OpenAiChat,
            "s",
            &h,
            &parsed(serde_json::json!({"model":"m","logit_bias":{}})),
        )
        .unwrap_err();
        assert!(e.contains("logit_bias"), "{e}");
        // Anthropic's default list differs: `system` and `max_tokens` pass, `stream_options` not.
        check(
            &c,
            ApiKind::AnthropicMessages,
            "s",
            &h,
            &parsed(serde_json::json!({"model":"m","system":"x","max_tokens":5})),
        )
        .unwrap();
        assert!(
            check(
                &c,
                ApiKind::AnthropicMessages,
                "s",
                &h,
                &parsed(serde_json::json!({"model":"m","stream_options":{}}))
            )
            .is_err()
        );
        // A parameter the contract rules is allowed whatever the list says.
        let mut ruled = Contract::model_only("m");
        ruled.allowed_params = Some(Default::default());
        ruled
            .params
            .insert("temperature".into(), ParamRule::Exact(serde_json::json!(0)));
        check(
            &ruled,
            ApiKind::OpenAiChat,
            "s",
            &h,
            &parsed(serde_json::json!({"model":"m","messages":[],"temperature":0})),
        )
        .unwrap();
        assert!(
            check(
                &ruled,
                ApiKind::OpenAiChat,
                "s",
                &h,
                &parsed(serde_json::json!({"model":"m","temperature":0,"stream":true}))
            )
            .is_err()
        );
    }

    #[test]
    fn stream_false_means_absent_or_false() {
        let mut c = Contract::model_only("m");
        c.params
            .insert("stream".into(), ParamRule::Exact(Value::Bool(false)));
        let h = HeaderMap::new();
        check(
            &c,
            ApiKind::OpenAiChat,
            "s",
            &h,
            &parsed(serde_json::json!({"model":"m"})),
        )
        .unwrap();
        check(
            &c,
            ApiKind::OpenAiChat,
            "s",
            &h,
            &parsed(serde_json::json!({"model":"m","stream":false})),
        )
        .unwrap();
        assert!(
            check(
                &c,
                ApiKind::OpenAiChat,
                "s",
                &h,
                &parsed(serde_json::json!({"model":"m","stream":true}))
            )
            .is_err()
        );
        // `stream: true` still has to be sent.
        c.params
            .insert("stream".into(), ParamRule::Exact(Value::Bool(true)));
        assert!(
            check(
                &c,
                ApiKind::OpenAiChat,
                "s",
                &h,
                &parsed(serde_json::json!({"model":"m"}))
            )
            .is_err()
        );
    }
}
