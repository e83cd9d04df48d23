//! Budgets and meters. A call reserves its worst case before it is forwarded and settles with its
//! real usage when it ends, all under one lock per attempt role and one for the run, so concurrent
//! calls can never together pass a limit.

use std::sync::Mutex;
use std::time::Instant;

use eval_core::tokens::TokenCounts;
use serde::{Deserialize, Serialize};

use crate::config::{Budget, Price, RunBudget, RunSeed};
use crate::usage::Usage;

/// What one role of one attempt used. Not a [`TokenCounts`]: besides tokens it counts calls,
/// errors and spend, and its field names are the proxy's `meter` wire format; [`RoleMeter::tokens`]
/// gives the shared counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleMeter {
    /// Requests forwarded upstream.
    pub calls: u64,
    /// Forwarded calls answered with 2xx that ended as the API defines an end and carried usage
    /// (the model's turns; the tokens below are theirs).
    pub turns: u64,
    /// Prompt tokens of the turns, cached ones included.
    pub input_tokens: u64,
    /// Output tokens of the turns, reasoning included.
    pub output_tokens: u64,
    /// Prompt tokens the upstream served from its cache.
    pub cached_input_tokens: u64,
    /// Prompt tokens written to the upstream's cache (Anthropic).
    pub cache_creation_tokens: u64,
    /// Output tokens spent on reasoning.
    pub reasoning_tokens: u64,
    /// 2xx calls whose usage never arrived (counted in the budget at their reservation).
    pub unmetered_calls: u64,
    /// 2xx calls that are not turns: cut, stalled, reset or closed before the API's end marker,
    /// or without usage (the unmetered ones are among them).
    #[serde(default)]
    pub incomplete_calls: u64,
    /// The incomplete calls' reservations (what the budget counts them at, unless cut at close).
    #[serde(default)]
    pub incomplete_reserved_tokens: u64,
    /// Bytes the incomplete calls streamed before they broke off.
    #[serde(default)]
    pub incomplete_streamed_bytes: u64,
    /// Tokens of usage the incomplete calls showed before they broke off (not in the counts above).
    #[serde(default)]
    pub incomplete_seen_tokens: u64,
    /// Requests refused for breaking the role's model contract.
    pub contract_violations: u64,
    /// Requests refused because a budget could not hold their reservation.
    pub budget_exhaustions: u64,
    /// Every upstream failure: the sum of the three kinds below.
    pub upstream_errors: u64,
    /// Upstream answered 4xx (other than 429): caused by the request, so by the agent.
    #[serde(default)]
    pub upstream_client_errors: u64,
    /// Upstream answered 5xx or 429 after the proxy's retries: the provider's fault.
    #[serde(default)]
    pub upstream_server_errors: u64,
    /// No answer from the upstream (connect, reset, timeout): the network's fault.
    #[serde(default)]
    pub upstream_transport_errors: u64,
    /// What the role's calls cost, at the protocol's prices.
    pub spend_usd: f64,
    /// Upstream 401/403 (the proxy's key refused) and 402 (the account out of balance): counted
    /// here, not among the errors above' kinds — no request of an agent causes them.
    #[serde(default)]
    pub upstream_account_refusals: u64,
    /// Provider faults the proxy saw (see [`ProviderFault`]), however the call ended.
    #[serde(default)]
    pub provider_faults: u64,
    /// The latest provider fault, cleared by every later complete turn: when it is set at the
    /// end of an attempt, the agent's last call failed on the provider's side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_provider_fault: Option<ProviderFault>,
}

/// A failure of the provider's that the proxy saw on the wire, with what identifies it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderFault {
    /// `account` (401/403/402), `status` (429, 5xx), `insufficient_system_resource`,
    /// `keep_alive_only` (a stream of comments closed without data), `stall` (no data for the
    /// idle timeout; comments are not progress).
    pub kind: String,
    /// The upstream's status.
    pub status: Option<u16>,
    /// `sha256:<hex>` of the upstream's (redacted) response body, when one was read.
    pub body_digest: Option<String>,
    /// The call's seq in its attempt.
    pub seq: u64,
    /// What the proxy saw, in words.
    pub detail: String,
}

impl RoleMeter {
    /// The role's tokens as the ledger and the report count them.
    pub fn tokens(&self) -> TokenCounts {
        TokenCounts {
            input: self.input_tokens,
            output: self.output_tokens,
            cached: self.cached_input_tokens,
            reasoning: self.reasoning_tokens,
        }
    }
}

#[derive(Debug)]
pub(crate) struct RoleState {
    pub budget: Budget,
    pub meter: RoleMeter,
    reserved_tokens: u64,
    used_tokens: u64,
    requests: u64,
}

#[derive(Debug, Default)]
struct RunState {
    used_tokens: u64,
    reserved_tokens: u64,
    used_spend: f64,
    reserved_spend: f64,
    requests: u64,
}

pub(crate) struct RunLedger {
    limits: Option<RunBudget>,
    state: Mutex<RunState>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Reservation {
    pub tokens: u64,
    pub spend: f64,
}

pub(crate) enum Refusal {
    Requests(u64),
    Tokens { scope: &'static str, limit: u64 },
    Spend(f64),
    WallTime,
    Unpriced(String),
}

impl Refusal {
    pub fn message(&self) -> String {
        match self {
            Refusal::Requests(n) => format!("budget exhausted: this attempt may make {n} requests"),
            Refusal::Tokens { scope, limit } => format!(
                "budget exhausted: this call's worst case would pass the {scope} limit of {limit} tokens"
            ),
            Refusal::Spend(l) => {
                format!(
                    "budget exhausted: this call's worst case would pass the run's spend limit of ${l}"
                )
            }
            Refusal::WallTime => "budget exhausted: the attempt's wall-time budget is over".into(),
            Refusal::Unpriced(m) => {
                format!("budget exhausted: model {m:?} has no price and the run has a spend limit")
            }
        }
    }
}

impl RoleState {
    pub fn new(budget: Budget) -> Self {
        Self {
            budget,
            meter: RoleMeter::default(),
            reserved_tokens: 0,
            used_tokens: 0,
            requests: 0,
        }
    }
}

pub(crate) fn spend(price: Option<&Price>, usage: &Usage) -> f64 {
    let Some(p) = price else { return 0.0 };
    let fresh = usage
        .input_tokens
        .saturating_sub(usage.cached_input_tokens)
        .saturating_sub(usage.cache_creation_tokens);
    (fresh as f64 * p.input_usd_per_mtok
        + usage.cached_input_tokens as f64 * p.cached_input_rate()
        + usage.cache_creation_tokens as f64 * p.cache_write_rate()
        + usage.output_tokens as f64 * p.output_usd_per_mtok)
        / 1e6
}

impl RunLedger {
    pub fn new(limits: Option<RunBudget>, seed: RunSeed) -> Self {
        let state = RunState {
            used_tokens: seed.tokens,
            used_spend: seed.spend_usd.max(0.0),
            requests: seed.requests,
            ..RunState::default()
        };
        Self {
            limits,
            state: Mutex::new(state),
        }
    }

    /// Reserves `input + max_output` tokens (and their worst-case price) for a role and the run,
    /// or refuses without reserving anything.
    pub fn reserve(
        &self,
        role: &Mutex<RoleState>,
        started: Instant,
        model: &str,
        price: Option<&Price>,
        input: u64,
        max_output: u64,
    ) -> Result<Reservation, Refusal> {
        let tokens = input.saturating_add(max_output);
        let worst = Usage {
            input_tokens: input,
            output_tokens: max_output,
            ..Usage::default()
        };
        let spend_worst = spend(price, &worst);
        let mut r = role.lock().unwrap_or_else(|p| p.into_inner());
        let mut run = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if r.budget
            .max_wall_time
            .is_some_and(|w| started.elapsed() >= w)
        {
            return Err(Refusal::WallTime);
        }
        if let Some(n) = r.budget.max_requests
            && r.requests >= n
        {
            return Err(Refusal::Requests(n));
        }
        if let Some(limit) = r.budget.max_tokens
            && r.used_tokens + r.reserved_tokens + tokens > limit
        {
            return Err(Refusal::Tokens {
                scope: "attempt",
                limit,
            });
        }
        if let Some(limit) = self.limits.map(|l| l.max_tokens)
            && run.used_tokens + run.reserved_tokens + tokens > limit
        {
            return Err(Refusal::Tokens {
                scope: "run",
                limit,
            });
        }
        // A call that can generate nothing (a model listing) costs nothing, priced or not.
        if let Some(limit) = self.limits.map(|l| l.max_spend_usd)
            && tokens > 0
        {
            if price.is_none() {
                return Err(Refusal::Unpriced(model.to_owned()));
            }
            if run.used_spend + run.reserved_spend + spend_worst > limit {
                return Err(Refusal::Spend(limit));
            }
        }
        r.requests += 1;
        run.requests += 1;
        r.reserved_tokens += tokens;
        run.reserved_tokens += tokens;
        run.reserved_spend += spend_worst;
        Ok(Reservation {
            tokens,
            spend: spend_worst,
        })
    }

    /// Replaces a reservation by what was really used; with no usage the reservation itself is
    /// kept as used (worst case), because the upstream may have charged it.
    pub fn settle(
        &self,
        role: &Mutex<RoleState>,
        res: Reservation,
        usage: Option<&Usage>,
        price: Option<&Price>,
    ) -> f64 {
        let (tokens, cost) = match usage {
            Some(u) => (u.total_tokens(), spend(price, u)),
            None => (res.tokens, res.spend),
        };
        let mut r = role.lock().unwrap_or_else(|p| p.into_inner());
        let mut run = self.state.lock().unwrap_or_else(|p| p.into_inner());
        r.reserved_tokens = r.reserved_tokens.saturating_sub(res.tokens);
        r.used_tokens += tokens;
        run.reserved_tokens = run.reserved_tokens.saturating_sub(res.tokens);
        run.used_tokens += tokens;
        run.reserved_spend = (run.reserved_spend - res.spend).max(0.0);
        run.used_spend += cost;
        cost
    }

    /// Releases a reservation for a call that never reached the upstream.
    pub fn release(&self, role: &Mutex<RoleState>, res: Reservation) {
        let mut r = role.lock().unwrap_or_else(|p| p.into_inner());
        let mut run = self.state.lock().unwrap_or_else(|p| p.into_inner());
        r.reserved_tokens = r.reserved_tokens.saturating_sub(res.tokens);
        run.reserved_tokens = run.reserved_tokens.saturating_sub(res.tokens);
        run.reserved_spend = (run.reserved_spend - res.spend).max(0.0);
    }

    pub fn used(&self) -> (u64, f64) {
        let run = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (run.used_tokens, run.used_spend)
    }

    pub fn requests(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .requests
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_meter_tokens_take_each_count_from_its_own_field() {
        let m = RoleMeter {
            calls: 9,
            turns: 8,
            input_tokens: 100,
            output_tokens: 20,
            cached_input_tokens: 64,
            cache_creation_tokens: 7,
            reasoning_tokens: 12,
            ..RoleMeter::default()
        };
        assert_eq!(
            m.tokens(),
            TokenCounts {
                input: 100,
                output: 20,
                cached: 64,
                reasoning: 12
            }
        );
    }
}
