//! Round metrics of a multi-round attempt (the Harbor multi-step format of EvoCode-Bench): what
//! each round's tests printed — `CASE_RESULT case_id= origin_step= requirement_ref= case_type=
//! status= …` lines, one `CASE_SUMMARY total_cases= success_count= fail_count=` line — and the
//! round's `reward.txt`, turned into per-attempt metrics a gate may name ([`ROUND_METRICS`]).
//!
//! Two families are computed side by side from the same bytes:
//!
//! - **v0.4's, exactly** (`v04_*`): Plan Lattice 0414dfa `eval/v0.4/driver/lib/evocode.mjs`,
//!   `parseEvoVerifierOutput`, `summarizeEvoRounds` and `parseHarborJob`, reproduced down to
//!   JavaScript's `\s`, `Number()` and `String.prototype.trim`. Where v0.4 throws (a round that
//!   printed no `CASE_RESULT`, a reward that is not a number, a reward count that differs from
//!   the verifier-round count) the three are absent and [`V04Metrics`] is the reason.
//! - **corrected** (`rounds_*`): a case is identified by a stable key (origin step, requirement
//!   and the line's `scenario="…"`, never the per-round ordinal `case_id` alone); every declared
//!   round counts, an unbuilt (no `CASE_RESULT`), ungraded or unreached one as 0; counts come from
//!   the case lines, not from a `CASE_SUMMARY` anything in the output could have printed.
//!
//! Pure: bytes in, numbers out; no input makes it panic, and the work is linear in the input.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Serialize;

/// The per-attempt metrics of a multi-round task, as a gate names them.
/// - `v04_regressions`, `v04_cumulative_case_score`, `v04_score`: v0.4's three, exactly.
/// - `rounds_regressions`: distinct stable case keys that passed when last observed and fail
///   (or vanish in an unbuilt round) in a later round.
/// - `rounds_cumulative_case_score`: mean over every declared round of 100·passed/cases
///   (0 for a round unbuilt, ungraded or unreached).
/// - `rounds_score`: Σ over declared rounds of the reward (a number in [0, 1]; else 0).
/// - `rounds_mean_reward`: `rounds_score` / declared rounds (Harbor's `mean` strategy).
pub const ROUND_METRICS: &[&str] = &[
    "v04_regressions",
    "v04_cumulative_case_score",
    "v04_score",
    "rounds_regressions",
    "rounds_cumulative_case_score",
    "rounds_score",
    "rounds_mean_reward",
];

/// The most `CASE_RESULT` lines read from one round's output; beyond, the round is
/// unscorable (its output is attacker-reachable: the tests may print what the agent's code
/// prints).
pub const MAX_CASES_PER_ROUND: usize = 100_000;

/// What one round left: its tests' output and `reward.txt`, each absent when there was none.
/// A declared round with no `RoundInput` was not reached.
#[derive(Clone, Copy, Debug)]
pub struct RoundInput<'a> {
    /// 1-based round number, as in `steps/round-N`.
    pub round: u32,
    /// What the round's tests printed (Harbor's `test-stdout.txt`); `None`: they did not run.
    pub output: Option<&'a [u8]>,
    /// The bytes of the round's `reward.txt`; `None`: there was none.
    pub reward: Option<&'a [u8]>,
}

/// One `CASE_RESULT` line, its five fields as written, plus the `scenario` when the line
/// carries one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CaseLine {
    /// `case_id=` (in EvoCode-Bench a per-round ordinal, `c001`, …).
    pub case_id: String,
    /// `origin_step=` (`round-N`).
    pub origin_step: String,
    /// `requirement_ref=`.
    pub requirement_ref: String,
    /// `case_type=`.
    pub case_type: String,
    /// `status=` (`success` or `fail`).
    pub status: String,
    /// `scenario="…"` after the status, when present.
    pub scenario: Option<String>,
}

/// One round's output, parsed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ParsedOutput {
    /// Every `CASE_RESULT` match, in order (at most [`MAX_CASES_PER_ROUND`]).
    pub cases: Vec<CaseLine>,
    /// The first `CASE_SUMMARY` line at a line start: total, successes, failures (as
    /// JavaScript's `Number` reads the digits).
    pub summary: Option<[f64; 3]>,
    /// More than [`MAX_CASES_PER_ROUND`] lines: the rest were not read.
    pub overflow: bool,
}

/// What a round came to, for the corrected metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RoundState {
    /// The tests ran and printed case lines.
    Tested,
    /// The tests ran and printed no `CASE_RESULT` (the workspace did not build).
    Unbuilt,
    /// The round was reached but its tests did not run or printed too much to read.
    Ungraded,
    /// The attempt ended before the round.
    Unreached,
}

/// One declared round, as the corrected metrics saw it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RoundGrade {
    /// 1-based round number.
    pub round: u32,
    /// What the round came to.
    pub state: RoundState,
    /// Distinct stable case keys the round printed.
    pub cases: u64,
    /// Of those, the ones every line of which says `success`.
    pub passed: u64,
    /// 100·passed/cases (0 when not tested).
    pub case_score: f64,
    /// The reward counted (0 when absent or not a number in [0, 1]).
    pub reward: f64,
    /// Stable keys that passed when last observed and do not pass in this round.
    pub regressed: Vec<String>,
}

/// v0.4's three metrics, or why v0.4 would have had none.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum V04Metrics {
    /// What `parseHarborJob` returns.
    Computed {
        /// `historicalRequirementRegressions`.
        regressions: f64,
        /// `cumulativeCaseScore`.
        cumulative_case_score: f64,
        /// `score`.
        score: f64,
    },
    /// What v0.4 throws (its metrics are void for the attempt).
    Void(String),
}

/// Everything computed for one attempt.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RoundMetrics {
    /// Declared rounds.
    pub declared: u32,
    /// Per declared round, in order.
    pub rounds: Vec<RoundGrade>,
    /// v0.4's metrics.
    pub v04: V04Metrics,
    /// Corrected: distinct regressed stable keys.
    pub regressions: f64,
    /// Corrected: mean case score over declared rounds.
    pub cumulative_case_score: f64,
    /// Corrected: Σ reward over declared rounds.
    pub score: f64,
    /// Corrected: `score` / declared.
    pub mean_reward: f64,
    /// What a reader of the numbers should know (duplicate keys, a summary that disagrees with
    /// the lines, a reward that is not a number, lines without a scenario, …).
    pub notes: Vec<String>,
}

impl RoundMetrics {
    /// The metrics by their [`ROUND_METRICS`] name; v0.4's are absent when v0.4 is void.
    pub fn named(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        if let V04Metrics::Computed {
            regressions,
            cumulative_case_score,
            score,
        } = self.v04
        {
            m.insert("v04_regressions".to_owned(), regressions);
            m.insert(
                "v04_cumulative_case_score".to_owned(),
                cumulative_case_score,
            );
            m.insert("v04_score".to_owned(), score);
        }
        if self.declared > 0 {
            m.insert("rounds_regressions".to_owned(), self.regressions);
            m.insert(
                "rounds_cumulative_case_score".to_owned(),
                self.cumulative_case_score,
            );
            m.insert("rounds_score".to_owned(), self.score);
            m.insert("rounds_mean_reward".to_owned(), self.mean_reward);
        }
        m
    }
}

/// Computes both families for an attempt of `declared` rounds from what its rounds left.
/// Inputs for rounds outside `1..=declared` are ignored (noted); of two inputs for one round the
/// first counts (noted).
pub fn summarize(declared: u32, inputs: &[RoundInput<'_>]) -> RoundMetrics {
    let mut notes = Vec::new();
    let mut by_round: BTreeMap<u32, RoundInput<'_>> = BTreeMap::new();
    for i in inputs {
        if i.round == 0 || i.round > declared {
            notes.push(format!(
                "round {} is not one of the task's {declared} rounds: ignored",
                i.round
            ));
        } else if let std::collections::btree_map::Entry::Vacant(e) = by_round.entry(i.round) {
            e.insert(*i);
        } else {
            notes.push(format!(
                "round {} was given twice: the first counts",
                i.round
            ));
        }
    }
    let parsed: BTreeMap<u32, ParsedOutput> = by_round
        .iter()
        .filter_map(|(r, i)| i.output.map(|o| (*r, parse_output(o))))
        .collect();
    let v04 = v04_metrics(&parsed, &by_round);
    let (rounds, regressions) = corrected(declared, &by_round, &parsed, &mut notes);
    let n = f64::from(declared.max(1));
    let score: f64 = rounds.iter().map(|g| g.reward).sum();
    let cumulative: f64 = rounds.iter().map(|g| g.case_score).sum::<f64>() / n;
    RoundMetrics {
        declared,
        v04,
        regressions: regressions as f64,
        cumulative_case_score: cumulative,
        score,
        mean_reward: score / n,
        rounds,
        notes,
    }
}

/// JavaScript's `\s` (WhiteSpace and LineTerminator of ECMA-262): Unicode's White_Space without
/// U+0085, plus U+FEFF.
fn js_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{B}' | '\u{C}' | '\r' | ' ' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

/// Where `^` of a `/m` regular expression may match: after a LineTerminator.
fn js_line_end(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

/// JavaScript's `Number(string)` (ECMA-262 StringToNumber): trimmed; empty is 0; `0x`/`0o`/`0b`
/// integers without a sign; a decimal literal with an optional sign, or `Infinity`; anything
/// else NaN.
pub fn js_number(s: &str) -> f64 {
    let t = s.trim_matches(js_space);
    if t.is_empty() {
        return 0.0;
    }
    let radix = |p: &str| t.get(..2).is_some_and(|h| h.eq_ignore_ascii_case(p));
    for (prefix, base) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if radix(prefix) {
            let digits = &t[2..];
            if digits.is_empty() || !digits.chars().all(|c| c.is_digit(base)) {
                return f64::NAN;
            }
            // Exact below 2^128; beyond, accumulated in f64 (no task prints such a number).
            return match u128::from_str_radix(digits, base) {
                Ok(v) => v as f64,
                Err(_) => digits.chars().fold(0.0, |acc, c| {
                    acc * f64::from(base) + f64::from(c.to_digit(base).unwrap_or(0))
                }),
            };
        }
    }
    let unsigned = t.strip_prefix(['+', '-']).unwrap_or(t);
    if unsigned == "Infinity" {
        return if t.starts_with('-') {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        };
    }
    if !is_decimal_literal(unsigned) {
        return f64::NAN;
    }
    t.parse::<f64>().unwrap_or(f64::NAN)
}

/// StrUnsignedDecimalLiteral without `Infinity`: `D+[.D*][e[±]D+]` or `.D+[e[±]D+]`.
fn is_decimal_literal(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    let int = digits(&mut i);
    let mut frac = 0;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        frac = digits(&mut i);
    }
    if int + frac == 0 {
        return false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Parses one round's output as v0.4's `CASE_RE` (global) and `SUMMARY_RE` (`/m`) read it; the
/// bytes are decoded as UTF-8 with replacement, as Node's `readFile(…, 'utf8')` does.
pub fn parse_output(bytes: &[u8]) -> ParsedOutput {
    let text = String::from_utf8_lossy(bytes);
    let mut cases = Vec::new();
    let mut overflow = false;
    let mut at = 0;
    while let Some(off) = text[at..].find("CASE_RESULT") {
        let start = at + off;
        match case_at(&text, start) {
            Some((case, end)) => {
                if cases.len() == MAX_CASES_PER_ROUND {
                    overflow = true;
                    break;
                }
                cases.push(case);
                at = end;
            }
            None => at = start + 1,
        }
    }
    ParsedOutput {
        cases,
        summary: summary_of(&text),
        overflow,
    }
}

/// A cursor over `text` from a byte offset.
struct Cursor<'t> {
    text: &'t str,
    at: usize,
}

impl<'t> Cursor<'t> {
    fn rest(&self) -> &'t str {
        &self.text[self.at..]
    }
    fn literal(&mut self, l: &str) -> Option<()> {
        self.rest().starts_with(l).then(|| self.at += l.len())
    }
    /// One or more characters of a class; the run taken whole (the regex's greedy `+`, which
    /// never needs to give back here: each run is followed by the other class or a literal
    /// outside it).
    fn run(&mut self, class: impl Fn(char) -> bool) -> Option<&'t str> {
        let rest = self.rest();
        let len = rest.find(|c: char| !class(c)).unwrap_or(rest.len());
        (len > 0).then(|| {
            self.at += len;
            &rest[..len]
        })
    }
    fn spaces(&mut self) -> Option<()> {
        self.run(js_space).map(|_| ())
    }
    fn value(&mut self) -> Option<String> {
        self.run(|c| !js_space(c)).map(str::to_owned)
    }
}

/// `CASE_RESULT\s+case_id=(\S+)\s+origin_step=(\S+)\s+requirement_ref=(\S+)\s+case_type=(\S+)\s+status=(\S+)`
/// at `start`, with where the match ends; then the line's `scenario="…"`, read past the match
/// without moving it (v0.4 goes on searching right after `status=`'s value).
fn case_at(text: &str, start: usize) -> Option<(CaseLine, usize)> {
    let mut c = Cursor { text, at: start };
    c.literal("CASE_RESULT")?;
    let mut field = |name: &str| {
        c.spaces()?;
        c.literal(name)?;
        c.value()
    };
    let case_id = field("case_id=")?;
    let origin_step = field("origin_step=")?;
    let requirement_ref = field("requirement_ref=")?;
    let case_type = field("case_type=")?;
    let status = field("status=")?;
    let end = c.at;
    let line_end = text[end..]
        .find(js_line_end)
        .map_or(text.len(), |o| end + o);
    let scenario = quoted_field(&text[end..line_end], "scenario");
    Some((
        CaseLine {
            case_id,
            origin_step,
            requirement_ref,
            case_type,
            status,
            scenario,
        },
        end,
    ))
}

/// The value of `name="…"` among the `key="value"` pairs that follow the status on its line
/// (EvoCode-Bench: `intent= scenario= input= expected= actual= failure_reason=`; values hold no
/// `"`). Reading stops at the first text that is no such pair.
fn quoted_field(rest: &str, name: &str) -> Option<String> {
    let mut s = rest;
    loop {
        s = s.trim_start_matches(js_space);
        let key_len = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
        let (key, after) = s.split_at(key_len);
        let after = after.strip_prefix("=\"")?;
        let close = after.find('"')?;
        if key == name {
            return Some(after[..close].to_owned());
        }
        s = &after[close + 1..];
    }
}

/// `^CASE_SUMMARY total_cases=(\d+) success_count=(\d+) fail_count=(\d+)` with `/m`: the first
/// match at the start of the text or of a line.
fn summary_of(text: &str) -> Option<[f64; 3]> {
    let mut at = 0;
    while let Some(off) = text[at..].find("CASE_SUMMARY") {
        let start = at + off;
        let line_start = start == 0 || text[..start].chars().next_back().is_some_and(js_line_end);
        if line_start {
            let mut c = Cursor { text, at: start };
            let mut n = |lead: &str| {
                c.literal(lead)?;
                c.run(|d| d.is_ascii_digit()).map(js_number)
            };
            if let (Some(t), Some(s), Some(f)) = (
                n("CASE_SUMMARY total_cases="),
                n(" success_count="),
                n(" fail_count="),
            ) {
                return Some([t, s, f]);
            }
        }
        at = start + 1;
    }
    None
}

/// v0.4's `summarizeEvoRounds` over the rounds that printed output, and `parseHarborJob`'s
/// score over the rounds that left a `reward.txt`, with every one of its throws.
fn v04_metrics(
    parsed: &BTreeMap<u32, ParsedOutput>,
    inputs: &BTreeMap<u32, RoundInput<'_>>,
) -> V04Metrics {
    let void = |why: String| V04Metrics::Void(why);
    if parsed.is_empty() {
        return void("no round left verifier output".to_owned());
    }
    if let Some((r, p)) = parsed.iter().find(|(_, p)| p.overflow) {
        return void(format!(
            "round {r} printed {} CASE_RESULT lines or more; not read",
            p.cases.len()
        ));
    }
    if let Some(r) = parsed
        .iter()
        .find(|(_, p)| p.cases.is_empty())
        .map(|(r, _)| r)
    {
        return void(format!(
            "round {r} printed no CASE_RESULT line (v0.4: \"official EvoCode verifier output is missing CASE_RESULT identities\")"
        ));
    }
    let mut last: HashMap<&str, &str> = HashMap::new();
    let mut regressed: HashSet<&str> = HashSet::new();
    let mut per_round = Vec::with_capacity(parsed.len());
    for (r, p) in parsed {
        for case in &p.cases {
            let origin = js_number(
                case.origin_step
                    .strip_prefix("round-")
                    .unwrap_or(&case.origin_step),
            );
            let integer = origin.is_finite() && origin.fract() == 0.0;
            if last.get(case.case_id.as_str()) == Some(&"success")
                && case.status == "fail"
                && integer
                && origin < f64::from(*r)
            {
                regressed.insert(&case.case_id);
            }
            last.insert(&case.case_id, &case.status);
        }
        let count = |s: &str| p.cases.iter().filter(|c| c.status == s).count() as f64;
        let (total, successes) = match p.summary {
            Some([t, s, _]) => (t, s),
            None => (count("success") + count("fail"), count("success")),
        };
        per_round.push(if total > 0.0 {
            100.0 * successes / total
        } else {
            0.0
        });
    }
    let cumulative = per_round.iter().sum::<f64>() / per_round.len() as f64;
    let mut score = 0.0;
    let mut rewards = 0;
    for (r, i) in inputs {
        let Some(bytes) = i.reward else { continue };
        let value = js_number(&String::from_utf8_lossy(bytes));
        if !value.is_finite() {
            return void(format!(
                "round {r}'s reward.txt is not a finite number: {:?}",
                shown(bytes)
            ));
        }
        score += value;
        rewards += 1;
    }
    if rewards != parsed.len() {
        return void(format!(
            "{rewards} reward.txt for {} rounds with verifier output (v0.4: \"official EvoCode reward count does not match verifier rounds\")",
            parsed.len()
        ));
    }
    if !cumulative.is_finite() {
        return void(format!(
            "the cumulative case score is not a finite number ({cumulative}): a CASE_SUMMARY beyond f64"
        ));
    }
    V04Metrics::Computed {
        regressions: regressed.len() as f64,
        cumulative_case_score: cumulative,
        score,
    }
}

/// At most 40 characters of a value, for a message.
fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).chars().take(40).collect()
}

/// The stable key of a case: origin step, requirement and scenario; the ordinal only when the
/// line names no scenario.
fn stable_key(c: &CaseLine) -> (String, bool) {
    match &c.scenario {
        Some(s) if !s.is_empty() => (
            format!("{}/{}/{}", c.origin_step, c.requirement_ref, s),
            true,
        ),
        _ => (
            format!("{}/{}/#{}", c.origin_step, c.requirement_ref, c.case_id),
            false,
        ),
    }
}

/// A reward as the corrected score counts it: a decimal number in [0, 1] (ASCII whitespace
/// around it allowed), else none.
fn strict_reward(bytes: &[u8]) -> Option<f64> {
    let t = std::str::from_utf8(bytes).ok()?.trim_ascii();
    if !is_decimal_literal(t.strip_prefix('+').unwrap_or(t)) {
        return None;
    }
    t.parse::<f64>().ok().filter(|v| (0.0..=1.0).contains(v))
}

/// The corrected per-round grades and the number of distinct regressed keys.
fn corrected(
    declared: u32,
    inputs: &BTreeMap<u32, RoundInput<'_>>,
    parsed: &BTreeMap<u32, ParsedOutput>,
    notes: &mut Vec<String>,
) -> (Vec<RoundGrade>, usize) {
    let mut last_passed: HashMap<String, bool> = HashMap::new();
    let mut regressed_all: BTreeSet<String> = BTreeSet::new();
    let mut rounds = Vec::with_capacity(declared as usize);
    for r in 1..=declared {
        let input = inputs.get(&r);
        let p = parsed.get(&r);
        let state = match (input, p) {
            (None, _) => RoundState::Unreached,
            (Some(_), None) => RoundState::Ungraded,
            (Some(_), Some(p)) if p.overflow => {
                notes.push(format!(
                    "round {r}: more than {MAX_CASES_PER_ROUND} CASE_RESULT lines; counted as ungraded"
                ));
                RoundState::Ungraded
            }
            (Some(_), Some(p)) if p.cases.is_empty() => RoundState::Unbuilt,
            (Some(_), Some(_)) => RoundState::Tested,
        };
        // This round's status per key: passed only if every line of the key says success.
        let mut now: BTreeMap<String, bool> = BTreeMap::new();
        let mut unkeyed = 0;
        let mut duplicates = 0;
        if let (RoundState::Tested, Some(p)) = (state, p) {
            for c in &p.cases {
                let (key, by_scenario) = stable_key(c);
                if !by_scenario {
                    unkeyed += 1;
                }
                let ok = c.status == "success";
                match now.get_mut(&key) {
                    Some(v) => {
                        duplicates += 1;
                        *v &= ok;
                    }
                    None => {
                        now.insert(key, ok);
                    }
                }
            }
        }
        if unkeyed > 0 {
            notes.push(format!(
                "round {r}: {unkeyed} CASE_RESULT lines name no scenario; keyed by their ordinal case_id"
            ));
        }
        if duplicates > 0 {
            notes.push(format!(
                "round {r}: {duplicates} CASE_RESULT lines repeat a case key; a key passes only if all its lines do"
            ));
        }
        let cases = now.len() as u64;
        let passed = now.values().filter(|ok| **ok).count() as u64;
        if let (RoundState::Tested, Some(Some([t, s, _]))) = (state, p.map(|p| p.summary))
            && (t != cases as f64 || s != passed as f64)
        {
            notes.push(format!(
                "round {r}: CASE_SUMMARY says {s}/{t}, the case lines {passed}/{cases}; the lines count"
            ));
        }
        // Regressions: a key whose last observation passed and that now fails; an unbuilt round
        // breaks every key that passed.
        let mut regressed = Vec::new();
        match state {
            RoundState::Tested => {
                for (key, ok) in &now {
                    if !ok && last_passed.get(key) == Some(&true) {
                        regressed.push(key.clone());
                    }
                }
                last_passed.extend(now.iter().map(|(k, v)| (k.clone(), *v)));
            }
            RoundState::Unbuilt => {
                let mut broken: Vec<String> = last_passed
                    .iter()
                    .filter(|(_, ok)| **ok)
                    .map(|(k, _)| k.clone())
                    .collect();
                broken.sort_unstable();
                for k in &broken {
                    last_passed.insert(k.clone(), false);
                }
                regressed = broken;
            }
            RoundState::Ungraded | RoundState::Unreached => {}
        }
        regressed_all.extend(regressed.iter().cloned());
        let reward = match input.and_then(|i| i.reward) {
            None => {
                if state != RoundState::Unreached {
                    notes.push(format!("round {r}: no reward.txt; counted as 0"));
                }
                0.0
            }
            Some(bytes) => strict_reward(bytes).unwrap_or_else(|| {
                notes.push(format!(
                    "round {r}: reward.txt {:?} is no number in [0, 1]; counted as 0",
                    shown(bytes)
                ));
                0.0
            }),
        };
        let case_score = if state == RoundState::Tested && cases > 0 {
            100.0 * passed as f64 / cases as f64
        } else {
            0.0
        };
        rounds.push(RoundGrade {
            round: r,
            state,
            cases,
            passed,
            case_score,
            reward,
            regressed,
        });
    }
    (rounds, regressed_all.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One `CASE_RESULT` line in EvoCode-Bench's full form.
    fn line(id: &str, origin: &str, req: &str, scenario: &str, status: &str) -> String {
        format!(
            "CASE_RESULT case_id={id} origin_step={origin} requirement_ref={req} case_type=behavior status={status} intent=\"checks {scenario}\" scenario=\"{scenario}\" input=\"x\" expected=\"y\" actual=\"z\" failure_reason=\"\"\n"
        )
    }

    fn out(lines: &[String], summary: Option<(u32, u32, u32)>) -> Vec<u8> {
        let mut s = String::from("building...\n");
        for l in lines {
            s.push_str(l);
        }
        if let Some((t, ok, f)) = summary {
            s.push_str(&format!(
                "CASE_SUMMARY total_cases={t} success_count={ok} fail_count={f}\n"
            ));
        }
        s.into_bytes()
    }

    fn input<'a>(round: u32, output: &'a [u8], reward: &'a [u8]) -> RoundInput<'a> {
        RoundInput {
            round,
            output: Some(output),
            reward: Some(reward),
        }
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    fn v04(m: &RoundMetrics) -> (f64, f64, f64) {
        match m.v04 {
            V04Metrics::Computed {
                regressions,
                cumulative_case_score,
                score,
            } => (regressions, cumulative_case_score, score),
            V04Metrics::Void(ref why) => panic!("v0.4 void: {why}"),
        }
    }

    fn void_reason(m: &RoundMetrics) -> String {
        match &m.v04 {
            V04Metrics::Void(why) => why.clone(),
            other => panic!("v0.4 computed: {other:?}"),
        }
    }

    #[test]
    fn a_three_round_attempt_gives_v04s_numbers_and_the_corrected_ones_by_hand() {
        let r1 = out(
            &[
                line("c001", "round-1", "parse", "p_ok", "success"),
                line("c002", "round-1", "parse", "p_bad", "success"),
            ],
            Some((2, 2, 0)),
        );
        let r2 = out(
            &[
                line("c001", "round-1", "parse", "p_ok", "success"),
                line("c002", "round-1", "parse", "p_bad", "fail"),
                line("c003", "round-2", "list", "l_ok", "success"),
            ],
            Some((3, 2, 1)),
        );
        let r3 = out(
            &[
                line("c001", "round-1", "parse", "p_ok", "fail"),
                line("c002", "round-1", "parse", "p_bad", "success"),
                line("c003", "round-2", "list", "l_ok", "success"),
                line("c004", "round-3", "graph", "g_ok", "fail"),
            ],
            Some((4, 2, 2)),
        );
        let m = summarize(
            3,
            &[
                input(1, &r1, b"1\n"),
                input(2, &r2, b"0\n"),
                input(3, &r3, b"0\n"),
            ],
        );
        // Regressions: c002 (round 2), c001 (round 3). Rounds 100, 66.67, 50. Σ reward 1.
        let (reg, cum, score) = v04(&m);
        assert_eq!(reg, 2.0);
        close(cum, (100.0 + 200.0 / 3.0 + 50.0) / 3.0);
        assert_eq!(score, 1.0);
        assert_eq!(m.regressions, 2.0);
        close(m.cumulative_case_score, cum);
        assert_eq!(m.score, 1.0);
        close(m.mean_reward, 1.0 / 3.0);
        assert_eq!(
            m.rounds[1].regressed,
            vec!["round-1/parse/p_bad".to_owned()]
        );
        assert_eq!(m.rounds[2].regressed, vec!["round-1/parse/p_ok".to_owned()]);
        assert!(m.notes.is_empty(), "{:?}", m.notes);
        let named = m.named();
        let names: Vec<&str> = named.keys().map(String::as_str).collect();
        let mut all = ROUND_METRICS.to_vec();
        all.sort_unstable();
        assert_eq!(names, all);
    }

    #[test]
    fn an_ordinal_reused_for_another_scenario_misleads_v04_both_ways_and_not_the_stable_key() {
        // Round 2 renumbers: c001 now names beta, c002 alpha. v0.4 follows the ordinal across
        // two scenarios: it names the wrong case, invents a regression or misses one.
        let r1 = out(
            &[
                line("c001", "round-1", "r", "alpha", "success"),
                line("c002", "round-1", "r", "beta", "fail"),
            ],
            None,
        );
        let missed = out(
            &[
                line("c001", "round-1", "r", "beta", "fail"),
                line("c002", "round-1", "r", "alpha", "fail"),
            ],
            None,
        );
        let m = summarize(2, &[input(1, &r1, b"0"), input(2, &missed, b"0")]);
        // v0.4: c001 success → fail (origin 1 < 2): 1, but that ordinal is beta, failing twice.
        assert_eq!(v04(&m).0, 1.0);
        // Stable: alpha success → fail: 1, beta fail → fail: 0.
        assert_eq!(m.regressions, 1.0);
        assert_eq!(m.rounds[1].regressed, vec!["round-1/r/alpha".to_owned()]);

        let invented = out(
            &[
                line("c001", "round-1", "r", "beta", "fail"),
                line("c002", "round-1", "r", "alpha", "success"),
            ],
            None,
        );
        let m = summarize(2, &[input(1, &r1, b"0"), input(2, &invented, b"0")]);
        assert_eq!(v04(&m).0, 1.0, "v0.4 counts the ordinal c001");
        assert_eq!(m.regressions, 0.0, "alpha still passes, beta never did");

        let hidden = out(
            &[
                line("c001", "round-1", "r", "beta", "success"),
                line("c002", "round-1", "r", "alpha", "fail"),
            ],
            None,
        );
        let m = summarize(2, &[input(1, &r1, b"0"), input(2, &hidden, b"0")]);
        assert_eq!(v04(&m).0, 0.0, "v0.4 sees c001 pass and c002 fail twice");
        assert_eq!(m.regressions, 1.0, "alpha broke");
    }

    #[test]
    fn a_round_that_prints_no_case_result_voids_v04_and_counts_zero_and_breaks_every_passing_case()
    {
        let ok = out(
            &[
                line("c001", "round-1", "r", "a", "success"),
                line("c002", "round-1", "r", "b", "success"),
            ],
            Some((2, 2, 0)),
        );
        let unbuilt = b"go build ./...: undefined: Foo\nFAIL: build\n".to_vec();
        let m = summarize(
            3,
            &[
                input(1, &ok, b"1"),
                input(2, &unbuilt, b"0"),
                input(3, &ok, b"1"),
            ],
        );
        assert!(void_reason(&m).contains("round 2 printed no CASE_RESULT"));
        assert!(!m.named().contains_key("v04_score"));
        assert_eq!(m.rounds[1].state, RoundState::Unbuilt);
        assert_eq!(
            m.rounds[1].regressed,
            vec!["round-1/r/a".to_owned(), "round-1/r/b".to_owned()]
        );
        // Round 3 passes again: nothing new regresses, the two stay counted once.
        assert_eq!(m.regressions, 2.0);
        close(m.cumulative_case_score, 200.0 / 3.0);
        assert_eq!(m.score, 2.0);
        close(m.mean_reward, 2.0 / 3.0);
    }

    #[test]
    fn an_unreached_round_is_left_out_by_v04_and_counted_as_zero_when_corrected() {
        let r1 = out(&[line("c001", "round-1", "r", "a", "success")], None);
        let r2 = out(
            &[
                line("c001", "round-1", "r", "a", "success"),
                line("c002", "round-2", "s", "b", "fail"),
            ],
            Some((2, 1, 1)),
        );
        let m = summarize(3, &[input(1, &r1, b"1"), input(2, &r2, b"0")]);
        let (reg, cum, score) = v04(&m);
        assert_eq!((reg, score), (0.0, 1.0));
        close(cum, 75.0);
        close(m.cumulative_case_score, 50.0);
        assert_eq!(m.score, 1.0);
        close(m.mean_reward, 1.0 / 3.0);
        assert_eq!(m.rounds[2].state, RoundState::Unreached);
        assert!(
            m.notes.is_empty(),
            "an unreached round has no reward to miss: {:?}",
            m.notes
        );

        // Reached but not graded (the grader did not run): v0.4 leaves it out too; corrected 0.
        let m = summarize(
            3,
            &[
                input(1, &r1, b"1"),
                input(2, &r2, b"0"),
                RoundInput {
                    round: 3,
                    output: None,
                    reward: None,
                },
            ],
        );
        close(v04(&m).1, 75.0);
        assert_eq!(m.rounds[2].state, RoundState::Ungraded);
        close(m.cumulative_case_score, 50.0);
        assert!(m.notes.iter().any(|n| n.contains("round 3: no reward.txt")));
    }

    #[test]
    fn rewards_are_read_as_v04_reads_them_and_strictly_when_corrected() {
        let r1 = out(&[line("c001", "round-1", "r", "a", "success")], None);
        let score_of = |reward: &[u8]| {
            let m = summarize(1, &[input(1, &r1, reward)]);
            let v = match &m.v04 {
                V04Metrics::Computed { score, .. } => Ok(*score),
                V04Metrics::Void(why) => Err(why.clone()),
            };
            (v, m.score)
        };
        assert_eq!(score_of(b" 1\n"), (Ok(1.0), 1.0));
        assert_eq!(score_of(b"1e0"), (Ok(1.0), 1.0));
        assert_eq!(score_of(b"0.5"), (Ok(0.5), 0.5));
        // Number("") is 0; Number("0x1") is 1; 2 is out of [0, 1]: corrected counts 0.
        assert_eq!(score_of(b""), (Ok(0.0), 0.0));
        assert_eq!(score_of(b"0x1"), (Ok(1.0), 0.0));
        assert_eq!(score_of(b"2"), (Ok(2.0), 0.0));
        for bad in [&b"NaN"[..], b"abc", b"Infinity", b"1 1", b"\xff\xfe"] {
            let (v, c) = score_of(bad);
            let why = v.expect_err("v0.4 throws");
            assert!(
                why.contains("round 1's reward.txt is not a finite number"),
                "{why}"
            );
            assert_eq!(c, 0.0);
        }
        // A missing reward: v0.4's counts differ (void); corrected 0 with a note.
        let m = summarize(
            1,
            &[RoundInput {
                round: 1,
                output: Some(&r1),
                reward: None,
            }],
        );
        assert!(void_reason(&m).contains("0 reward.txt for 1 rounds"));
        assert_eq!(m.score, 0.0);
        assert!(m.notes.iter().any(|n| n.contains("no reward.txt")));
    }

    #[test]
    fn duplicate_ids_in_a_round_regress_in_v04_order_and_fail_the_stable_key() {
        let r1 = out(&[line("c001", "round-1", "r", "a", "success")], None);
        let r2 = out(
            &[
                line("c001", "round-1", "r", "a", "success"),
                line("c001", "round-1", "r", "a", "fail"),
            ],
            None,
        );
        let m = summarize(2, &[input(1, &r1, b"1"), input(2, &r2, b"0")]);
        let (reg, cum, _) = v04(&m);
        // v0.4: success then fail within round 2, origin 1 < 2: a regression; round 2 is 1/2.
        assert_eq!(reg, 1.0);
        close(cum, 75.0);
        // Corrected: the key fails (one of its lines does); round 2 is 0/1.
        assert_eq!(m.regressions, 1.0);
        assert_eq!((m.rounds[1].cases, m.rounds[1].passed), (1, 0));
        close(m.cumulative_case_score, 50.0);
        assert!(m.notes.iter().any(|n| n.contains("repeat a case key")));
    }

    #[test]
    fn a_summary_printed_before_the_real_one_steers_v04_not_the_corrected_count() {
        let mut s =
            String::from("agent says:\nCASE_SUMMARY total_cases=1 success_count=1 fail_count=0\n");
        s.push_str(&line("c001", "round-1", "r", "a", "fail"));
        s.push_str(
            "  CASE_SUMMARY total_cases=9 success_count=0 fail_count=9 (not at a line start)\n",
        );
        s.push_str("CASE_SUMMARY total_cases=1 success_count=0 fail_count=1\n");
        let m = summarize(1, &[input(1, s.as_bytes(), b"0")]);
        close(v04(&m).1, 100.0);
        close(m.cumulative_case_score, 0.0);
        assert!(m.notes.iter().any(|n| n.contains("CASE_SUMMARY says 1/1")));
        // total_cases=0: v0.4's round is 0.
        let z = out(
            &[line("c001", "round-1", "r", "a", "success")],
            Some((0, 1, 0)),
        );
        close(v04(&summarize(1, &[input(1, &z, b"1")])).1, 0.0);
        // A summary too large for f64: v0.4's mean is not a number; void, never NaN.
        let huge = format!(
            "{}CASE_SUMMARY total_cases={} success_count={} fail_count=0\n",
            line("c001", "round-1", "r", "a", "success"),
            "9".repeat(400),
            "9".repeat(400)
        );
        let m = summarize(1, &[input(1, huge.as_bytes(), b"1")]);
        assert!(void_reason(&m).contains("not a finite number"));
        assert!(m.named().values().all(|v| v.is_finite()));
    }

    #[test]
    fn case_lines_are_matched_as_v04s_regular_expression_matches_them() {
        let text = concat!(
            "noise CASE_RESULT case_id=c1 origin_step=round-1 requirement_ref=r case_type=t status=success\n",
            "CASE_RESULT case_id= origin_step=round-1 requirement_ref=r case_type=t status=fail\n",
            "CASE_RESULT case_id=c2 origin_step=round-1\n",
            "CASE_RESULT\tcase_id=c3\u{A0}origin_step=2  requirement_ref=r\ncase_type=t\u{FEFF}status=fail",
            " CASE_RESULT\u{85}case_id=c4 origin_step=1 requirement_ref=r case_type=t status=fail\n",
            "CASE_RESULT case_id=c5 origin_step=1 requirement_ref=r case_type=t status=CASE_RESULT",
            " case_id=c6 origin_step=1 requirement_ref=r case_type=t status=success\n",
        );
        let p = parse_output(text.as_bytes());
        let ids: Vec<&str> = p.cases.iter().map(|c| c.case_id.as_str()).collect();
        // c1 mid-line; the empty id, the cut line and U+0085 (no JS space) do not match; c3
        // spans lines through JS spaces; c5's status swallows the next CASE_RESULT, whose
        // match cannot start inside it.
        assert_eq!(ids, ["c1", "c3", "c5"]);
        assert_eq!(p.cases[1].origin_step, "2");
        assert_eq!(p.cases[2].status, "CASE_RESULT");
        assert_eq!(p.cases[0].scenario, None);
        let with = parse_output(line("c9", "round-1", "r", "the scenario", "fail").as_bytes());
        assert_eq!(with.cases[0].scenario.as_deref(), Some("the scenario"));
    }

    #[test]
    fn origin_steps_count_as_javascripts_number_reads_them() {
        let r1 = |origin: &str| {
            out(
                &[
                    line("c001", origin, "r", "a", "success"),
                    line("c002", origin, "r", "b", "success"),
                ],
                None,
            )
        };
        let r2 = |origin: &str| {
            out(
                &[
                    line("c001", origin, "r", "a", "fail"),
                    line("c002", origin, "r", "b", "success"),
                ],
                None,
            )
        };
        let regressions = |origin: &str| {
            let (a, b) = (r1(origin), r2(origin));
            v04(&summarize(2, &[input(1, &a, b"1"), input(2, &b, b"0")])).0
        };
        for (origin, expected) in [
            ("round-1", 1.0),
            ("1", 1.0),
            ("round-", 1.0), // Number("") is 0, and 0 < 2
            ("round-0x1", 1.0),
            ("round-2", 0.0), // not earlier than round 2
            ("round-1.5", 0.0),
            ("round-x", 0.0),
            ("round-Infinity", 0.0),
            ("round-round-1", 0.0),
        ] {
            assert_eq!(regressions(origin), expected, "origin_step={origin}");
        }
    }

    #[test]
    fn javascripts_number_is_reproduced() {
        let nan = f64::NAN;
        for (s, want) in [
            ("", 0.0),
            (" \t12 \n", 12.0),
            ("\u{FEFF}1", 1.0),
            ("\u{85}1", nan),
            ("0x1A", 26.0),
            ("0B101", 5.0),
            ("0o17", 15.0),
            ("-0x1", nan),
            ("0x", nan),
            ("1e3", 1000.0),
            (".5", 0.5),
            ("5.", 5.0),
            ("1.e2", 100.0),
            ("+1", 1.0),
            ("-Infinity", f64::NEG_INFINITY),
            ("inf", nan),
            ("infinity", nan),
            ("NaN", nan),
            ("1_0", nan),
            ("e2", nan),
            (".", nan),
            ("1e", nan),
            ("007", 7.0),
        ] {
            let got = js_number(s);
            assert!(
                got == want || (got.is_nan() && want.is_nan()),
                "Number({s:?}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn hostile_output_never_panics_and_is_bounded() {
        // Non-UTF-8, a 1 MiB line of repeated markers, control characters.
        let mut b = vec![0xff, 0xfe, b'\n'];
        b.extend(std::iter::repeat_n(&b"CASE_RESULT case_id="[..], 50_000).flatten());
        b.extend_from_slice(b"\x00\x01CASE_SUMMARY total_cases=\n");
        let m = summarize(1, &[input(1, &b, b"\x00")]);
        assert!(void_reason(&m).contains("printed no CASE_RESULT"));
        assert_eq!(m.rounds[0].state, RoundState::Unbuilt);
        // More lines than are read: v0.4 void, the round ungraded.
        let many = line("c1", "round-1", "r", "a", "success").repeat(MAX_CASES_PER_ROUND + 1);
        let m = summarize(1, &[input(1, many.as_bytes(), b"1")]);
        assert!(void_reason(&m).contains("not read"));
        assert_eq!(m.rounds[0].state, RoundState::Ungraded);
        assert_eq!(m.cumulative_case_score, 0.0);
    }

    #[test]
    fn inputs_outside_the_declared_rounds_or_given_twice_are_noted_and_ignored() {
        let r1 = out(&[line("c1", "round-1", "r", "a", "success")], None);
        let r1_fail = out(&[line("c1", "round-1", "r", "a", "fail")], None);
        let m = summarize(
            1,
            &[
                input(0, &r1, b"1"),
                input(1, &r1, b"1"),
                input(1, &r1_fail, b"0"),
                input(7, &r1, b"1"),
            ],
        );
        assert_eq!(m.score, 1.0);
        assert_eq!(v04(&m).2, 1.0);
        assert_eq!(m.notes.len(), 3, "{:?}", m.notes);
        let none = summarize(0, &[]);
        assert!(none.named().is_empty());
        assert!(void_reason(&none).contains("no round"));
    }

    #[test]
    fn lines_without_a_scenario_fall_back_to_the_ordinal_and_say_so() {
        let r = b"CASE_RESULT case_id=c1 origin_step=round-1 requirement_ref=r case_type=t status=success\n";
        let m = summarize(1, &[input(1, r, b"1")]);
        assert_eq!(m.rounds[0].cases, 1);
        assert!(m.notes.iter().any(|n| n.contains("name no scenario")));
    }

    #[test]
    fn the_per_round_grades_serialize_as_the_ledger_would_hold_them() {
        let r1 = out(&[line("c1", "round-1", "r", "a", "success")], None);
        let m = summarize(2, &[input(1, &r1, b"1")]);
        let v = serde_json::to_value(&m.rounds).unwrap();
        assert_eq!(
            v,
            serde_json::json!([
                {"round": 1, "state": "tested", "cases": 1, "passed": 1, "case_score": 100.0, "reward": 1.0, "regressed": []},
                {"round": 2, "state": "unreached", "cases": 0, "passed": 0, "case_score": 0.0, "reward": 0.0, "regressed": []}
            ])
        );
    }
}
