//! `eval ledger …`: verify, export, show and annotate a hash-chained ledger.

use super::error::CommandError;
use super::ledger_checks::{ArtifactCheck, check_artifacts, read_entries};
use crate::cli::{LedgerCommand, LedgerNoteArgs, LedgerShowArgs, LedgerVerifyArgs};
use crate::status::{CmdResult, Failure, Status};
use eval_evidence::ledger::{self, Head, LedgerReader, NewEntry, SourceKind};
use std::ops::ControlFlow;

pub fn run(cmd: LedgerCommand) -> CmdResult {
    match cmd {
        LedgerCommand::Verify(args) => verify(args),
        LedgerCommand::Export(args) => {
            let n = ledger::export_jsonl(&args.path, &args.jsonl)?;
            println!("exported {n} entries to {}", args.jsonl.display());
            Ok(Status::Ok)
        }
        LedgerCommand::Show(args) => show(args),
        LedgerCommand::Note(args) => note(args),
        LedgerCommand::Prove(args) => super::proofs::prove(args),
        LedgerCommand::VerifyReceipt(args) => super::proofs::verify_receipt(args),
        LedgerCommand::Consistency(args) => super::proofs::consistency(args),
    }
}

fn verify(args: LedgerVerifyArgs) -> CmdResult {
    let expect = match &args.expect_head {
        None => None,
        Some(text) => {
            Some(Head::parse(text).ok_or_else(|| CommandError::ExpectHead(text.clone()))?)
        }
    };
    if let Some(key) = &args.public_key {
        return super::proofs::verify_signed(&args, key, expect);
    }
    // With `--artifacts` the ledger is read once, and the chain and the artifacts are checked on
    // that one snapshot (a file swapped between two reads would pass one check each).
    let read = match args.artifacts.is_some() {
        true => read_entries(&args.path).map(|entries| {
            let report = ledger::verify_entries(&entries, expect);
            (report, Some(entries))
        }),
        false => ledger::verify(&args.path, expect).map(|report| (report, None)),
    };
    let (report, snapshot) = match read {
        Ok(read) => read,
        Err(e) if args.json => {
            let failure = Failure::from(e);
            let out = serde_json::json!({
                "ok": false, "entries": 0, "head": null,
                "error": {"reason": "unreadable", "message": failure.message},
            });
            println!("{out}");
            return Ok(failure.status);
        }
        Err(e) => return Err(e.into()),
    };
    let artifacts = if report.ok {
        check_artifacts(&args, snapshot.as_deref())
    } else {
        ArtifactCheck::NotAsked
    };
    if args.json {
        let mut error = report.error.as_ref().map(|f| {
            // `VerifyFailure` is a plain struct, so this is always an object; were it not, the
            // message below still says what failed (never a null `error` beside `ok: false`).
            let mut obj = match serde_json::to_value(f) {
                Ok(serde_json::Value::Object(o)) => o,
                _ => serde_json::Map::new(),
            };
            obj.insert("message".into(), f.to_string().into());
            serde_json::Value::Object(obj)
        });
        if let ArtifactCheck::Failed { seq, message } = &artifacts {
            error = Some(serde_json::json!({"reason": "artifact", "seq": seq, "message": message}));
        }
        let ok = report.ok && !matches!(artifacts, ArtifactCheck::Failed { .. });
        let out = serde_json::json!({
            "ok": ok,
            "entries": report.entries,
            "head": report.head,
            "artifacts_verified": artifacts.verified(),
            "error": error,
        });
        println!("{out}");
        return Ok(if ok { Status::Ok } else { Status::Integrity });
    }
    match &report.error {
        None => {
            artifacts.to_result(&args)?;
            println!(
                "ok: {} entries verify; head {}{}",
                report.entries,
                report.head,
                artifacts.suffix()
            );
            Ok(Status::Ok)
        }
        Some(f) => Err(CommandError::LedgerBroken {
            path: args.path.clone(),
            failure: f.clone(),
            verified: report.entries,
        }
        .into()),
    }
}

fn show(args: LedgerShowArgs) -> CmdResult {
    let reader = match ledger::detect_source(&args.path)? {
        SourceKind::Sqlite => LedgerReader::open(&args.path)?,
        SourceKind::Jsonl => {
            // An export is shown from its lines directly.
            let mut shown = Vec::new();
            for e in ledger::JsonlReader::open(&args.path)? {
                let e = e?;
                if keep(&e, &args) {
                    shown.push(e);
                }
            }
            for e in &shown {
                print_entry(e, args.json);
            }
            return Ok(Status::Ok);
        }
    };
    let mut on_entry = |e: ledger::Entry| {
        if keep(&e, &args) {
            print_entry(&e, args.json);
        }
        ControlFlow::Continue(())
    };
    match &args.kind {
        Some(kind) => reader.for_each_of_kind(kind, &mut on_entry)?,
        None => reader.for_each(&mut on_entry)?,
    }
    Ok(Status::Ok)
}

fn keep(e: &ledger::Entry, args: &LedgerShowArgs) -> bool {
    if let Some(kind) = &args.kind
        && &e.kind != kind
    {
        return false;
    }
    match &args.attempt {
        None => true,
        Some(id) => e
            .payload_json()
            .ok()
            .and_then(|p| {
                p.get("attempt")
                    .or_else(|| p.get("attempt_id"))
                    .and_then(|a| a.as_str().map(|a| a == id))
            })
            .unwrap_or(false),
    }
}

fn print_entry(e: &ledger::Entry, json: bool) {
    if json {
        println!("{}", String::from_utf8_lossy(&ledger::jsonl_line(e)));
        return;
    }
    let payload = String::from_utf8_lossy(&e.payload);
    let shown: String = if payload.chars().count() > 120 {
        payload.chars().take(117).chain("...".chars()).collect()
    } else {
        payload.into_owned()
    };
    println!("{:>7}  {}  {:<14} {}", e.seq, e.recorded_at, e.kind, shown);
}

fn note(args: LedgerNoteArgs) -> CmdResult {
    if args.text.trim().is_empty() {
        return Err(CommandError::EmptyNote.into());
    }
    let kind = "note";
    debug_assert!(ledger::HUMAN_KINDS.contains(&kind));
    let writer = eval_evidence::LedgerWriter::open(&args.path)?;
    // Who wrote the note, as far as the environment says; a note without it is still whole.
    let by = std::env::var("USER").unwrap_or_default();
    let appended = writer.append_blocking(
        NewEntry::new(kind, &serde_json::json!({ "text": args.text, "by": by }))
            .map_err(ledger::LedgerError::from)?,
    )?;
    writer.close();
    println!("appended note as seq {}: {}", appended.seq, appended.hash);
    Ok(Status::Ok)
}
