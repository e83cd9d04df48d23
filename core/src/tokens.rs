//! Token counts: what the controller records per model call and per attempt, and what the report
//! reads back.

use serde::{Deserialize, Serialize};

/// Tokens of one call, or summed over an attempt or a run. This is the ledger's and the report's
/// shape (`model_call.tokens`, `attempt_outcome.tokens`, `RunData` attempts' `tokens`). The proxy
/// keeps richer per-call readings (cache writes, the upstream's raw usage, error counters) under
/// its own wire names; those convert into this with their `tokens()` methods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenCounts {
    /// All prompt tokens, cached ones included.
    pub input: u64,
    /// Completion tokens, reasoning ones included.
    pub output: u64,
    /// Prompt tokens served from the provider's cache (part of `input`).
    #[serde(default)]
    pub cached: u64,
    /// Reasoning tokens (part of `output`).
    #[serde(default)]
    pub reasoning: u64,
}

impl TokenCounts {
    /// Adds `other` field by field, saturating: a hostile upstream's huge counts must not wrap.
    pub fn add(&mut self, other: &TokenCounts) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cached = self.cached.saturating_add(other.cached);
        self.reasoning = self.reasoning.saturating_add(other.reasoning);
    }

    /// Input plus output: what budgets and the accounting cross-check count (cached and
    /// reasoning tokens are already inside them).
    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_counts_input_and_output_only_and_saturates() {
        let t = TokenCounts {
            input: 10,
            output: 5,
            cached: 7,
            reasoning: 3,
        };
        assert_eq!(t.total(), 15);
        let huge = TokenCounts {
            input: u64::MAX,
            output: 1,
            ..TokenCounts::default()
        };
        assert_eq!(huge.total(), u64::MAX);
    }

    #[test]
    fn add_sums_each_field_and_saturates() {
        let mut a = TokenCounts {
            input: 1,
            output: 2,
            cached: 3,
            reasoning: 4,
        };
        a.add(&TokenCounts {
            input: 10,
            output: 20,
            cached: 30,
            reasoning: u64::MAX,
        });
        assert_eq!(
            a,
            TokenCounts {
                input: 11,
                output: 22,
                cached: 33,
                reasoning: u64::MAX,
            }
        );
    }

    #[test]
    fn serde_shape_is_the_ledgers_and_old_data_without_cache_fields_reads() {
        let t = TokenCounts {
            input: 1,
            output: 2,
            cached: 3,
            reasoning: 4,
        };
        assert_eq!(
            serde_json::to_value(t).unwrap(),
            serde_json::json!({"input": 1, "output": 2, "cached": 3, "reasoning": 4})
        );
        let old: TokenCounts = serde_json::from_str(r#"{"input": 5, "output": 6}"#).unwrap();
        assert_eq!(
            (old.input, old.output, old.cached, old.reasoning),
            (5, 6, 0, 0)
        );
        let e =
            serde_json::from_str::<TokenCounts>(r#"{"input":1,"output":2,"total":3}"#).unwrap_err();
        assert!(e.to_string().contains("total"), "{e}");
    }
}
