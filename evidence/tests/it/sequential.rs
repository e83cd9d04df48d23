//! Group-sequential boundaries: computed by the recursion, checked against the published
//! constants, and their overall error checked by a seeded simulation.

use eval_evidence::stats::sequential::*;

const FIVE: [f64; 5] = [0.2, 0.4, 0.6, 0.8, 1.0];

#[test]
fn pocock_five_looks_is_2_413_at_every_look() {
    let b = boundaries(&FIVE, Spending::Pocock, 0.05).unwrap();
    for z in &b.z {
        assert!((z - 2.413).abs() < 0.001, "{:?}", b.z);
    }
    // Each look is held to a two-sided nominal level of about 0.0158 (Pocock's table).
    assert!(
        (b.nominal_alpha[0] - 0.0158).abs() < 0.0002,
        "{:?}",
        b.nominal_alpha
    );
}

#[test]
fn o_brien_fleming_five_looks_is_4_56_first_and_2_04_last() {
    let b = boundaries(&FIVE, Spending::OBrienFleming, 0.05).unwrap();
    assert!((b.z[0] - 4.56).abs() < 0.005, "{:?}", b.z);
    assert!((b.z[4] - 2.04).abs() < 0.005, "{:?}", b.z);
    // The shape: c·√(K/k).
    assert!((b.z[1] - b.z[4] * 2.5f64.sqrt()).abs() < 1e-9);
}

#[test]
fn lan_demets_o_brien_fleming_spends_alpha_like_the_published_table() {
    // DeMets & Lan (1994), five equal looks, two-sided 0.05: 4.877 3.357 2.680 2.290 2.031.
    let b = boundaries(&FIVE, Spending::LanDemetsOBrienFleming, 0.05).unwrap();
    for (got, want) in b.z.iter().zip([4.877, 3.357, 2.680, 2.290, 2.031]) {
        assert!((got - want).abs() < 0.005, "{:?}", b.z);
    }
}

#[test]
fn five_unadjusted_looks_inflate_the_error_to_about_0_14() {
    let p: f64 = crossing_by_look(&FIVE, &[1.959964; 5], 0.0).iter().sum();
    assert!((p - 0.142).abs() < 0.002, "{p}");
}

#[test]
fn simulated_overall_error_is_at_most_alpha_within_its_simulation_error() {
    let trials = 40_000;
    let se = (0.05f64 * 0.95 / trials as f64).sqrt();
    for spending in [Spending::Pocock, Spending::OBrienFleming] {
        let b = boundaries(&FIVE, spending, 0.05).unwrap();
        let err = simulate_crossing(&FIVE, &b.z, 0.0, trials, 11);
        assert!(err <= 0.05 + 3.0 * se, "{spending:?}: {err}");
        assert!(err >= 0.05 - 3.0 * se, "{spending:?}: {err}");
    }
    // The same simulation sees the inflation of unadjusted looks, so it can tell.
    let naive = simulate_crossing(&FIVE, &[1.959964; 5], 0.0, trials, 11);
    assert!(naive > 0.12, "{naive}");
}

#[test]
fn decisions_stop_for_efficacy_or_futility_and_never_for_futility_at_the_last_look() {
    let b = boundaries(&FIVE, Spending::OBrienFleming, 0.05).unwrap();
    assert_eq!(decide(&b, 0, 4.0, Some(0.0)), LookDecision::Continue);
    assert_eq!(decide(&b, 0, 5.0, Some(0.0)), LookDecision::StopEfficacy);
    assert_eq!(decide(&b, 1, -0.5, Some(0.0)), LookDecision::StopFutility);
    assert_eq!(decide(&b, 1, -0.5, None), LookDecision::Continue);
    assert_eq!(decide(&b, 4, -3.0, Some(0.0)), LookDecision::FinalNotShown);
    assert_eq!(decide(&b, 4, 2.1, Some(0.0)), LookDecision::StopEfficacy);
}

#[test]
fn bad_looks_are_refused_with_the_fractions_named() {
    for looks in [
        &[0.5, 0.4, 1.0][..],
        &[0.5, 0.9][..],
        &[][..],
        &[0.0, 1.0][..],
    ] {
        assert!(
            boundaries(looks, Spending::Pocock, 0.05).is_err(),
            "{looks:?}"
        );
    }
}
