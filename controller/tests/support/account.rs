//! DeepSeek's account endpoints as `../shared/DEEPSEEK-WIRE.md` ("Account endpoints", "Errors and
//! retries") documents them: `GET {base}/models` (`{"object":"list","data":[{"id",…}]}`),
//! `GET {base}/user/balance` (`is_available`,
//! `balance_infos[{currency,total_balance,granted_balance,topped_up_balance}]`, amounts as
//! decimal strings) and the 401 with the API's error body. `eval run` against a non-fixture
//! upstream reads the first two before its session (the preflight), so every scripted upstream
//! a run test talks to answers them through [`funded`]; the preflight tests script other
//! accounts from the same pieces.
#![allow(dead_code)]

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The models a funded scripted account lists (the test protocols' contract model among them).
pub const MODELS: [&str; 2] = ["deepseek-v4-pro", "deepseek-v4-flash"];

/// The balance of a funded scripted account: above every test protocol's worst-case spend.
pub const FUNDED_USD: &str = "1000.00";

/// `GET /user/balance`'s body.
pub fn balance_body(is_available: bool, currency: &str, total: &str) -> Value {
    json!({
        "is_available": is_available,
        "balance_infos": [{
            "currency": currency,
            "total_balance": total,
            "granted_balance": "0.00",
            "topped_up_balance": total,
        }]
    })
}

/// `GET /models`'s body.
pub fn models_body(models: &[&str]) -> Value {
    let data: Vec<_> = models
        .iter()
        .map(|id| json!({"id": id, "object": "model", "owned_by": "deepseek"}))
        .collect();
    json!({"object": "list", "data": data})
}

/// DeepSeek's 401: the API's error shape, its message naming the key's last four characters.
pub fn refused(presented: &str) -> Response {
    let tail: String = presented
        .chars()
        .rev()
        .take(4)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let body = json!({"error": {
        "message": format!("Authentication Fails, Your api key: ****{tail} is invalid"),
        "type": "authentication_error",
        "param": null,
        "code": "invalid_request_error",
    }});
    (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
}

/// For a scripted upstream's handler, after it has checked the key: the answer of a funded
/// DeepSeek account ([`MODELS`], [`FUNDED_USD`]) to `GET …/models` and `GET …/user/balance`,
/// `None` for any other request.
pub fn funded(method: &Method, path: &str) -> Option<Response> {
    if method != Method::GET {
        return None;
    }
    if path.ends_with("/models") {
        return Some(axum::Json(models_body(&MODELS)).into_response());
    }
    if path.ends_with("/user/balance") {
        return Some(axum::Json(balance_body(true, "USD", FUNDED_USD)).into_response());
    }
    None
}
