//! Expansion of a matrix into its ordered slots.

use crate::order::{chacha8_fisher_yates, mulberry32_fisher_yates};
use crate::schema::{Matrix, Order};
use eval_core::phase::Phase;
use serde::{Deserialize, Serialize};

/// One slot of a schedule. A slot may take several attempts (reruns); its id is stable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// 1-based position in the whole schedule (infrastructure slots first).
    pub order: usize,
    /// `stat-<suite>-<task>-<arm>-r<rep>` or `infra-<suite>-<task>-<arm>-r0`.
    pub id: String,
    /// Infrastructure or statistical.
    pub phase: Phase,
    /// The suite id.
    pub suite: String,
    /// The task id within the suite.
    pub task: String,
    /// The arm id.
    pub arm: String,
    /// 1-based for statistical slots, 0 for infrastructure slots.
    pub rep: u32,
}

/// A matrix expanded into the slots to run, in run order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// Infrastructure slots first, then statistical ones.
    pub slots: Vec<Slot>,
}

impl Schedule {
    /// The infrastructure slots, in order.
    pub fn infrastructure(&self) -> impl Iterator<Item = &Slot> {
        self.slots
            .iter()
            .filter(|s| s.phase == Phase::Infrastructure)
    }

    /// The statistical slots, in order.
    pub fn statistical(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter().filter(|s| s.phase == Phase::Statistical)
    }

    /// The slot with this id.
    pub fn get(&self, id: &str) -> Option<&Slot> {
        self.slots.iter().find(|s| s.id == id)
    }
}

/// The id of a statistical slot.
pub fn stat_id(suite: &str, task: &str, arm: &str, rep: u32) -> String {
    format!("stat-{suite}-{task}-{arm}-r{rep}")
}

/// The id of an infrastructure slot (its repetition is always 0).
pub fn infra_id(suite: &str, task: &str, arm: &str) -> String {
    format!("infra-{suite}-{task}-{arm}-r0")
}

impl Matrix {
    /// Infrastructure slots in their declared order, then the statistical slots in the matrix's
    /// seeded order over the unshuffled list suite → task → arm → repetition.
    ///
    /// The size is bounded by [`crate::schema::limits::MAX_SLOTS`] for every matrix that came
    /// through [`Matrix::parse`]; a matrix built by hand past that bound gets an empty schedule
    /// rather than an allocation the size of its counts.
    pub fn schedule(&self) -> Schedule {
        if self.slot_count() > crate::schema::limits::MAX_SLOTS {
            return Schedule { slots: Vec::new() };
        }
        let mut slots = Vec::new();
        for s in &self.infra {
            slots.push(Slot {
                order: 0,
                id: infra_id(&s.suite, &s.task, &s.arm),
                phase: Phase::Infrastructure,
                suite: s.suite.clone(),
                task: s.task.clone(),
                arm: s.arm.clone(),
                rep: 0,
            });
        }
        let mut stat = Vec::new();
        for suite in &self.suites {
            for task in &suite.tasks {
                for arm in &suite.arms {
                    for rep in 1..=suite.repetitions {
                        stat.push(Slot {
                            order: 0,
                            id: stat_id(&suite.id, task, arm, rep),
                            phase: Phase::Statistical,
                            suite: suite.id.clone(),
                            task: task.clone(),
                            arm: arm.clone(),
                            rep,
                        });
                    }
                }
            }
        }
        match &self.order {
            Order::Chacha8 { seed } => chacha8_fisher_yates(&mut stat, *seed),
            Order::Mulberry32FisherYates { seed_string } => {
                mulberry32_fisher_yates(&mut stat, seed_string)
            }
        }
        slots.extend(stat);
        for (i, s) in slots.iter_mut().enumerate() {
            s.order = i + 1;
        }
        Schedule { slots }
    }
}
