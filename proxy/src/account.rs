//! The upstream account's own endpoints, read before a paid run (`eval preflight`): the model
//! list (`GET {base}/models`, which also proves the key is accepted) and the balance
//! (`GET {base}/user/balance`, DeepSeek's). They cost nothing. The key is sent here, inside this
//! crate, like every upstream call; no error or value handed back contains it (upstream text is
//! passed through the key's redactor, and the body of a refusal is not passed at all).

use std::time::Duration;

use crate::secret::{Redactor, SecretKey};

/// Longest part of an upstream error body that an error message quotes.
const QUOTE_CHARS: usize = 200;
/// Largest account response read.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// Why an account endpoint gave no usable answer. Never contains the key.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// 401/403: the key itself was refused. The body is not quoted: DeepSeek's names a part of
    /// the key.
    #[error("the upstream refused the API key (GET {endpoint}: HTTP {status})")]
    KeyRefused {
        /// The endpoint called.
        endpoint: String,
        /// 401 or 403.
        status: u16,
    },
    /// The certificate chain did not verify against the trusted roots.
    #[error(
        "the upstream's TLS certificate is not trusted (GET {endpoint}: {detail}); give its CA's PEM file with SSL_CERT_FILE"
    )]
    Untrusted {
        /// The endpoint called.
        endpoint: String,
        /// The TLS library's reason.
        detail: String,
    },
    /// No answer: connect failure, reset or timeout.
    #[error("cannot reach the upstream (GET {endpoint}): {detail}")]
    Transport {
        /// The endpoint called.
        endpoint: String,
        /// The transport's reason.
        detail: String,
    },
    /// Another non-2xx answer.
    #[error("GET {endpoint} answered HTTP {status}: {quote}")]
    Status {
        /// The endpoint called.
        endpoint: String,
        /// The upstream's status.
        status: u16,
        /// The start of the body, redacted.
        quote: String,
    },
    /// A 2xx answer whose body is not the JSON the endpoint documents.
    #[error("GET {endpoint} answered a body that is not {what}: {detail}")]
    Body {
        /// The endpoint called.
        endpoint: String,
        /// What the body should have been.
        what: &'static str,
        /// Why it is not.
        detail: String,
    },
    /// The HTTP client could not be built (TLS roots, proxy settings).
    #[error("cannot build the upstream HTTP client: {0}")]
    Client(String),
}

/// One entry of `balance_infos`.
#[derive(Debug, Clone, PartialEq)]
pub struct BalanceInfo {
    /// The currency, e.g. `USD` or `CNY`.
    pub currency: String,
    /// The balance in that currency.
    pub total_balance: f64,
}

/// `GET /user/balance`.
#[derive(Debug, Clone, PartialEq)]
pub struct Balance {
    /// Whether the account may make calls.
    pub is_available: bool,
    /// The balance per currency.
    pub infos: Vec<BalanceInfo>,
}

/// A client for one upstream's account endpoints.
pub struct AccountClient {
    base: String,
    key: SecretKey,
    redactor: Redactor,
    client: reqwest::Client,
    timeout: Duration,
}

impl AccountClient {
    /// `base` is the API base URL the proxy would forward to (e.g. `https://api.deepseek.com`).
    /// `timeout` bounds each whole request.
    pub fn new(base: &str, key: SecretKey, timeout: Duration) -> Result<Self, AccountError> {
        Self::new_pinned(base, key, timeout, &[])
    }

    /// [`Self::new`] with TLS key pins (`crate::tls_pin`): the account calls carry the key, so
    /// they are pinned like the proxy's own.
    pub fn new_pinned(
        base: &str,
        key: SecretKey,
        timeout: Duration,
        pins: &[[u8; 32]],
    ) -> Result<Self, AccountError> {
        let url = reqwest::Url::parse(base)
            .map_err(|e| AccountError::Client(format!("{base:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(AccountError::Client(format!(
                "{base:?} is not an http(s) URL"
            )));
        }
        let client = crate::server::upstream_client(timeout, None, None, pins)
            .map_err(|e| AccountError::Client(e.to_string()))?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            redactor: key.redactor(),
            key,
            client,
            timeout,
        })
    }

    /// The model ids `GET /models` lists (`data[].id`).
    pub async fn models(&self) -> Result<Vec<String>, AccountError> {
        #[derive(serde::Deserialize)]
        struct Model {
            id: String,
        }
        #[derive(serde::Deserialize)]
        struct List {
            data: Vec<Model>,
        }
        let (endpoint, body) = self.get("/models").await?;
        let list: List = serde_json::from_slice(&body).map_err(|e| AccountError::Body {
            endpoint,
            what: "a model list ({\"data\":[{\"id\":…}]})",
            detail: e.to_string(),
        })?;
        Ok(list.data.into_iter().map(|m| m.id).collect())
    }

    /// `GET /user/balance`: `is_available` and each `balance_infos[]` entry's currency and
    /// `total_balance` (DeepSeek sends it as a decimal string; a number is accepted too).
    pub async fn balance(&self) -> Result<Balance, AccountError> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Amount {
            Text(String),
            Number(f64),
        }
        #[derive(serde::Deserialize)]
        struct Info {
            currency: String,
            total_balance: Amount,
        }
        #[derive(serde::Deserialize)]
        struct Raw {
            is_available: bool,
            #[serde(default)]
            balance_infos: Vec<Info>,
        }
        let (endpoint, body) = self.get("/user/balance").await?;
        let bad = |detail: String| AccountError::Body {
            endpoint: endpoint.clone(),
            what: "a balance ({\"is_available\":…,\"balance_infos\":[…]})",
            detail,
        };
        let raw: Raw = serde_json::from_slice(&body).map_err(|e| bad(e.to_string()))?;
        let mut infos = Vec::new();
        for i in raw.balance_infos {
            let total_balance = match i.total_balance {
                Amount::Number(n) => n,
                Amount::Text(t) => t.trim().parse::<f64>().map_err(|_| {
                    bad(format!(
                        "total_balance {:?} is not a number",
                        self.redactor.redact_str(&t)
                    ))
                })?,
            };
            if !total_balance.is_finite() {
                return Err(bad("total_balance is not finite".into()));
            }
            infos.push(BalanceInfo {
                currency: self.redactor.redact_str(&i.currency),
                total_balance,
            });
        }
        Ok(Balance {
            is_available: raw.is_available,
            infos,
        })
    }

    async fn get(&self, path: &str) -> Result<(String, bytes::Bytes), AccountError> {
        let endpoint = format!("{}{path}", self.base);
        let sent = self
            .client
            .get(&endpoint)
            .bearer_auth(self.key.expose())
            .header(http::header::ACCEPT, "application/json")
            .timeout(self.timeout)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) => return Err(self.transport(endpoint, &e)),
        };
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            return Err(AccountError::KeyRefused { endpoint, status });
        }
        let body = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => return Err(self.transport(endpoint, &e)),
        };
        if body.len() > MAX_BODY {
            return Err(AccountError::Body {
                endpoint,
                what: "of a bounded size",
                detail: format!("{} bytes", body.len()),
            });
        }
        if !(200..300).contains(&status) {
            let text = String::from_utf8_lossy(&body);
            let mut quote: String = self
                .redactor
                .redact_str(text.trim())
                .chars()
                .take(QUOTE_CHARS)
                .collect();
            if quote.is_empty() {
                quote = "(empty body)".into();
            }
            return Err(AccountError::Status {
                endpoint,
                status,
                quote,
            });
        }
        Ok((endpoint, body))
    }

    /// The whole source chain (an `io::Error` hides its inner error from `source()` but shows it
    /// in `Display`), redacted; a certificate the roots do not vouch for is named as such.
    fn transport(&self, endpoint: String, e: &reqwest::Error) -> AccountError {
        let mut parts = Vec::new();
        let mut cur: Option<&dyn std::error::Error> = Some(e);
        while let Some(err) = cur {
            let s = err.to_string();
            if parts.last() != Some(&s) {
                parts.push(s);
            }
            cur = err.source();
        }
        let detail = self.redactor.redact_str(&parts.join(": "));
        if detail.contains("invalid peer certificate") || detail.contains("certificate") {
            AccountError::Untrusted { endpoint, detail }
        } else {
            AccountError::Transport { endpoint, detail }
        }
    }
}
