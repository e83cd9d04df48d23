//! `eval show ATTEMPT`: prints one attempt's story as `eval_report::show` reads it (text, or
//! `--json` in the `eval.show/1` format of docs/show.md).

use super::error::CommandError;
use crate::cli::ShowArgs;
use crate::status::{CmdResult, Status};
use eval_report::show::{build, render_text};

pub fn run(args: ShowArgs) -> CmdResult {
    let view = build(&args.state, &args.matrix, &args.attempt)?;
    if args.json {
        let text = serde_json::to_string_pretty(&view)
            .map_err(CommandError::encode("print the attempt"))?;
        println!("{text}");
        return Ok(Status::Ok);
    }
    use std::io::IsTerminal as _;
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    print!("{}", render_text(&view, colour));
    Ok(Status::Ok)
}
