//! `eval keygen --out FILE`, and the two ways every command obtains keys: the private key only
//! from a file (`--signing-key-file` or `EVAL_SIGNING_KEY_FILE`, never an argument value), the
//! public key as its text or a file holding it.

use super::error::CommandError;
use crate::cli::KeygenArgs;
use crate::status::{CmdResult, Failure, Status};

use eval_evidence::signing::{KEY_NAME, PublicKey, SigningError, SigningKeyPair};
use std::path::{Path, PathBuf};

/// What keeps `eval keygen` from writing a key, or a command from obtaining one; each kind's exit
/// status is decided in `exit::key_status`.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{0}: already exists; refusing to overwrite a key")]
    Exists(PathBuf),
    #[error(
        "no signing key: pass --signing-key-file FILE or set EVAL_SIGNING_KEY_FILE (make one with `eval keygen --out FILE`)"
    )]
    NoSigningKey,
    /// `--public-key` is neither a key's text nor an existing file.
    #[error("--public-key: {parse}, and {arg:?} is not a file")]
    PublicKeyArg { arg: String, parse: SigningError },
    /// The file `--public-key` names does not hold a key's text.
    #[error("--public-key {path}: {source}")]
    PublicKeyFile {
        path: PathBuf,
        #[source]
        source: SigningError,
    },
}

pub fn run(args: KeygenArgs) -> CmdResult {
    let public_path = public_key_path(&args.out);
    for p in [&args.out, &public_path] {
        if p.exists() || p.is_symlink() {
            return Err(KeyError::Exists(p.clone()).into());
        }
    }
    let key = SigningKeyPair::generate(KEY_NAME)?;
    key.write_new(&args.out)?;
    let public = key.public().to_string();
    std::fs::write(&public_path, format!("{public}\n"))
        .map_err(CommandError::path(&public_path))?;
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
    let path = path.ok_or(KeyError::NoSigningKey)?;
    Ok(SigningKeyPair::load(path)?)
}

/// Parses `--public-key`: the key text (`name+keyid+base64`) or the path of a file holding it.
pub fn parse_public_key(arg: &str) -> Result<PublicKey, Failure> {
    match PublicKey::parse(arg) {
        Ok(key) => Ok(key),
        Err(parse_err) => {
            let path = Path::new(arg);
            if !path.is_file() {
                return Err(KeyError::PublicKeyArg {
                    arg: arg.to_owned(),
                    parse: parse_err,
                }
                .into());
            }
            let text = std::fs::read_to_string(path).map_err(CommandError::path(path))?;
            PublicKey::parse(&text).map_err(|source| {
                KeyError::PublicKeyFile {
                    path: path.to_path_buf(),
                    source,
                }
                .into()
            })
        }
    }
}
