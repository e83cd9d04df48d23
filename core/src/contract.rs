//! What a protocol declares about model access and money, in the form the proxy enforces it: the
//! API a model speaks and the prices that turn metered tokens into spend. One definition, read by
//! `eval-protocols` from the protocol file and handed as is to `eval-proxy`.

use serde::{Deserialize, Serialize};

/// The wire API of an upstream model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ApiKind {
    /// OpenAI-compatible Chat Completions (OpenAI, DeepSeek, …): `Authorization: Bearer KEY`.
    #[serde(rename = "openai-chat")]
    OpenAiChat,
    /// Anthropic Messages: `x-api-key: KEY`.
    #[serde(rename = "anthropic-messages")]
    AnthropicMessages,
}

impl ApiKind {
    /// Every kind, in a fixed order (for command-line choices).
    pub const ALL: [ApiKind; 2] = [ApiKind::OpenAiChat, ApiKind::AnthropicMessages];

    /// The name protocol files and the command line use.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiKind::OpenAiChat => "openai-chat",
            ApiKind::AnthropicMessages => "anthropic-messages",
        }
    }
}

impl std::fmt::Display for ApiKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The price of one model, in US dollars per million tokens, as a protocol declares it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// The exact model id the price is for.
    pub model: String,
    /// Fresh (uncached) input tokens.
    pub input_usd_per_mtok: f64,
    /// Output tokens.
    pub output_usd_per_mtok: f64,
    /// Input tokens read from the provider's prompt cache; absent: the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_usd_per_mtok: Option<f64>,
    /// Price of input tokens written to the provider's prompt cache (Anthropic's
    /// `cache_creation_input_tokens`); absent: the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_usd_per_mtok: Option<f64>,
}

impl Price {
    /// The rate of cached input reads: the declared one, else the input rate.
    pub fn cached_input_rate(&self) -> f64 {
        self.cached_input_usd_per_mtok
            .unwrap_or(self.input_usd_per_mtok)
    }

    /// The rate of prompt-cache writes: the declared one, else the input rate.
    pub fn cache_write_rate(&self) -> f64 {
        self.cache_write_usd_per_mtok
            .unwrap_or(self.input_usd_per_mtok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_kind_names_match_the_serde_names() {
        for k in ApiKind::ALL {
            assert_eq!(
                serde_json::to_string(&k).unwrap(),
                format!("\"{}\"", k.as_str())
            );
        }
        assert_ne!(
            ApiKind::OpenAiChat.as_str(),
            ApiKind::AnthropicMessages.as_str()
        );
        assert!(serde_json::from_str::<ApiKind>("\"openai\"").is_err());
    }

    #[test]
    fn cache_writes_and_reads_are_priced_at_their_declared_rates() {
        let p: Price = serde_json::from_str(
            r#"{"model":"m","input_usd_per_mtok":3.0,"output_usd_per_mtok":15.0,"cached_input_usd_per_mtok":0.3,"cache_write_usd_per_mtok":3.75}"#,
        )
        .unwrap();
        assert_eq!((p.cached_input_rate(), p.cache_write_rate()), (0.3, 3.75));
        let plain: Price = serde_json::from_str(
            r#"{"model":"m","input_usd_per_mtok":2.0,"output_usd_per_mtok":8.0}"#,
        )
        .unwrap();
        assert_eq!(
            (plain.cached_input_rate(), plain.cache_write_rate()),
            (2.0, 2.0)
        );
        assert!(
            serde_json::from_str::<Price>(
                r#"{"model":"m","input_usd_per_mtok":2.0,"output_usd_per_mtok":8.0,"typo":1}"#
            )
            .is_err()
        );
    }
}
