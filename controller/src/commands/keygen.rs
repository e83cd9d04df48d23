//! `eval keygen --out FILE`, and the two ways every command obtains keys: the private key only
//! from a file (`--signing-key-file` or `EVAL_SIGNING_KEY_FILE`, never an argument value), the
//! public key as its text or a file holding it.

use crate::cli::KeygenArgs;
use crate::exit::{CmdResult, Failure, Status};
use eval_evidence::signing::{KEY_NAME, PublicKey, SigningKeyPair};
use std::path::{Path, PathBuf};

pub fn run(args: KeygenArgs) -> CmdResult {
    let public_path = public_key_path(&args.out);
    for p in [&args.out, &public_path] {
        if p.exists() || p.is_symlink() {
            return Err(Failure::usage(format!(
                "{}: already exists; refusing to overwrite a key",
                p.display()
            )));
        }
    }
    let key = SigningKeyPair::generate(KEY_NAME)?;
    key.write_new(&args.out)?;
    let public = key.public().to_string();
    std::fs::write(&public_path, format!("{public}\n"))
        .map_err(|e| Failure::usage(format!("{}: {e}", public_path.display())))?;
    println!("{public}");
    #[allow(clippy::print_stderr)] // stdout stays the public key alone, for scripts
    {
        eprintln!(
            "wrote the private key to {} (mode 0600) and the public key to {}; name the public key in the protocol",
            args.out.display(),
            public_path.display()
        );
    }
    Ok(Status::Ok)
}

/// `FILE.pub` next to the private key `FILE`.
pub fn public_key_path(private: &Path) -> PathBuf {
    let mut name = private.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// Loads the signing key from the file clap took from `--signing-key-file` or
/// `EVAL_SIGNING_KEY_FILE`.
#[allow(dead_code)] // called by `eval run` and `eval report`
pub fn load_signing_key(path: Option<&Path>) -> Result<SigningKeyPair, Failure> {
    let path = path.ok_or_else(|| {
        Failure::usage(
            "no signing key: pass --signing-key-file FILE or set EVAL_SIGNING_KEY_FILE (make one with `eval keygen --out FILE`)",
        )
    })?;
    Ok(SigningKeyPair::load(path)?)
}

/// Parses `--public-key`: the key text (`name+keyid+base64`) or the path of a file holding it.
pub fn parse_public_key(arg: &str) -> Result<PublicKey, Failure> {
    match PublicKey::parse(arg) {
        Ok(key) => Ok(key),
        Err(parse_err) => {
            let path = Path::new(arg);
            if !path.is_file() {
                return Err(Failure::usage(format!(
                    "--public-key: {parse_err}, and {arg:?} is not a file"
                )));
            }
            let text = std::fs::read_to_string(path)
                .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
            PublicKey::parse(&text)
                .map_err(|e| Failure::usage(format!("--public-key {}: {e}", path.display())))
        }
    }
}
