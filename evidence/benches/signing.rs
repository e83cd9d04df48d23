//! Signed-evidence benchmark on a 1,000,000-entry ledger (~300-byte payloads):
//! - checkpoint signing per attempt (20 entries appended, then `Checkpointer::checkpoint`), against
//!   the yardstick of one acknowledged (fsynced) append measured in the same run;
//! - receipt generation (`ledger prove`: one pass over the ledger) against `ledger verify`'s pass
//!   over the same file; receipt and consistency-proof verification; in-memory proof generation;
//! - `verify_ledger_signatures` over the whole ledger.
//!
//! `cargo bench -p eval-evidence --bench signing` (SIGNING_BENCH_ENTRIES changes the size).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use eval_evidence::ledger::{self, LedgerWriter, NewEntry};
use eval_evidence::signing::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn payload(i: u64) -> serde_json::Value {
    serde_json::json!({
        "attempt": format!("stat-icae-icae-python-01-v0.4-critical-r{}", i % 7),
        "i": i,
        "outcome": "completed",
        "metrics": {"hidden_score": (i % 101) as f64 / 1.7, "critical_misses": i % 3, "turns": i % 40},
        "tokens": {"input": i * 31 % 100_000, "output": i * 17 % 30_000, "cached": i % 999},
        "artifact": format!("sha256:{:064x}", i.wrapping_mul(0x9e3779b97f4a7c15)),
    })
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed())
}

fn main() {
    let n: u64 = std::env::var("SIGNING_BENCH_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let attempts = 50u64;
    let per_attempt = 20u64;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let key = Arc::new(SigningKeyPair::generate(KEY_NAME).unwrap());
    let writer = LedgerWriter::open(&path).unwrap();

    let bulk = n - attempts * (per_attempt + 1);
    // The signer is attached before the fill: a signing writer refuses to attach over evidence
    // no checkpoint covers, so the ledger is filled by the signing writer and checkpointed once.
    let mut first = Checkpointer::open(key.clone(), "eval/sha256:bench", &writer).unwrap();
    let (_, fill) = time(|| {
        rt.block_on(async {
            let mut i = 0;
            while i < bulk {
                let k = (bulk - i).min(4096);
                let batch = (i..i + k)
                    .map(|j| NewEntry::new("model_call", &payload(j)).unwrap())
                    .collect();
                writer.append_batch(batch).await.unwrap();
                i += k;
            }
        })
    });
    println!("filled {bulk} entries in {fill:.2?}");
    first.checkpoint_blocking(&writer).unwrap();

    let (cp, open) =
        time(|| Checkpointer::open(key.clone(), "eval/sha256:bench", &writer).unwrap());
    let mut cp = cp;
    println!("Checkpointer::open over {bulk} entries (resume: one verifying pass): {open:.2?}");

    let mut sign = Vec::new();
    let mut append_one = Vec::new();
    let mut checkpoints = Vec::new();
    for a in 0..attempts {
        for k in 0..per_attempt {
            let e = NewEntry::new("model_call", &payload(bulk + a * per_attempt + k)).unwrap();
            let (_, d) = time(|| writer.append_blocking(e).unwrap());
            append_one.push(d);
        }
        let (c, d) = time(|| cp.checkpoint_blocking(&writer).unwrap());
        sign.push(d);
        checkpoints.push(c);
    }
    writer.close();
    let sign_median = median(sign);
    let append_median = median(append_one);
    println!(
        "checkpoint per attempt ({per_attempt} new entries, ledger ~{n}): median {sign_median:.2?}; \
         yardstick: one acknowledged append median {append_median:.2?} (checkpoint = {:.1}x one append, \
         {:.1}% of the attempt's {per_attempt} appends)",
        sign_median.as_secs_f64() / append_median.as_secs_f64(),
        100.0 * sign_median.as_secs_f64() / (append_median.as_secs_f64() * per_attempt as f64)
    );

    let (report, verify_chain) = time(|| ledger::verify(&path, None).unwrap());
    assert!(report.ok);
    println!(
        "yardstick: ledger verify (chain only) over {} entries: {verify_chain:.2?}",
        report.entries
    );
    let mut proves = Vec::new();
    let mut receipt = None;
    for s in [1, n / 3, n / 2] {
        let (r, d) = time(|| prove(&path, s).unwrap());
        proves.push(d);
        receipt = Some(r);
    }
    let receipt = receipt.unwrap();
    println!(
        "ledger prove (receipt, one pass over {} entries): median {:.2?} = {:.2}x ledger verify",
        report.entries,
        median(proves.clone()),
        median(proves).as_secs_f64() / verify_chain.as_secs_f64()
    );
    let mut vr = Vec::new();
    for _ in 0..1000 {
        vr.push(time(|| verify_receipt(&receipt, key.public()).unwrap()).1);
    }
    println!(
        "verify receipt ({} proof hashes + Ed25519): median {:.2?}",
        receipt.inclusion_proof.len(),
        median(vr)
    );
    let (consistency, d) = time(|| {
        prove_consistency(
            &path,
            &checkpoints[0].checkpoint,
            &checkpoints.last().unwrap().checkpoint,
        )
        .unwrap()
    });
    println!("ledger consistency (one pass): {d:.2?}");
    let mut vc = Vec::new();
    for _ in 0..1000 {
        vc.push(time(|| verify_consistency_proof(&consistency, key.public()).unwrap()).1);
    }
    println!(
        "verify consistency proof ({} hashes + 2 Ed25519): median {:.2?}",
        consistency.proof.len(),
        median(vc)
    );

    // In-memory proofs on a tree of n leaves (what a long-running server would answer from).
    let mut tree = MerkleTree::new();
    let (_, build) = time(|| {
        for i in 0..n {
            tree.push(ledger::Digest::of(&i.to_be_bytes()));
        }
    });
    let mut inc = Vec::new();
    let mut con = Vec::new();
    for k in 0..1000u64 {
        let i = k * (n / 1000);
        inc.push(time(|| tree.inclusion_proof(i, n).unwrap()).1);
        con.push(time(|| tree.consistency_proof(i + 1, n).unwrap()).1);
    }
    println!(
        "in-memory tree of {n} leaves: built in {build:.2?}; inclusion proof median {:.2?}; consistency proof median {:.2?}",
        median(inc),
        median(con)
    );

    let (r, d) = time(|| verify_ledger_signatures(&path, key.public()).unwrap());
    assert!(r.ok, "{r:?}");
    println!(
        "ledger verify --public-key over {} entries and {} checkpoints: {d:.2?} = {:.2}x ledger verify",
        r.entries,
        r.checkpoints,
        d.as_secs_f64() / verify_chain.as_secs_f64()
    );
}
