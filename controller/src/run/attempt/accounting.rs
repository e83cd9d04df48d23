//! The accounting cross-check of the harness's own metrics against the proxy's meter.

/// The accounting cross-check: the harness's own (turns, tokens) must equal the proxy's meter.
pub fn accounting_mismatch(harness: (u64, u64), proxy: (u64, u64)) -> Option<String> {
    (harness != proxy).then(|| {
        format!(
            "the harness reports {} model turns and {} tokens, the proxy metered {} and {}",
            harness.0, harness.1, proxy.0, proxy.1
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn accounting_must_match_exactly() {
        assert_eq!(accounting_mismatch((3, 1200), (3, 1200)), None);
        let why = accounting_mismatch((3, 1200), (4, 1200)).unwrap();
        assert!(
            why.contains("3 model turns") && why.contains("metered 4"),
            "{why}"
        );
        assert!(accounting_mismatch((3, 1199), (3, 1200)).is_some());
    }
}
