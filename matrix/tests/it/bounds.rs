//! Matrix sizes are bounded from the parsed counts, before any slot exists.

use eval_matrix::{Matrix, MatrixError, limits};
use std::path::Path;

fn matrix(tasks: usize, arms: usize, repetitions: u64) -> String {
    let tasks: Vec<String> = (0..tasks).map(|i| format!("\"t{i}\"")).collect();
    let arms: Vec<String> = (0..arms).map(|i| format!("\"a{i}\"")).collect();
    format!(
        "name = \"big\"\nprotocol = \"p\"\n\n[[suites]]\nid = \"s\"\ntask_root = \"tasks\"\n\
         tasks = [{}]\narms = [{}]\nbaseline = \"a0\"\ncandidate = \"a1\"\nrepetitions = {repetitions}\n",
        tasks.join(", "),
        arms.join(", ")
    )
}

fn refused(text: &str) -> (String, String) {
    match Matrix::parse(text, Path::new("matrix/big.toml")) {
        Err(MatrixError::Field {
            file,
            field,
            message,
        }) => {
            assert_eq!(file, Path::new("matrix/big.toml"));
            (field, message)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn repetitions_beyond_the_limit_name_the_field_and_the_limit() {
    for reps in [3_000_000u64, u64::from(u32::MAX)] {
        let (field, message) = refused(&matrix(2, 2, reps));
        assert_eq!(field, "suites[0].repetitions");
        assert_eq!(
            message,
            format!("{reps} is above the limit of {}", limits::MAX_REPETITIONS)
        );
    }
    // At the limit it is accepted.
    let m = Matrix::parse(
        &matrix(2, 2, u64::from(limits::MAX_REPETITIONS)),
        Path::new("m.toml"),
    )
    .unwrap();
    assert_eq!(m.slot_count(), 4 * u64::from(limits::MAX_REPETITIONS));
}

#[test]
fn the_expanded_slot_count_is_bounded_by_arithmetic_not_by_expanding() {
    // Every field is within its own limit, but 200 × 3 × 10,000 = 6,000,000 slots is not.
    let (field, message) = refused(&matrix(200, 3, 10_000));
    assert_eq!(field, "suites");
    assert!(message.contains("6000000 slots"), "{message}");
    assert!(
        message.contains(&format!("limit of {} slots", limits::MAX_SLOTS)),
        "{message}"
    );
    let (field, _) = refused(&matrix(limits::MAX_TASKS_PER_SUITE + 1, 2, 1));
    assert_eq!(field, "suites[0].tasks");
    let (field, _) = refused(&matrix(2, limits::MAX_ARMS_PER_SUITE + 1, 1));
    assert_eq!(field, "suites[0].arms");
    let (field, message) = refused(
        &matrix(2, 2, 1).replace("protocol = \"p\"", "protocol = \"p\"\nconcurrency = 100000"),
    );
    assert_eq!(field, "concurrency");
    assert!(message.contains("1024"), "{message}");
}

#[test]
fn slot_count_agrees_with_the_expansion_and_schedule_never_expands_past_the_bound() {
    let m = Matrix::parse(&matrix(7, 3, 5), Path::new("m.toml")).unwrap();
    assert_eq!(m.slot_count(), 105);
    assert_eq!(m.schedule().slots.len(), 105);
    let v04 = Matrix::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("v0.4.toml")).unwrap();
    assert_eq!(v04.slot_count(), v04.schedule().slots.len() as u64);
    // A matrix built by hand past the bound (never through `parse`) must not be expanded: four
    // billion repetitions would abort on allocation.
    let mut huge = m.clone();
    huge.suites[0].repetitions = u32::MAX;
    assert_eq!(huge.slot_count(), 21 * u64::from(u32::MAX));
    assert!(huge.schedule().slots.is_empty());
}
