#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]
//! Tree hashing throughput against coreutils in the same run, on trees this benchmark makes in a
//! temporary directory (deleted afterwards):
//!
//! - many small files: 10,000 files of 1–8 KiB in 100 directories, against
//!   `find DIR -type f -print0 | xargs -0 sha256sum`;
//! - a few large files: 4 × 256 MiB (1 GiB), against `sha256sum` over the same files (one
//!   process, one stream) and the same `find | xargs sha256sum` pipeline.
//!
//! Page cache is warm for every contender (one untimed pass first). Prints medians.
//! Run: `cargo bench -p eval-protocols --bench tree_hash` (`EVAL_BENCH_LARGE_MIB=…` to resize).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<F: FnMut()>(runs: usize, mut f: F) -> Duration {
    f(); // warm-up (page cache, thread start-up)
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn sh(script: &str) {
    let st = Command::new("sh").arg("-c").arg(script).status().unwrap();
    assert!(st.success(), "{script}");
}

fn mbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn fill(seed: u64, buf: &mut [u8]) {
    // xorshift: incompressible enough, cheap to make.
    let mut x = seed | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

fn report(name: &str, bytes: u64, files: usize, ours: Duration, others: &[(&str, Duration)]) {
    println!("{name}: {files} files, {:.1} MB", bytes as f64 / 1e6);
    println!(
        "  eval hash_tree                      median {:>8.3} s  {:>8.1} MB/s",
        ours.as_secs_f64(),
        mbps(bytes, ours)
    );
    for (label, d) in others {
        println!(
            "  {label:<35} median {:>8.3} s  {:>8.1} MB/s  (eval is {:.2}x)",
            d.as_secs_f64(),
            mbps(bytes, *d),
            d.as_secs_f64() / ours.as_secs_f64()
        );
    }
}

fn small(dir: &Path) {
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 8192];
    for i in 0..10_000u64 {
        let d = dir.join(format!("d{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&d).unwrap();
        }
        let len = 1024 + (i * 7919 % 7168) as usize;
        fill(i + 1, &mut buf[..len]);
        std::fs::write(d.join(format!("f{i:05}.txt")), &buf[..len]).unwrap();
        bytes += len as u64;
    }
    let ours = time(5, || {
        let m = eval_protocols::hash_tree(dir).unwrap();
        assert_eq!(m.entries.len(), 10_100);
    });
    let q = dir.display();
    let pipeline = time(5, || {
        sh(&format!(
            "find '{q}' -type f -print0 | xargs -0 sha256sum > /dev/null"
        ))
    });
    report(
        "many small files",
        bytes,
        10_000,
        ours,
        &[("find | xargs sha256sum", pipeline)],
    );
}

fn large(dir: &Path) {
    let mib: usize = std::env::var("EVAL_BENCH_LARGE_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let mut buf = vec![0u8; 1 << 20];
    let mut names = Vec::new();
    for i in 0..4u64 {
        let p = dir.join(format!("large{i}.bin"));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
        for j in 0..mib as u64 {
            fill(i * 100_000 + j + 1, &mut buf);
            f.write_all(&buf).unwrap();
        }
        f.flush().unwrap();
        names.push(format!("'{}'", p.display()));
    }
    let bytes = (4 * mib as u64) << 20;
    let ours = time(3, || {
        let m = eval_protocols::hash_tree(dir).unwrap();
        assert_eq!(m.entries.len(), 4);
    });
    let list = names.join(" ");
    let single = time(3, || sh(&format!("sha256sum {list} > /dev/null")));
    let one_file = time(3, || sh(&format!("sha256sum {} > /dev/null", names[0])));
    let q = dir.display();
    let pipeline = time(3, || {
        sh(&format!(
            "find '{q}' -type f -print0 | xargs -0 sha256sum > /dev/null"
        ))
    });
    let ours_one = time(3, || {
        let mut b = vec![0u8; 1 << 20];
        eval_protocols::tree::hash_file(&dir.join("large0.bin"), &mut b).unwrap();
    });
    report(
        "a few large files",
        bytes,
        4,
        ours,
        &[
            ("sha256sum (one process)", single),
            ("find | xargs sha256sum", pipeline),
        ],
    );
    let one = bytes / 4;
    println!(
        "  one file, single stream: eval {:.1} MB/s vs sha256sum {:.1} MB/s",
        mbps(one, ours_one),
        mbps(one, one_file)
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would pass nothing else to skip on.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!(
        "tree hashing benchmark ({} cores)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    let tmp = tempfile::tempdir().unwrap();
    let s = tmp.path().join("small");
    std::fs::create_dir(&s).unwrap();
    small(&s);
    std::fs::remove_dir_all(&s).unwrap();
    let l = tmp.path().join("large");
    std::fs::create_dir(&l).unwrap();
    large(&l);
    drop(tmp); // deletes the trees
}
