//! A deterministic ustar writer: entries as given (callers sort them), owner 0:0, mtime 0,
//! no user/group names, so equal inputs give equal bytes.

pub enum Body<'a> {
    File { bytes: &'a [u8], mode: u32 },
    Dir { mode: u32 },
    Symlink { target: &'a str },
}

#[derive(Debug, thiserror::Error)]
#[error("tar: path {0:?} is too long for ustar")]
pub struct TarError(pub String);

fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let s = format!("{value:0width$o}");
    let b = s.as_bytes();
    let start = b.len().saturating_sub(width);
    field[..width].copy_from_slice(&b[start..]);
    field[width] = 0;
}

fn split_name(path: &str) -> Result<(&str, &str), TarError> {
    if path.len() <= 100 {
        return Ok(("", path));
    }
    for (i, c) in path.char_indices() {
        if c == '/' && i <= 155 && path.len() - i - 1 <= 100 {
            return Ok((&path[..i], &path[i + 1..]));
        }
    }
    Err(TarError(path.to_owned()))
}

/// Appends one entry; `path` is relative (no leading `/`), directories end without `/`.
pub fn append(out: &mut Vec<u8>, path: &str, body: &Body<'_>) -> Result<(), TarError> {
    let mut h = [0u8; 512];
    let name = match body {
        Body::Dir { .. } => format!("{path}/"),
        _ => path.to_owned(),
    };
    let (prefix, name) = split_name(&name)?;
    h[..name.len()].copy_from_slice(name.as_bytes());
    let (mode, size, flag) = match body {
        Body::File { bytes, mode } => (*mode, bytes.len() as u64, b'0'),
        Body::Dir { mode } => (*mode, 0, b'5'),
        Body::Symlink { target } => {
            if target.len() > 100 {
                return Err(TarError(target.to_string()));
            }
            h[157..157 + target.len()].copy_from_slice(target.as_bytes());
            (0o777, 0, b'2')
        }
    };
    octal(&mut h[100..108], u64::from(mode));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0);
    h[156] = flag;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    octal(&mut h[329..337], 0);
    octal(&mut h[337..345], 0);
    h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    out.extend_from_slice(&h);
    if let Body::File { bytes, .. } = body {
        out.extend_from_slice(bytes);
        let pad = (512 - bytes.len() % 512) % 512;
        out.extend(std::iter::repeat_n(0u8, pad));
    }
    Ok(())
}

/// Ends an archive (two zero blocks).
pub fn finish(out: &mut Vec<u8>) {
    out.extend(std::iter::repeat_n(0u8, 1024));
}
