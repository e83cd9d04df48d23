//! Ledger benchmark: append throughput (one by one and batched, acknowledged after commit) and
//! verification of a 1,000,000-entry ledger with ~300-byte payloads, against the machine's
//! `sha256sum` over the same payload bytes (the yardstick, measured in the same run).
//!
//! `cargo bench -p eval-evidence --bench ledger` (set LEDGER_BENCH_ENTRIES to change the size).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use eval_evidence::ledger::{self, LedgerWriter, NewEntry};
use std::time::{Duration, Instant};

fn payload(i: u64) -> serde_json::Value {
    // ~300 bytes of canonical JSON, different for every entry.
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

fn main() {
    let n: u64 = std::env::var("LEDGER_BENCH_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();

    // One by one: each append waits for its own commit (synchronous=FULL, WAL).
    let single = dir.path().join("single.sqlite");
    let w = LedgerWriter::open(&single).unwrap();
    let k = 2_000;
    let t = Instant::now();
    for i in 0..k {
        w.append_blocking(NewEntry::new("bench", &payload(i)).unwrap())
            .unwrap();
    }
    let one_by_one = t.elapsed();
    w.close();
    println!(
        "append one-by-one (ack after commit): {k} entries in {:.2?} = {:.0} entries/s",
        one_by_one,
        k as f64 / one_by_one.as_secs_f64()
    );

    // Concurrent producers: group commit folds what is queued into one transaction.
    let conc = dir.path().join("concurrent.sqlite");
    let w = LedgerWriter::open(&conc).unwrap();
    let per = 5_000u64;
    let t = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for p in 0..8u64 {
            let w = w.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..per {
                    w.append(NewEntry::new("bench", &payload(p * per + i)).unwrap())
                        .await
                        .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let concurrent = t.elapsed();
    w.close();
    println!(
        "append, 8 concurrent producers (group commit): {} entries in {:.2?} = {:.0} entries/s",
        8 * per,
        concurrent,
        (8 * per) as f64 / concurrent.as_secs_f64()
    );

    // Batched: 1,000 entries per transaction; this also builds the big ledger.
    let big = dir.path().join("big.sqlite");
    let w = LedgerWriter::open(&big).unwrap();
    let raw = dir.path().join("payloads.bin");
    let mut raw_bytes: Vec<u8> = Vec::new();
    let t = Instant::now();
    let mut i = 0u64;
    while i < n {
        let batch: Vec<NewEntry> = (i..(i + 1000).min(n))
            .map(|j| NewEntry::new("bench", &payload(j)).unwrap())
            .collect();
        for e in &batch {
            raw_bytes.extend_from_slice(e.payload());
        }
        rt.block_on(w.append_batch(batch)).unwrap();
        i += 1000;
    }
    let batched = t.elapsed();
    w.close();
    let avg_payload = raw_bytes.len() as f64 / n as f64;
    std::fs::write(&raw, &raw_bytes).unwrap();
    drop(raw_bytes);
    println!(
        "append batched (1,000/transaction): {n} entries in {:.2?} = {:.0} entries/s (avg payload {avg_payload:.0} bytes)",
        batched,
        n as f64 / batched.as_secs_f64()
    );

    // Verify vs sha256sum on the same payload bytes, interleaved, median of 5.
    let mut verify_times = Vec::new();
    let mut sha_times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let r = ledger::verify(&big, None).unwrap();
        verify_times.push(t.elapsed());
        assert!(r.ok && r.entries == n);
        let t = Instant::now();
        let out = std::process::Command::new("sha256sum")
            .arg(&raw)
            .output()
            .unwrap();
        sha_times.push(t.elapsed());
        assert!(out.status.success());
    }
    let v = median(verify_times);
    let s = median(sha_times);
    let mb = std::fs::metadata(&raw).unwrap().len() as f64 / 1e6;
    println!(
        "verify {n} entries: median {:.2?}; sha256sum over the same {mb:.0} MB of payloads: median {:.2?}; ratio {:.2}x",
        v,
        s,
        v.as_secs_f64() / s.as_secs_f64()
    );
    println!(
        "ledger file: {:.0} MB",
        std::fs::metadata(&big).unwrap().len() as f64 / 1e6
    );
}
